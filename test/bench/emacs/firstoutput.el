;;; firstoutput.el --- A command's first output on screen: facade against compile  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by test/bench/emacs/tty.sh in an `emacs -nw' under tmux (make
;; bench-first-output): redisplay only happens in an Emacs with a
;; terminal, and what a person feels is the time until the text is
;; drawn.
;;
;; Each run starts `printf ready; sleep 5' and times from the call to
;; the first redisplay (`pre-redisplay-functions') that finds `ready' in
;; the output buffer while that buffer is in a window: once through
;; `mevedel-execution-shell-command', once through `compile', the two
;; interleaved, the Emacs waiting in its command loop in between as it
;; would for a person.  One warm-up run of each is not counted (the
;; helper's start, `compile''s first load).  The figures are the p50 and
;; p90 of `firstoutput-bench--runs' runs of each side, and the ratio of
;; the p50s; the goal is at most 1.5x and under 50 ms.
;;
;; The results go to the file named by $MEVEDEL_BENCH_OUT; Emacs exits
;; when they are written.  The helper runs with a private HOME.

;;; Code:

(require 'cl-lib)
(require 'compile)
(require 'subr-x)
(require 'bench-common
         (expand-file-name "bench-common.el"
                           (file-name-directory
                            (or load-file-name
                                (bound-and-true-p byte-compile-current-file)
                                buffer-file-name))))
;; The facade as a package install leaves it: `compile' is byte code too.
(bench-common-use-compiled-facade)
(require 'mevedel-execution)

(defconst firstoutput-bench--runs 20
  "Counted runs of each side.")

(defconst firstoutput-bench--command
  (let ((c (getenv "MEVEDEL_BENCH_COMMAND")))
    (if (or (null c) (string-empty-p c)) "printf ready; sleep 5" c))
  "The command of both sides.")

(defconst firstoutput-bench--limit 20.0
  "Seconds after which one run counts as hung.")

(defvar firstoutput-bench--times nil
  "Alist of (SIDE . TIMES-IN-MS), newest first.")

(defvar firstoutput-bench--pending nil
  "The run waiting for its redisplay: (SIDE START BUFFER COUNTED).")

(defun firstoutput-bench--start (side)
  "Start one run of SIDE (`facade' or `compile'); return its output buffer."
  (pcase side
    ('facade (mevedel-execution-shell-command firstoutput-bench--command))
    ('compile
     ;; A buffer of its own per run, as the facade's: reusing one
     ;; would first stop the run before, which `compile' waits a
     ;; second for.
     (let ((compilation-ask-about-save nil)
           (compilation-buffer-name-function
            (lambda (_mode) (generate-new-buffer-name "*compilation*"))))
       (compile firstoutput-bench--command)))))

(defun firstoutput-bench--drawn-p (buffer)
  "Non-nil when BUFFER shows the output `ready' and is in a window.
At the start of a line: `compile' shows the command itself above."
  (and (buffer-live-p buffer)
       (get-buffer-window buffer t)
       (with-current-buffer buffer
         (save-excursion
           (goto-char (point-min))
           (re-search-forward "^ready" nil t)))))

(defun firstoutput-bench--on-redisplay (&rest _)
  "Finish the pending run when this redisplay draws its output."
  (pcase firstoutput-bench--pending
    (`(,side ,start ,buffer ,counted)
     (cond
      ((firstoutput-bench--drawn-p buffer)
       (setq firstoutput-bench--pending nil)
       (when counted
         (push (* 1000 (- (float-time) start))
               (alist-get side firstoutput-bench--times)))
       ;; The next run from the command loop, not from inside redisplay.
       (run-at-time 0.05 nil #'firstoutput-bench--next))
      ((> (- (float-time) start) firstoutput-bench--limit)
       (firstoutput-bench--finish
        (format "error: %s run: no `ready' on screen within %s s" side
                firstoutput-bench--limit)))))))

(defvar firstoutput-bench--plan nil
  "The runs still to make: a list of (SIDE . COUNTED).")

(defun firstoutput-bench--next ()
  "Make the next run of the plan, or report."
  (if-let ((run (pop firstoutput-bench--plan)))
      (let* ((start (float-time))
             (buffer (firstoutput-bench--start (car run))))
        (setq firstoutput-bench--pending (list (car run) start buffer (cdr run)))
        ;; A redisplay soon, as after any command; the hook times it.
        (force-mode-line-update t))
    (firstoutput-bench--finish nil)))

(defun firstoutput-bench--finish (error)
  "Write the report (or ERROR) and exit."
  (remove-hook 'pre-redisplay-functions #'firstoutput-bench--on-redisplay)
  (with-temp-file (getenv "MEVEDEL_BENCH_OUT")
    (if error
        (insert error "\n")
      (let* ((f (alist-get 'facade firstoutput-bench--times))
             (c (alist-get 'compile firstoutput-bench--times))
             (f50 (bench-common-percentile f 50))
             (c50 (bench-common-percentile c 50))
             (ratio (/ f50 (max c50 0.001))))
        (insert (format "first output on screen, `%s', %d runs each, %s\n"
                        firstoutput-bench--command (length f) (emacs-version)))
        (insert (format "  mevedel-execution-shell-command  p50 %.1f ms  p90 %.1f ms\n"
                        f50 (bench-common-percentile f 90)))
        (insert (format "  compile                          p50 %.1f ms  p90 %.1f ms\n"
                        c50 (bench-common-percentile c 90)))
        (insert (format "  ratio of the p50s %.2fx (goal <= 1.5x: %s); facade p50 under 50 ms: %s\n"
                        ratio (if (<= ratio 1.5) "PASS" "MISS")
                        (if (< f50 50) "PASS" "MISS"))))))
  (kill-emacs (if error 1 0)))

(setq mevedel-execution-program
      (or (getenv "MEVEDEL_EXEC_PROGRAM") mevedel-execution-program))
;; Both sides' buffers in the one window, one after the other.
(setq display-buffer-alist '((".*" display-buffer-same-window)))
(setq firstoutput-bench--plan
      (append (list '(facade . nil) '(compile . nil))
              (cl-loop repeat firstoutput-bench--runs
                       append (list '(facade . t) '(compile . t)))))
(add-hook 'pre-redisplay-functions #'firstoutput-bench--on-redisplay)
(run-at-time 0.5 nil #'firstoutput-bench--next)

;;; firstoutput.el ends here

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
;; helper's start, `compile''s first load); its time is reported apart.  The figures are the p50 and
;; p90 of `firstoutput-bench--runs' runs of each side, and the ratio of
;; the p50s; the goal is at most 1.5x and under 50 ms.
;;
;; The results go to the file named by $MEVEDEL_BENCH_OUT; Emacs exits
;; when they are written.  The helper runs with a private HOME.
;;
;; With MEVEDEL_BENCH_TRACE=1 the report adds each side's timeline, the
;; p50 of each step in ms from the call: the facade's request written,
;; its answer and its first output read, the command's return; compile's
;; process made, its first output read.  The advice that notes them
;; costs a few microseconds a step, so the traced figures are a little
;; slower than the untraced ones.

;;; Code:

(require 'cl-lib)
(require 'compile)
(require 'subr-x)
(require 'bench-common) ; the Makefile's targets and tty.sh put it on the load path
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

(defconst firstoutput-bench--trace (equal (getenv "MEVEDEL_BENCH_TRACE") "1")
  "Non-nil: note each run's steps (`firstoutput-bench--note').")

(defvar firstoutput-bench--steps nil
  "The pending run's steps, newest first: (NAME . MS-FROM-ITS-START).")

(defvar firstoutput-bench--timelines nil
  "Alist of (SIDE . LIST-OF-STEPS) of the counted runs.")

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
       (unless counted
         (push (cons side (* 1000 (- (float-time) start))) firstoutput-bench--cold))
       (when counted
         (push (* 1000 (- (float-time) start))
               (alist-get side firstoutput-bench--times))
         (when firstoutput-bench--trace
           (push (cons (cons "drawn" (car (alist-get side firstoutput-bench--times)))
                       firstoutput-bench--steps)
                 (alist-get side firstoutput-bench--timelines))))
       ;; The next run from the command loop, not from inside redisplay.
       (run-at-time 0.05 nil #'firstoutput-bench--next))
      ((> (- (float-time) start) firstoutput-bench--limit)
       (firstoutput-bench--finish
        (format "error: %s run: no `ready' on screen within %s s" side
                firstoutput-bench--limit)))))))

(defvar firstoutput-bench--cold nil
  "The uncounted first run of each side: ((SIDE . MS) ...).")

(defvar firstoutput-bench--plan nil
  "The runs still to make: a list of (SIDE . COUNTED).")

(defun firstoutput-bench--next ()
  "Make the next run of the plan, or report."
  (if-let ((run (pop firstoutput-bench--plan)))
      (let* ((start (float-time))
             (buffer (progn
                       (when firstoutput-bench--trace ; for its notes
                         (setq firstoutput-bench--pending (list (car run) start nil nil)
                               firstoutput-bench--steps nil))
                       (firstoutput-bench--start (car run)))))
        (when firstoutput-bench--trace (firstoutput-bench--note "command returned"))
        (setq firstoutput-bench--pending (list (car run) start buffer (cdr run)))
        ;; A redisplay soon, as after any command; the hook times it.
        (force-mode-line-update t))
    (firstoutput-bench--finish nil)))

(defun firstoutput-bench--note (name &optional only)
  "Note the step NAME of the pending run, the first time it happens.
ONLY, a side, notes it only in that side's runs."
  (pcase firstoutput-bench--pending
    (`(,side ,start ,_ ,_)
     (unless (or (assoc name firstoutput-bench--steps) (and only (not (eq only side))))
       (push (cons name (* 1000 (- (float-time) start))) firstoutput-bench--steps)))))

(defun firstoutput-bench--noting (name side)
  "Return advice that notes NAME in SIDE's runs."
  (lambda (&rest _) (firstoutput-bench--note name side)))

(defun firstoutput-bench--read-noter (_proc string)
  "Note which of the helper's messages STRING, read by Emacs, holds."
  (when (string-search "\"result\"" string) (firstoutput-bench--note "answer read" 'facade))
  (when (string-search "exec/output" string) (firstoutput-bench--note "output read" 'facade)))

(when firstoutput-bench--trace
  (advice-add 'jsonrpc-connection-send :after (firstoutput-bench--noting "request written" 'facade))
  (advice-add 'jsonrpc--process-filter :before #'firstoutput-bench--read-noter)
  (advice-add 'make-process :after (firstoutput-bench--noting "process made" 'compile))
  (advice-add 'compilation-filter :before (firstoutput-bench--noting "output read" 'compile)))

(defun firstoutput-bench--timeline (side)
  "Return the lines of SIDE's timeline: each step's p50, in the order of the p50s."
  (let* ((runs (alist-get side firstoutput-bench--timelines))
         (names (delete-dups (mapcar #'car (apply #'append runs))))
         (steps (mapcar (lambda (name)
                          (cons name (bench-common-percentile
                                      (delq nil (mapcar (lambda (r) (cdr (assoc name r))) runs))
                                      50)))
                        names)))
    (mapconcat (lambda (s) (format "    %-22s %6.2f ms\n" (car s) (cdr s)))
               (sort steps (lambda (a b) (< (cdr a) (cdr b))))
               "")))

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
        (insert (format "  the first run of each, not counted: %s\n"
                        (mapconcat (lambda (c) (format "%s %.0f ms" (car c) (cdr c)))
                                   (reverse firstoutput-bench--cold) ", ")))
        (insert (format "  ratio of the p50s %.2fx (goal <= 1.5x: %s); facade p50 under 50 ms: %s\n"
                        ratio (if (<= ratio 1.5) "PASS" "MISS")
                        (if (< f50 50) "PASS" "MISS")))
        (when firstoutput-bench--trace
          (dolist (side '(facade compile))
            (insert (format "  %s, p50 of each step from the call:\n%s" side
                            (firstoutput-bench--timeline side))))))))
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

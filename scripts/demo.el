;;; demo.el --- A short scripted Emacs session through the facade  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by `make run': starts the helper through mevedel-execution.el,
;; runs a long command that yields, polls it to the end, then starts one
;; that never ends and stops it, runs a one-shot into its timeout and
;; a form in a batch Emacs, printing what a user of the agent would
;; see.  MEVEDEL_EXEC_PROGRAM names the helper binary.

;;; Code:

(require 'cl-lib)
(require 'mevedel-execution)

(defvar demo--failed nil "Non-nil when the demo hit an error.")

(defun demo--say (fmt &rest args)
  "Print FMT with ARGS on standard output."
  (princ (concat (apply #'format fmt args) "\n")))

(defun demo--await (start)
  "Call START with a callback; return what the callback receives."
  (let ((box nil) (deadline (+ (float-time) 60)))
    (funcall start (lambda (v) (setq box (list v))))
    (while (and (not box) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or (car box) (error "No answer from the helper within 60 s"))))

(defun demo--facts (obs)
  "Describe the facts of OBS in one line."
  (let ((f (plist-get obs :facts)))
    (format "%s  state=%s%s%s%s  output=%d bytes in %s"
            (plist-get f :execution-id) (plist-get f :state)
            (if (plist-get f :termination) (format " termination=%s" (plist-get f :termination)) "")
            (if (plist-get f :exit-code) (format " exit=%d" (plist-get f :exit-code)) "")
            (if (plist-get f :signal) (format " signal=%s" (plist-get f :signal)) "")
            (plist-get f :output-bytes) (plist-get f :output-address))))

(defun demo--show (title obs)
  "Print TITLE, OBS's output (indented) and its facts."
  (demo--say "%s" title)
  (let ((out (string-trim-right (or (plist-get obs :output) ""))))
    (unless (string-empty-p out)
      (dolist (line (split-string out "\n"))
        (demo--say "    | %s" line))))
  (demo--say "    %s%s" (demo--facts obs) (if (plist-get obs :final) "  [final]" "")))

(let* ((mevedel-execution-program (or (getenv "MEVEDEL_EXEC_PROGRAM") mevedel-execution-program))
       (state-dir (make-temp-file "mevedel-demo-" t))
       (session (mevedel-execution-open-session "demo" state-dir))
       (command "for i in 1 2 3 4 5; do echo \"step $i of 5\"; sleep 0.4; done; echo done")
       (obs nil))
  ;; An error is caught here: in batch mode an uncaught one would leave
  ;; through the debugger before the cleanup below ran.
  (unwind-protect
      (condition-case err
       (progn
        (demo--say "mevedel-exec demo: a session in %s" state-dir)
        (demo--say "\n$ %s   (yield after 700 ms)" command)
        (setq obs (demo--await
                   (lambda (cb)
                     (mevedel-execution-start-bash cb :session session :command command
                                                   :yield-time-ms 700 :label "five steps"))))
        (demo--show "yielded: the command goes on in the background" obs)
        (let ((id (plist-get (plist-get obs :facts) :execution-id)))
          (demo--say "running now: %s"
                     (mapconcat (lambda (f) (format "%s (%s)" (plist-get f :execution-id) (plist-get f :label)))
                                (mevedel-execution-list session mevedel-execution-root-owner) ", "))
          (while (not (plist-get obs :final))
            (setq obs (demo--await
                       (lambda (cb) (mevedel-execution-observe session mevedel-execution-root-owner id cb :wait-ms 500))))
            (demo--show (if (plist-get obs :final) "poll: finished" "poll") obs)))
        (demo--say "\n$ sleep 1000   (yield at once, then stop it)")
        (setq obs (demo--await
                   (lambda (cb)
                     (mevedel-execution-start-bash cb :session session :command "sleep 1000"
                                                   :yield-time-ms 0))))
        (demo--show "yielded" obs)
        (setq obs (demo--await
                   (lambda (cb)
                     (mevedel-execution-stop session mevedel-execution-root-owner
                                             (plist-get (plist-get obs :facts) :execution-id) cb))))
        (demo--show "stopped" obs)
        (demo--say "\n$ sleep 5 &")
        (let ((err (plist-get (demo--await
                               (lambda (cb) (mevedel-execution-start-bash cb :session session :command "sleep 5 &")))
                              :error)))
          (demo--say "refused (%s): %s" (plist-get err :kind) (plist-get err :message)))
        (demo--say "\n$ one-shot (\"sh\" \"-c\" \"echo waiting; sleep 30\")   (timeout 1 s)")
        (let ((r (mevedel-execution-run-one-shot
                  :name "slow" :command '("sh" "-c" "echo waiting; sleep 30")
                  :timeout 1 :session session)))
          (demo--say "    | %s" (string-trim-right (plist-get r :output)))
          (demo--say "    timed-out-p=%s termination=%s exit-code=%s after %.1f s"
                     (plist-get r :timed-out-p) (plist-get r :termination)
                     (plist-get r :exit-code) (plist-get r :wall-time-seconds)))
        (demo--say "\n(mevedel-execution-eval '(progn (princ \"hello from a batch Emacs\") (emacs-version)))")
        (let ((r (mevedel-execution-eval
                  '(progn (princ "hello from a batch Emacs\n") (emacs-version))
                  :session session :timeout 30)))
          (demo--say "    | %s" (string-trim-right (plist-get r :output)))
          (demo--say "    value: %s" (plist-get r :value)))
        (let ((r (mevedel-execution-eval '(car 1) :session session :timeout 30)))
          (demo--say "(mevedel-execution-eval '(car 1)) signals: %s" (plist-get r :error-message)))
        ;; What a person does at M-x: a command in the project's own
        ;; session, its live output buffer, and the panel keeping it.
        (let* ((mevedel-execution-person-directory (expand-file-name "person" state-dir))
               (default-directory (file-name-as-directory state-dir))
               (messages nil)
               (buffer nil))
          (demo--say "\nM-x mevedel-execution-shell-command RET printf '\\033[1mbold\\033[0m\\n'; echo 'x.c:3:1: error: oops'; exit 2")
          (cl-letf* ((orig (symbol-function 'message))
                     ((symbol-function 'message)
                      (lambda (fmt &rest args)
                        (when fmt (push (apply #'format fmt args) messages))
                        (apply orig fmt args))))
            (setq buffer (mevedel-execution-shell-command
                          "printf '\\033[1mbold\\033[0m\\n'; echo 'x.c:3:1: error: oops'; exit 2"))
            (let ((deadline (+ (float-time) 30)))
              (while (and (not (string-match-p "oops" (with-current-buffer buffer (buffer-string))))
                          (< (float-time) deadline))
                (accept-process-output nil 0.05))))
          (with-current-buffer buffer
            (demo--say "    %s (%s)" (buffer-name) major-mode)
            (demo--say "    header: %s" (substring-no-properties (mevedel-execution-spool--header)))
            (dolist (line (split-string (string-trim-right (buffer-string)) "\n"))
              (demo--say "    | %s" line)))
          (demo--say "    echo area: %s" (or (cl-find-if (lambda (m) (string-prefix-p "Build" m)) messages) "-"))
          (with-current-buffer (mevedel-execution-panel
                                (mevedel-execution-person-session default-directory))
            (demo--say "M-x mevedel-execution-panel (the finished row stays until d):")
            (dolist (line (split-string (string-trim-right (buffer-string)) "\n"))
              (demo--say "    %s" line)))))
       (error (demo--say "demo failed: %s" (error-message-string err))
              (setq demo--failed t)))
    (mevedel-execution-teardown-all)
    (delete-directory state-dir t)))

(kill-emacs (if demo--failed 1 0))

;;; demo.el ends here

;;; demo.el --- A short scripted Emacs session through the facade  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by `make run': starts the helper through mevedel-execution.el,
;; runs a long command that yields, polls it to the end, then starts one
;; that never ends and stops it, runs a one-shot into its timeout and
;; a form in a batch Emacs, printing what a user of the agent would
;; see.  MEVEDEL_EXEC_PROGRAM names the helper binary.

;;; Code:

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
          (demo--say "(mevedel-execution-eval '(car 1)) signals: %s" (plist-get r :error-message))))
       (error (demo--say "demo failed: %s" (error-message-string err))
              (setq demo--failed t)))
    (mevedel-execution-teardown-all)
    (delete-directory state-dir t)))

(kill-emacs (if demo--failed 1 0))

;;; demo.el ends here

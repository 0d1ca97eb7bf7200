;;; mevedel-execution-oneshot-test.el --- One-shots, helpers, Eval, owners  -*- lexical-binding: t; -*-

;;; Commentary:

;; The client API of shared/design/client-api.md that goes beyond managed
;; Bash, called with the client's argument lists, against the real
;; helper.  Every wait is bounded; none sleeps to synchronise.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun mevedel-execution-oneshot-test--gone-p (pid)
  "Return non-nil when no process PID is left."
  (not (process-attributes pid)))

(defun mevedel-execution-oneshot-test--read-pid (file)
  "Wait for FILE to hold a pid and return it."
  (mevedel-execution-test--wait-until
   (lambda () (and (file-exists-p file)
                   (> (file-attribute-size (file-attributes file)) 0)))
   (format "a pid in %s" file))
  (with-temp-buffer
    (insert-file-contents file)
    (string-to-number (buffer-string))))

(ert-deftest mevedel-execution-oneshot-test-run-one-shot ()
  "An argv with spaces and quotes runs as given; a timeout times out."
  (mevedel-execution-test--with-helper session
    (let ((r (mevedel-execution-run-one-shot
              :name "printf" :command '("printf" "[%s]" "a b" "it's \"quoted\"" "$HOME")
              :workdir default-directory :writable-roots (list default-directory)
              :timeout 30 :additional-permissions nil :sandbox-permissions nil
              :session session :owner "/agent")))
      (should (equal (plist-get r :output) "[a b][it's \"quoted\"][$HOME]"))
      (should (eql (plist-get r :exit-code) 0))
      (should (eql (plist-get r :output-bytes) 27))
      (should (equal (plist-get r :termination) "exited"))
      (should-not (plist-get r :timed-out-p))
      (should-not (plist-get r :output-limit-p))
      (should-not (plist-get r :error))
      (should (numberp (plist-get r :wall-time-seconds)))
      (should (equal (plist-get (plist-get r :facts) :kind) "one-shot"))
      (should (equal (plist-get (plist-get r :facts) :owner) "/agent")))
    (let ((r (mevedel-execution-run-one-shot :command '("sleep" "100") :timeout 0.3
                                             :session session)))
      (should (plist-get r :timed-out-p))
      (should (equal (plist-get r :termination) "timed-out"))
      (should (eql (plist-get r :exit-code) -1))
      (should (< (plist-get r :wall-time-seconds) 10)))
    ;; No shell unless the list says so; a non-zero exit is no error.
    (let ((r (mevedel-execution-run-one-shot :command '("sh" "-c" "echo out; echo err >&2; exit 4")
                                             :session session)))
      (should (eql (plist-get r :exit-code) 4))
      (should (string-match-p "out" (plist-get r :output)))
      (should (string-match-p "err" (plist-get r :output)))
      (should-not (plist-get r :error)))
    ;; It could not start: the error says so.
    (let ((r (mevedel-execution-run-one-shot :command '("/nonexistent/program") :session session)))
      (should (eql (plist-get r :exit-code) -1))
      (should (eq (car (plist-get r :error)) 'mevedel-execution-error)))
    (should-error (mevedel-execution-run-one-shot :command "echo not a list" :session session)
                  :type 'wrong-type-argument)
    (should-error (mevedel-execution-run-one-shot :command '("true") :timeout -1 :session session)
                  :type 'wrong-type-argument)))

(ert-deftest mevedel-execution-oneshot-test-whole-output ()
  "Output beyond the observation's bound is read whole from the log."
  (mevedel-execution-test--with-helper session
    (let* ((n 3000000)
           (r (mevedel-execution-run-one-shot
               :command (list "sh" "-c" (format "head -c %d /dev/zero | tr '\\0' x; echo END" n))
               :session session)))
      (should (eql (plist-get r :output-bytes) (+ n 4)))
      (should (eql (length (plist-get r :output)) (+ n 4)))
      (should (string-suffix-p "xEND\n" (plist-get r :output)))
      (should-not (string-match-p "omitted" (plist-get r :output))))))

(ert-deftest mevedel-execution-oneshot-test-start-one-shot ()
  "The asynchronous form gives CALLBACK the same terminal facts."
  (mevedel-execution-test--with-helper session
    (let ((r (mevedel-execution-test--await
              (lambda (cb)
                (mevedel-execution-start-one-shot
                 cb :name "echo" :command '("echo" "hi") :workdir default-directory
                 :writable-roots nil :timeout 10 :additional-permissions nil
                 :sandbox-permissions nil :session session :owner "/o"
                 :teardown-function (lambda () (error "Not torn down")))))))
      (should (equal (plist-get r :output) "hi\n"))
      (should (eql (plist-get r :exit-code) 0)))))

(ert-deftest mevedel-execution-oneshot-test-helper-scratch ()
  "A helper runs in a scratch directory that is gone before CALLBACK."
  (mevedel-execution-test--with-helper session
    (let* ((seen nil)
           (r (mevedel-execution-test--await
               (lambda (cb)
                 (mevedel-execution-start-helper
                  (lambda (facts)
                    (setq seen (file-exists-p (plist-get facts :scratch-dir)))
                    (funcall cb facts))
                  "scratch" '("sh" "-c" "pwd; echo data > made; ls") (list "/etc") (list "/tmp")
                  :timeout 10 :session session :owner "/o"
                  :teardown-callback (lambda () (error "Not torn down")))))))
      (should (eql (plist-get r :exit-code) 0))
      (should (plist-get r :scratch-dir))
      (should (equal (plist-get r :output)
                     (concat (plist-get r :scratch-dir) "\nmade\n")))
      (should (string-prefix-p (mevedel-execution-session-state-dir session)
                               (plist-get r :scratch-dir)))
      (should-not seen)
      (should (equal (plist-get r :read-paths) '("/etc")))
      (should (equal (plist-get r :writable-roots) '("/tmp")))
      (should (equal (plist-get r :kind) "helper")))
    (let ((r (mevedel-execution-run-helper "sync" '("pwd") nil nil :timeout 10 :session session)))
      (should (equal (plist-get r :output) (concat (plist-get r :scratch-dir) "\n")))
      (should-not (file-exists-p (plist-get r :scratch-dir))))))

(ert-deftest mevedel-execution-oneshot-test-eval ()
  "Eval returns the printed value, or the error and a backtrace."
  (mevedel-execution-test--with-helper session
    (let ((r (mevedel-execution-eval
              '(progn (princ "noise @@ on stdout\n")
                      (message "noise on stderr")
                      (list 1 "two" 'three (+ 1 2)))
              :session session :timeout 30)))
      (should (equal (plist-get r :value) "(1 \"two\" three 3)"))
      (should (equal (plist-get (plist-get r :facts) :kind) "eval"))
      (should (string-match-p "noise @@ on stdout" (plist-get r :output)))
      (should (string-match-p "noise on stderr" (plist-get r :output)))
      (should-not (string-match-p "@@mevedel-eval" (plist-get r :output)))
      (should-not (plist-get r :error-message)))
    ;; A form that prints what looks like a result cannot fake one.
    (let ((r (mevedel-execution-eval '(progn (princ "@@mevedel-eval-x@@KDp2YWx1ZSAiNDIiKQ==@@mevedel-eval-x@@\n") 7)
                                     :session session)))
      (should (equal (plist-get r :value) "7")))
    (let ((r (mevedel-execution-eval '(car 1) :session session)))
      (should-not (plist-member r :value))
      (should (equal (plist-get r :error-message) "Wrong type argument: listp, 1"))
      (should (string-match-p "car(1)" (plist-get r :backtrace))))
    (let* ((dir (make-temp-file "mevedel-eval-lib-" t))
           (file (expand-file-name "mevedel-eval-probe.el" dir)))
      (unwind-protect
          (progn
            (with-temp-file file
              (insert "(defun mevedel-eval-probe () 42)\n(provide 'mevedel-eval-probe)\n"))
            (let ((r (mevedel-execution-eval '(progn (require 'mevedel-eval-probe) (mevedel-eval-probe))
                                             :session session :load-path (list dir))))
              (should (equal (plist-get r :value) "42")))
            ;; A file name is loaded.
            (let ((r (mevedel-execution-eval file :session session)))
              (should (equal (plist-get r :value) "t"))))
        (delete-directory dir t)))
    (let ((r (mevedel-execution-test--await
              (lambda (cb) (mevedel-execution-eval '(* 6 7) :session session :callback cb)))))
      (should (equal (plist-get r :value) "42")))
    (let ((r (mevedel-execution-eval '(sleep-for 100) :session session :timeout 0.5)))
      (should (plist-get r :timed-out-p))
      (should (plist-get r :error-message)))))

(ert-deftest mevedel-execution-oneshot-test-quit-stops-child ()
  "\\[keyboard-quit] during `mevedel-execution-run-one-shot' stops the child."
  (mevedel-execution-test--with-helper session
    (let* ((pidfile (expand-file-name "pid" (make-temp-file "mevedel-quit-" t)))
           (timer nil)
           (pid nil))
      (setq timer (run-with-timer
                   0.05 0.05
                   (lambda ()
                     (when (and (file-exists-p pidfile)
                                (> (file-attribute-size (file-attributes pidfile)) 0))
                       (cancel-timer timer)
                       (signal 'quit nil)))))
      (unwind-protect
          (should (eq 'quit
                      (condition-case nil
                          (progn (mevedel-execution-run-one-shot
                                  :command (list "sh" "-c" (format "echo $$ > %s; exec sleep 1000"
                                                                   (shell-quote-argument pidfile)))
                                  :session session)
                                 'returned)
                        (quit 'quit))))
        (cancel-timer timer))
      (setq pid (mevedel-execution-oneshot-test--read-pid pidfile))
      (mevedel-execution-test--wait-until
       (lambda () (mevedel-execution-oneshot-test--gone-p pid)) "the child to end")
      (mevedel-execution-test--wait-until
       (lambda () (not (mevedel-execution-session-live-p session))) "the session to settle")
      (delete-directory (file-name-directory pidfile) t))))

(ert-deftest mevedel-execution-oneshot-test-owners-and-sessions ()
  "owner-live-p, session-live-p, count-user, stop-owner, teardown-session."
  (mevedel-execution-test--with-helper session
    (should-not (mevedel-execution-session-live-p session))
    (should (eql (mevedel-execution-count-user session) 0))
    (should-not (mevedel-execution-owner-live-p session "/a"))
    (let* ((torn nil) (called nil)
           (handle (mevedel-execution-start-one-shot
                    (lambda (r) (setq called r))
                    :command '("sleep" "1000") :session session :owner "/a"
                    :teardown-function (lambda () (setq torn t))))
           (bash (mevedel-execution-test--start session "sleep 1000" :owner "/b"
                                                :yield-time-ms 0)))
      (should handle)
      (should-not (plist-get bash :final))
      (mevedel-execution-test--wait-until
       (lambda () (mevedel-execution-owner-live-p session "/a")) "the one-shot to be live")
      (should (mevedel-execution-owner-live-p session "/b"))
      (should-not (mevedel-execution-owner-live-p session "/c"))
      (should (mevedel-execution-session-live-p session))
      (should (eql (mevedel-execution-count-user session) 2))
      (should (eql (mevedel-execution-stop-owner session "/a") 1))
      (mevedel-execution-test--wait-until (lambda () torn) "the teardown function")
      (should-not called)
      (should-not (mevedel-execution-owner-live-p session "/a"))
      (should (mevedel-execution-owner-live-p session "/b"))
      (should (eql (mevedel-execution-count-user session) 1))
      ;; Without a teardown function, CALLBACK hears of the teardown.
      (let ((box nil))
        (mevedel-execution-start-one-shot (lambda (r) (setq box (list r)))
                                          :command '("sleep" "1000") :session session :owner "/b")
        (mevedel-execution-test--wait-until
         (lambda () (eql (mevedel-execution-count-user session) 2)) "two live")
        (mevedel-execution-teardown-session session)
        (mevedel-execution-test--wait-until (lambda () box) "the torn-down callback")
        (should (eq (car (plist-get (car box) :error)) 'mevedel-execution-error))
        (should (equal (plist-get (car box) :termination) "session-ended")))
      (should-not (mevedel-execution-session-live-p session))
      (should (eql (mevedel-execution-count-user session) 0)))))

(ert-deftest mevedel-execution-oneshot-test-user-functions ()
  "The user-authority functions of the client API, with its argument lists."
  (mevedel-execution-test--with-helper session
    (let* ((tty (mevedel-execution-test--start session "read line; echo got $line; sleep 1000"
                                               :tty t :yield-time-ms 0 :owner "/x"))
           (id (plist-get (mevedel-execution-test--facts tty) :execution-id))
           (pipe (mevedel-execution-test--start session "sleep 1000" :yield-time-ms 0
                                                :read-only-p t :tool-use-id "tu-1"
                                                :tool-args '(:command "sleep 1000")
                                                :owner-context 'ctx :request 'req
                                                :data-buffer (current-buffer)
                                                :writable-roots nil :additional-permissions nil
                                                :sandbox-permissions nil
                                                :artifact-directory default-directory
                                                :outcome-function #'ignore))
           (pipe-id (plist-get (mevedel-execution-test--facts pipe) :execution-id)))
      (should (equal (plist-get (mevedel-execution-test--facts pipe) :lane) "read"))
      (should (equal (plist-get (mevedel-execution-test--facts pipe) :tool-use-id) "tu-1"))
      (should (eql (length (mevedel-execution-list session "/x")) 1))
      (should (eql (length (mevedel-execution-list-user session)) 2))
      (mevedel-execution-write-user session id "hello\n")
      (mevedel-execution-interrupt-user session pipe-id)
      (mevedel-execution-stop-user session id)
      (mevedel-execution-test--wait-until
       (lambda () (<= (mevedel-execution-count-user session) 1)) "the stops")
      (let* ((done nil)
             (count (mevedel-execution-stop-all-user session (lambda (n) (setq done (list n))))))
        (should (memq count '(0 1)))
        (mevedel-execution-test--wait-until (lambda () done) "stop-all")))
    ;; read-only-p nil given: the exclusive lane, whatever the analysis.
    (let ((obs (mevedel-execution-test--start session "ls" :read-only-p nil)))
      (should (equal (plist-get (mevedel-execution-test--facts obs) :lane) "exclusive")))
    (let ((obs (mevedel-execution-test--start session "ls")))
      (should (equal (plist-get (mevedel-execution-test--facts obs) :lane) "read")))))

(ert-deftest mevedel-execution-oneshot-test-unknown-outcomes ()
  "With no unknown outcome nothing is blocked; a live mutation is unsettled."
  (mevedel-execution-test--with-helper session
    (should-not (mevedel-execution-unknown-outcome session))
    (should-not (mevedel-execution-mutation-blocked-p session))
    (should-not (mevedel-execution-unsettled-mutation-p session))
    (should (eql (mevedel-execution-acknowledge-unknown session) 0))
    (let ((obs (mevedel-execution-test--start session "sleep 1000" :yield-time-ms 0
                                              :read-only-p nil)))
      (should (mevedel-execution-unsettled-mutation-p session))
      (should-not (mevedel-execution-mutation-blocked-p session))
      (mevedel-execution-test--await
       (lambda (cb) (mevedel-execution-stop session mevedel-execution-root-owner
                                            (plist-get (mevedel-execution-test--facts obs) :execution-id)
                                            cb)))
      (should-not (mevedel-execution-unsettled-mutation-p session)))
    ;; A read-only one is not a mutation.
    (mevedel-execution-test--start session "sleep 1000" :yield-time-ms 0 :read-only-p t)
    (should-not (mevedel-execution-unsettled-mutation-p session))))

(ert-deftest mevedel-execution-oneshot-test-relocate-artifacts ()
  "After a move of the state directory, reads use the new root."
  (let* ((root (make-temp-file "mevedel-relocate-" t))
         (old (expand-file-name "old" root))
         (new (expand-file-name "new" root))
         (mevedel-execution-program mevedel-execution-test--program)
         (process-environment (cons (concat "HOME=" root) process-environment)))
    (unwind-protect
        (let* ((session (mevedel-execution-open-session "relocate" (expand-file-name "conv" old)))
               (first (mevedel-execution-run-one-shot :command '("echo" "before") :session session)))
          (should (equal (mevedel-execution-relocate-artifacts session old new)
                         (expand-file-name "conv" new)))
          (should-not (file-exists-p (expand-file-name "conv" old)))
          (should (file-directory-p (expand-file-name "conv/executions" new)))
          (should (equal (plist-get (mevedel-execution-request
                                     session 'spool/read
                                     (list :address (plist-get (plist-get first :facts) :output-address)))
                                    :text)
                         "before\n"))
          (let ((r (mevedel-execution-run-helper "after" '("echo" "after") nil nil :session session)))
            (should (string-prefix-p (expand-file-name "conv" new) (plist-get r :scratch-dir))))
          ;; Another directory: nothing moves.
          (should (equal (mevedel-execution-relocate-artifacts session (expand-file-name "else" root) old)
                         (expand-file-name "conv" new))))
      (mevedel-execution-teardown-all)
      (delete-directory root t))))

(ert-deftest mevedel-execution-oneshot-test-kill-emacs-cleans-up ()
  "When Emacs exits, a one-shot in flight ends and its scratch directory goes."
  (let* ((dir (make-temp-file "mevedel-exit-" t))
         (out (expand-file-name "out" dir))
         (script (expand-file-name "child.el" dir)))
    (unwind-protect
        (progn
          (with-temp-file script
            (prin1 `(progn
                      (require 'mevedel-execution)
                      (setq mevedel-execution-program ,mevedel-execution-test--program)
                      (let ((session (mevedel-execution-open-session "exit" ,(expand-file-name "state" dir)))
                            (box nil))
                        (mevedel-execution-start-helper
                         #'ignore "forever"
                         (list "sh" "-c" ,(format "echo $$ > %s; exec sleep 1000" (shell-quote-argument out)))
                         nil nil :session session)
                        (while (not (setq box (mevedel-execution-list-user session)))
                          (accept-process-output nil 0.05))
                        (while (not (and (file-exists-p ,out)
                                         (> (file-attribute-size (file-attributes ,out)) 0)))
                          (accept-process-output nil 0.05))
                        (with-temp-file ,(concat out ".scratch")
                          (insert (plist-get (car box) :scratch-dir)))
                        (kill-emacs 0)))
                   (current-buffer)))
          (should (eql 0 (call-process (expand-file-name invocation-name invocation-directory)
                                       nil nil nil "--batch" "-Q"
                                       "-L" (expand-file-name "elisp" mevedel-execution-test--root)
                                       "-l" script)))
          (let ((pid (mevedel-execution-oneshot-test--read-pid out))
                (scratch (with-temp-buffer
                           (insert-file-contents (concat out ".scratch"))
                           (buffer-string))))
            (should (string-match-p "/scratch/" scratch))
            (mevedel-execution-test--wait-until
             (lambda () (mevedel-execution-oneshot-test--gone-p pid)) "the helper's child to end")
            (should-not (file-exists-p scratch))))
      (delete-directory dir t))))

(provide 'mevedel-execution-oneshot-test)
;;; mevedel-execution-oneshot-test.el ends here

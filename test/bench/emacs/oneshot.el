;;; oneshot.el --- Emacs's heartbeat while a synchronous one-shot waits  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run from the repository's root, after `make build' (`make bench-oneshot'):
;;
;;   emacs --batch -Q -L elisp -l test/bench/emacs/oneshot.el
;;
;; A repeating 10 ms timer records `float-time' stamps; the largest gap
;; between two stamps says how long timers could not run.  In one Emacs,
;; three waits for a 2 s command (`sleep 2') are measured:
;;
;;   idle           nothing runs; the main loop waits 2 s in
;;                  `accept-process-output' (the floor of the heartbeat);
;;   run-one-shot   `mevedel-execution-run-one-shot' of ("sleep" "2"),
;;                  which waits in an `accept-process-output' loop;
;;   call-process   the same command with a plain blocking `call-process',
;;                  the baseline a synchronous caller would otherwise use.
;;
;; The helper runs with a private HOME, so no login profile is measured.
;; The exit code is non-zero only when something did not work.

;;; Code:

(require 'cl-lib)
(require 'mevedel-execution)

(defconst oneshot-bench--beat 0.01 "Period of the heartbeat timer, in seconds.")

(defvar oneshot-bench--stamps nil "Heartbeat stamps of the phase, newest first.")

(defun oneshot-bench--phase (name fn)
  "Run FN under the heartbeat; print NAME with the largest gap and the wall time."
  (garbage-collect)
  (setq oneshot-bench--stamps nil)
  (let* ((timer (run-at-time 0 oneshot-bench--beat
                             (lambda () (push (float-time) oneshot-bench--stamps))))
         (start (float-time))
         (value nil))
    ;; The first beat, so the gap is measured from inside the phase.
    (while (null oneshot-bench--stamps) (accept-process-output nil 0.001))
    (unwind-protect (setq value (funcall fn))
      (push (float-time) oneshot-bench--stamps)
      (cancel-timer timer))
    (let ((stamps (nreverse oneshot-bench--stamps)) (gap 0))
      (cl-loop for (a b) on stamps while b do (setq gap (max gap (- b a))))
      (princ (format "%-13s  largest heartbeat gap %7.1f ms   beats %4d   wall %6.1f ms\n"
                     name (* 1000 gap) (length stamps) (* 1000 (- (float-time) start))))
      value)))

(let* ((home (make-temp-file "mevedel-bench-home-" t))
       (state (make-temp-file "mevedel-bench-state-" t))
       (process-environment (cons (concat "HOME=" home) process-environment))
       (mevedel-execution-program (or (getenv "MEVEDEL_EXEC_PROGRAM") mevedel-execution-program))
       (failed nil))
  (unwind-protect
      (condition-case err
          (let ((session (mevedel-execution-open-session "bench-oneshot" state)))
            ;; Warm: the helper runs and the login environment is captured.
            (mevedel-execution-run-one-shot :command '("true") :session session)
            (princ (format "heartbeat every %d ms while a 2 s command runs (Emacs %s)\n"
                           (* 1000 oneshot-bench--beat) emacs-version))
            (oneshot-bench--phase
             "idle" (lambda ()
                      (let ((end (+ (float-time) 2)))
                        (while (< (float-time) end) (accept-process-output nil 0.05)))))
            (let ((r (oneshot-bench--phase
                      "run-one-shot" (lambda ()
                                       (mevedel-execution-run-one-shot
                                        :command '("sleep" "2") :session session)))))
              (unless (eql (plist-get r :exit-code) 0)
                (error "The one-shot failed: %S" r)))
            (let ((status (oneshot-bench--phase
                           "call-process" (lambda () (call-process "sleep" nil nil nil "2")))))
              (unless (eql status 0) (error "call-process failed: %S" status))))
        (error (princ (format "bench failed: %s\n" (error-message-string err)))
               (setq failed t)))
    (mevedel-execution-teardown-all)
    (delete-directory home t)
    (delete-directory state t))
  (kill-emacs (if failed 1 0)))

;;; oneshot.el ends here

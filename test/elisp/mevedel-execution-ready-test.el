;;; mevedel-execution-ready-test.el --- start-bash :ready-pattern and :ready-port  -*- lexical-binding: t; -*-

;;; Commentary:

;; `mevedel-execution-start-bash' with a ready condition, against the
;; real helper: the first Observation comes when the command is ready to
;; use, not at its yield time.  Every wait is bounded; none sleeps to
;; synchronise.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun mevedel-execution-ready-test--free-port ()
  "Return a TCP port nothing listens on now."
  (let* ((proc (make-network-process :name "ready-test-port" :server t
                                     :host "127.0.0.1" :service t :noquery t))
         (port (process-contact proc :service)))
    (delete-process proc)
    port))

(ert-deftest mevedel-execution-ready-test-pattern ()
  "A matching line ends the wait long before the yield time."
  (mevedel-execution-test--with-helper session
    (let* ((start (float-time))
           (obs (mevedel-execution-test--start
                 session "echo booting; sleep 1; echo 'listening on :7001'; sleep 100"
                 :yield-time-ms 60000 :ready-pattern "listening on :[0-9]+$"))
           (facts (mevedel-execution-test--facts obs)))
      (should-not (plist-get obs :error))
      (should-not (plist-get obs :final))
      (should (eq (plist-get facts :ready) t))
      (should (equal (plist-get facts :ready-line) "listening on :7001"))
      (should (< (- (float-time) start) 30))
      (should (string-match-p "listening on :7001" (plist-get obs :output)))
      (mevedel-execution-test--await
       (lambda (cb) (mevedel-execution-stop session nil (plist-get facts :execution-id) cb))))))

(ert-deftest mevedel-execution-ready-test-port ()
  "Listening on the port ends the wait; the facts list the port."
  (mevedel-execution-test--with-helper session
    (let* ((port (mevedel-execution-ready-test--free-port))
           (obs (mevedel-execution-test--start
                 session
                 (format "sleep 1; exec python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\", %d)); s.listen(); time.sleep(100)'" port)
                 :yield-time-ms 60000 :ready-port port))
           (facts (mevedel-execution-test--facts obs)))
      (should-not (plist-get obs :error))
      (should-not (plist-get obs :final))
      (should (eq (plist-get facts :ready) t))
      (should (eql (plist-get facts :ready-port) port))
      (should (cl-some (lambda (l) (eql (plist-get l :port) port))
                       (plist-get facts :listening)))
      (mevedel-execution-test--await
       (lambda (cb) (mevedel-execution-stop session nil (plist-get facts :execution-id) cb))))))

(ert-deftest mevedel-execution-ready-test-bad-arguments ()
  "A bad ready condition is refused: by the facade, or by the helper."
  (mevedel-execution-test--with-helper session
    (should-error (mevedel-execution-start-bash #'ignore :session session :command "true"
                                                :ready-port 70000)
                  :type 'args-out-of-range)
    (should-error (mevedel-execution-start-bash #'ignore :session session :command "true"
                                                :ready-pattern 'not-a-string)
                  :type 'wrong-type-argument)
    (let ((obs (mevedel-execution-test--start session "true" :ready-pattern "(")))
      (should (eql (plist-get (plist-get obs :error) :code) -32602)))))

(provide 'mevedel-execution-ready-test)

;;; mevedel-execution-ready-test.el ends here

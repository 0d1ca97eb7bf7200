;;; mevedel-execution-test.el --- ERT tests against the real helper  -*- lexical-binding: t; -*-

;;; Commentary:

;; These tests start the real mevedel-exec binary (built by `make', or named
;; by MEVEDEL_EXEC_PROGRAM) with a private HOME and drive it through the
;; facade, with real child processes.  Every wait is bounded; none sleeps
;; to synchronise.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest mevedel-execution-test-foreground-exit-codes ()
  "A command that ends before its yield gives the final observation."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "echo hello"))
           (facts (mevedel-execution-test--facts obs)))
      (should (plist-get obs :final))
      (should (equal (plist-get obs :output) "hello\n"))
      (should (eql (plist-get facts :exit-code) 0))
      (should (equal (plist-get facts :termination) "exited"))
      (should (equal (plist-get facts :status) "completed"))
      (should (string-match-p "\\`exec-[a-z0-9]\\{5\\}-[0-9]\\{6\\}\\'" (plist-get facts :execution-id)))
      (should (equal (plist-get facts :output-address)
                     (format "artifact://executions/%s.log" (plist-get facts :execution-id))))
      ;; JSON false and null never reach callers.
      (should-not (memq :json-false (flatten-tree obs))))
    (let ((facts (mevedel-execution-test--facts (mevedel-execution-test--start session "exit 3"))))
      (should (eql (plist-get facts :exit-code) 3))
      (should (equal (plist-get facts :outcome) "failure"))
      (should-not (plist-get facts :signal)))))

(ert-deftest mevedel-execution-test-commands-yield-to-emacs ()
  "Commands run at `mevedel-execution-nice', and so does what they start."
  (let ((mevedel-execution-test--nice 7))
    (mevedel-execution-test--with-helper session
      (should (equal (plist-get (mevedel-execution-test--start session "nice") :output) "7\n"))
      (should (equal (plist-get (mevedel-execution-test--start session "sh -c nice; true") :output) "7\n"))
      (should (equal (plist-get (mevedel-execution-test--start session "nice" :tty t) :output) "7\r\n"))
      ;; Emacs starts the helper in a session of its own, which yields too;
      ;; the helper says so once it has.
      (let ((group (format "/proc/%d/autogroup"
                           (process-id (jsonrpc--process mevedel-execution--current)))))
        (when (file-exists-p group)
          (mevedel-execution-test--wait-until
           (lambda () (let ((log (get-buffer mevedel-execution-stderr-buffer)))
                        (and log (with-current-buffer log
                                   (save-excursion
                                     (goto-char (point-min))
                                     (search-forward "scheduling group is at nice 7" nil t))))))
           "the helper's word that its session yields")
          (should (string-match-p "nice 7$" (with-temp-buffer
                                              (insert-file-contents group)
                                              (string-trim (buffer-string)))))))))
  (let ((mevedel-execution-nice 20))
    (should-error (mevedel-execution--nice-arguments) :type 'user-error)))

(ert-deftest mevedel-execution-test-yield-poll-stop ()
  "A long command yields, shows in the list, polls, and stops."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start
                 session "echo started; sleep 1000" :yield-time-ms 200 :label "long"))
           (facts (mevedel-execution-test--facts obs))
           (id (plist-get facts :execution-id)))
      (should-not (plist-get obs :final))
      (should (eq (plist-get facts :yielded) t))
      (should (equal (plist-get facts :state) "running"))
      (should (equal (plist-get facts :label) "long"))
      (let ((listed (mevedel-execution-list session "/root")))
        (should (= (length listed) 1))
        (should (equal (plist-get (car listed) :execution-id) id)))
      (let ((seen (plist-get obs :output)))
        (mevedel-execution-test--wait-until
         (lambda ()
           (or (string-match-p "started" seen)
               (progn (setq seen (concat seen (plist-get (mevedel-execution-test--await
                                                           (lambda (cb) (mevedel-execution-observe session "/root" id cb :wait-ms 100)))
                                                          :output)))
                      nil)))
         "the first output"))
      (let* ((final (mevedel-execution-test--await
                     (lambda (cb) (mevedel-execution-stop session "/root" id cb))))
             (ff (mevedel-execution-test--facts final)))
        (should (plist-get final :final))
        (should (equal (plist-get ff :termination) "stopped"))
        (should (equal (plist-get ff :status) "stopped"))
        (should (equal (plist-get ff :state) "settled")))
      (should-not (mevedel-execution-list session "/root")))))

(ert-deftest mevedel-execution-test-authority ()
  "An owner sees only its executions; the user sees and stops all."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start
                 session "sleep 1000" :owner "/root/worker" :yield-time-ms 0))
           (id (plist-get (mevedel-execution-test--facts obs) :execution-id)))
      (should (equal (plist-get (mevedel-execution-test--facts obs) :owner) "/root/worker"))
      (should-not (mevedel-execution-list session "/root"))
      (should (= 1 (length (mevedel-execution-list session "/root/worker"))))
      (should (= 1 (length (mevedel-execution-list-user session))))
      (let ((denied (mevedel-execution-test--await
                     (lambda (cb) (mevedel-execution-observe session "/root" id cb)))))
        (should (equal (plist-get (plist-get denied :error) :kind) "not-found")))
      (let ((final (mevedel-execution-test--await
                    (lambda (cb) (mevedel-execution-stop-user session id cb)))))
        (should (equal (plist-get (mevedel-execution-test--facts final) :termination) "stopped")))
      (should-not (mevedel-execution-list-user session)))))

(ert-deftest mevedel-execution-test-pty-input ()
  "With a terminal, typed input reaches the command."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start
                 session "read -r line; echo \"got:$line\"" :tty t :yield-time-ms 0))
           (id (plist-get (mevedel-execution-test--facts obs) :execution-id))
           (typed (mevedel-execution-test--await
                   (lambda (cb) (mevedel-execution-write-user session id "hello\n" cb))))
           (result (mevedel-execution-test--final session "/root" id)))
      (should (string-match-p "got:hello"
                              (concat (plist-get obs :output) (plist-get typed :output) (car result))))
      (should (equal (plist-get (mevedel-execution-test--facts (cdr result)) :status) "completed")))))

(ert-deftest mevedel-execution-test-pipe-input-refused-and-interrupt ()
  "Without a terminal, input is refused with a clear error; Ctrl-C works."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "sleep 1000" :yield-time-ms 0))
           (id (plist-get (mevedel-execution-test--facts obs) :execution-id))
           (refused (mevedel-execution-test--await
                     (lambda (cb) (mevedel-execution-write-user session id "y\n" cb)))))
      (should (equal (plist-get (plist-get refused :error) :kind) "refused"))
      (should (string-match-p "tty" (plist-get (plist-get refused :error) :message)))
      (should (equal (plist-get (mevedel-execution-interrupt-user session id) :execution-id) id))
      (let ((facts (mevedel-execution-test--facts (cdr (mevedel-execution-test--final session "/root" id)))))
        (should (equal (plist-get facts :signal) "SIGINT"))))))

(ert-deftest mevedel-execution-test-bad-arguments ()
  "Bad arguments give clear errors, locally or from the helper."
  (mevedel-execution-test--with-helper session
    (should-error (mevedel-execution-start-bash #'ignore :session session :command 42)
                  :type 'wrong-type-argument)
    (should-error (mevedel-execution-start-bash #'ignore :session "not a session" :command "true")
                  :type 'wrong-type-argument)
    (should-error (mevedel-execution-start-bash #'ignore :session session :command "true" :yield-time-ms -1)
                  :type 'wrong-type-argument)
    (let ((err (plist-get (mevedel-execution-test--start session "sleep 5 &") :error)))
      (should (equal (plist-get err :kind) "refused"))
      (should (eql (plist-get err :code) -32003))
      (should (string-match-p "yieldMs" (plist-get err :message))))
    (let ((err (should-error (mevedel-execution-interrupt-user session "exec-zzzzz-000001")
                             :type 'mevedel-execution-helper-error)))
      (should (equal (plist-get (nth 2 err) :kind) "not-found")))
    (mevedel-execution-teardown-session session)
    (should-error (mevedel-execution-list-user session) :type 'mevedel-execution-error)))

(ert-deftest mevedel-execution-test-missing-helper ()
  "A helper that cannot be found says how to install it."
  (let ((mevedel-execution-program "/nonexistent/mevedel-exec")
        (mevedel-execution-install-directory (make-temp-file "mevedel-ert-empty-" t)))
    (unwind-protect
        (progn
          (mevedel-execution-teardown-all)
          (let ((err (should-error (mevedel-execution-open-session "x" temporary-file-directory)
                                   :type 'mevedel-execution-helper-missing)))
            (should (string-match-p "install-helper" (cadr err)))))
      (delete-directory mevedel-execution-install-directory t))))

(ert-deftest mevedel-execution-test-abort-before-yield ()
  "Aborting a waiting start aborts the command; its callback gets the end."
  (mevedel-execution-test--with-helper session
    (let* ((running nil)
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'changed)
                      (dolist (f (plist-get plist :live))
                        (when (equal (plist-get f :state) "running")
                          (setq running f)))))))
           (box nil)
           (handle (mevedel-execution-start-bash
                    (lambda (obs) (setq box (list obs)))
                    :session session :command "sleep 1000")))
      (mevedel-execution-test--wait-until (lambda () running) "the command to run")
      (mevedel-execution-abort handle)
      (mevedel-execution-test--wait-until (lambda () box) "the aborted start's callback")
      (let ((facts (mevedel-execution-test--facts (car box))))
        (should (plist-get (car box) :final))
        (should (equal (plist-get facts :termination) "aborted"))))))

(ert-deftest mevedel-execution-test-events-are-copies ()
  "Each event listener gets its own copy of the payload."
  (mevedel-execution-test--with-helper session
    (let* ((first nil) (second nil)
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'settled)
                      (setq first plist)
                      (setf (plist-get (plist-get plist :facts) :status) "mangled")))
                  (lambda (type plist)
                    (when (eq type 'settled) (setq second plist))))))
      (mevedel-execution-test--start session "echo hi")
      (mevedel-execution-test--wait-until (lambda () (and first second)) "settled events")
      (should (equal (plist-get (plist-get second :facts) :status) "completed"))
      (should-not (eq first second)))))

(ert-deftest mevedel-execution-test-helper-death ()
  "A helper that dies answers pending callbacks as lost, once; the next
call starts a new helper and reopens the session."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "sleep 1000" :yield-time-ms 0))
           (facts (mevedel-execution-test--facts obs))
           (id (plist-get facts :execution-id))
           (proc (jsonrpc--process mevedel-execution--current))
           (reports 0)
           (box nil))
      (unwind-protect
          (cl-letf* ((orig (symbol-function 'message))
                     ((symbol-function 'message)
                      (lambda (fmt &rest args)
                        (when (and fmt (string-match-p "exited unexpectedly" fmt))
                          (cl-incf reports))
                        (apply orig fmt args))))
            (mevedel-execution-observe session "/root" id (lambda (o) (setq box (list o)))
                                       :wait-ms 20000)
            (signal-process proc 'KILL)
            (mevedel-execution-test--wait-until (lambda () box) "the pending callback")
            (let ((lost (mevedel-execution-test--facts (car box))))
              (should (plist-get (car box) :final))
              (should (equal (plist-get lost :termination) "lost"))
              (should (equal (plist-get lost :status) "lost"))
              (should (equal (plist-get lost :execution-id) id)))
            (mevedel-execution-test--wait-until (lambda () (null mevedel-execution--current))
                                                "the death to be noticed")
            (should (= reports 1))
            ;; The next call starts a fresh helper with the session reopened.
            (should-not (mevedel-execution-list-user session))
            (should-not (eq (jsonrpc--process mevedel-execution--current) proc))
            (let ((again (mevedel-execution-test--start session "echo alive")))
              (should (equal (plist-get again :output) "alive\n"))))
        ;; The killed helper could not end its command; the journal-based
        ;; recovery is another layer's job, so the test cleans up itself.
        (ignore-errors (signal-process (plist-get facts :pid) 'KILL))))))

(ert-deftest mevedel-execution-test-quit-cancels-a-waiting-call ()
  "\\[keyboard-quit] during a synchronous wait cancels the request in the helper."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "sleep 1000" :yield-time-ms 0))
           (id (plist-get (mevedel-execution-test--facts obs) :execution-id))
           (conn (mevedel-execution-ensure-session session))
           (params (list :sessionId (mevedel-execution-session-id session)
                         :executionId id :waitMs 20000))
           (timer (run-with-timer 0.2 nil (lambda () (signal (quote quit) nil)))))
      (unwind-protect
          (should (eq 'quit (condition-case nil
                                (progn (mevedel-execution-call conn 'exec/observe params 30) 'returned)
                              (quit 'quit))))
        (cancel-timer timer))
      ;; Had the quit left the helper waiting, this second waiting
      ;; observation would be refused as a conflict.
      (let ((next (mevedel-execution-test--await
                   (lambda (cb) (mevedel-execution-observe session "/root" id cb :wait-ms 10)))))
        (should-not (plist-get next :error))
        (should (equal (plist-get (mevedel-execution-test--facts next) :state) "running"))))))

(ert-deftest mevedel-execution-test-mailbox-sink-acks-once ()
  "A delivery reaches the sink once, with an ack that answers once."
  (mevedel-execution-test--with-helper session
    (let* ((records nil)
           (acks 0)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack)
              (push record records)
              (funcall ack)
              (funcall ack)))          ; a second call must send nothing
           (params (list :sessionId (mevedel-execution-session-id session)
                         :owner "/root" :deliveryId "d-1" :kind "EXECUTION"
                         :attrs (list :executionId "exec-x-000001" :status "completed"
                                      :exitCode 0 :yielded :json-false))))
      (clrhash mevedel-execution--deliveries)
      (cl-letf* ((orig (symbol-function 'mevedel-execution-call-async))
                 ((symbol-function 'mevedel-execution-call-async)
                  (lambda (conn method params &rest args)
                    (when (eq method 'mailbox/ack)
                      (cl-incf acks)
                      (should (eq (plist-get params :durable) t))
                      (should (equal (plist-get params :deliveryId) "d-1")))
                    (apply orig conn method params args))))
        (mevedel-execution--dispatch-notification mevedel-execution--current 'mailbox/deliver params)
        ;; Queued, as from the process filter: the sink has not run yet.
        (should-not records)
        (mevedel-execution-drain)
        ;; The helper sends it again (say the first ack was lost): the sink
        ;; does not see it twice, and the ack is repeated.
        (mevedel-execution--dispatch-notification mevedel-execution--current 'mailbox/deliver params)
        (mevedel-execution-drain))
      (should (= (length records) 1))
      (should (= acks 2))
      (let ((attrs (plist-get (car records) :attrs)))
        (should (equal (plist-get attrs :execution-id) "exec-x-000001"))
        (should (eql (plist-get attrs :exit-code) 0))
        (should-not (plist-member attrs :json-false))
        (should-not (plist-get attrs :yielded))))))

(ert-deftest mevedel-execution-test-install-helper ()
  "The install command builds a working helper from the source tree."
  :tags '(:slow)
  (let* ((mevedel-execution-install-directory (make-temp-file "mevedel-ert-install-" t))
         (built (expand-file-name "mevedel-exec" mevedel-execution-install-directory))
         (mevedel-execution-program "/nonexistent/mevedel-exec")
         (done nil))
    (unwind-protect
        (progn
          ;; Its callback, not the build process's end: the built file
          ;; takes its place in the sentinel, which runs after the
          ;; process is seen dead.
          (mevedel-execution-install-helper nil (lambda (file) (setq done (list file))))
          (mevedel-execution-test--wait-until (lambda () done) "the build")
          (should (equal (car done) built))
          (should (file-executable-p built))
          (should (equal (mevedel-execution-program-file) built)))
      (delete-directory mevedel-execution-install-directory t))))

(ert-deftest mevedel-execution-test-session-target ()
  "A session keeps the helper's description of its target.
Without one it is this machine, in its boot; a TRAMP name given, or
the remote part of `default-directory', is the target, and one that
cannot be reached is described with the reason, the open succeeding."
  (mevedel-execution-test--with-helper session
    (let ((info (mevedel-execution-session-target-info session))
          (boot (with-temp-buffer
                  (insert-file-contents "/proc/sys/kernel/random/boot_id")
                  (string-trim (buffer-string)))))
      (should-not (mevedel-execution-session-target session))
      (should (equal (plist-get info :name) "local"))
      (should (equal (plist-get (plist-get info :incarnation) :boot-id) boot))
      (should (listp (mevedel-execution-session-target-lacks session)))
      (should-not (plist-get info :error)))
    (let* ((name "/ssh:nobody@127.0.0.1#1:")
           (far (mevedel-execution-open-session
                 "ert-far" (make-temp-file "mevedel-ert-far-" t) nil name))
           (info (mevedel-execution-session-target-info far)))
      (should (equal (mevedel-execution-session-target far) name))
      (should (equal (plist-get info :name) "ssh:nobody@127.0.0.1#1"))
      (should (equal (plist-get info :target-method) "ssh"))
      (should (string-match-p "127\\.0\\.0\\.1" (plist-get info :error)))
      (should-not (plist-get info :incarnation)))
    (let* ((state (make-temp-file "mevedel-ert-dd-" t))
           (near (let ((default-directory "/ssh:nobody@127.0.0.1#1:/tmp/"))
                   (mevedel-execution-open-session "ert-dd" state))))
      (should (equal (mevedel-execution-session-target near) "/ssh:nobody@127.0.0.1#1:"))
      (should (plist-get (mevedel-execution-session-target-info near) :error)))))

(provide 'mevedel-execution-test)
;;; mevedel-execution-test.el ends here

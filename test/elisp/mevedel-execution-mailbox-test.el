;;; mevedel-execution-mailbox-test.el --- ERT tests of deliveries, acks and wakes  -*- lexical-binding: t; -*-

;;; Commentary:

;; The acknowledged mailbox and owner attention, driven through the
;; facade against the real helper with the fixture of
;; mevedel-execution-test-support.el.  A command ends when the test opens its
;; gate, a fifo it reads; every other wait is a bounded loop on a
;; condition of the helper's state.  Sessions that test resends use
;; short `ackTimeoutMs' and `retryMs' limits.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

;;;; Acknowledgement

(ert-deftest mevedel-execution-mailbox-test-durable-ack-consumes ()
  "A durable ack consumes the result; the sink saw it once, acked once."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((records nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack)
              (push record records)
              (funcall ack)
              (funcall ack "ignored: the first call counts")))
           (id (mevedel-execution-mailbox-test--finish session "delivered"))
           (obs (mevedel-execution-mailbox-test--wait-consumed session id seen))
           (record (car records))
           (delivery-id (plist-get record :delivery-id)))
      (should (= (length records) 1))
      (should (equal (plist-get record :kind) "EXECUTION"))
      (should (equal (plist-get record :owner) "/root"))
      (should (equal (plist-get record :session-id) (mevedel-execution-session-id session)))
      (should (eql (plist-get record :attempt) 1))
      (should (equal (plist-get (plist-get record :observation) :output) "delivered\n"))
      (let ((attrs (plist-get record :attrs)))
        (should (equal (plist-get attrs :execution-id) id))
        (should (equal (plist-get attrs :status) "completed"))
        (should (eql (plist-get attrs :exit-code) 0)))
      ;; One ack, durable, although the sink called it twice.
      (should (equal (mevedel-execution-mailbox-test--acks-of seen delivery-id) '(nil)))
      ;; Consumed: later observations repeat what was delivered.
      (should (equal (plist-get obs :output) "delivered\n")))))

(ert-deftest mevedel-execution-mailbox-test-failure-ack-redelivers ()
  "A failure ack brings the same delivery again, to the sink again."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500 :retryMs 50) session seen
    (let* ((records nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack)
              (push record records)
              (if (= (length records) 1) (funcall ack "disk full") (funcall ack))))
           (id (mevedel-execution-mailbox-test--finish session "again")))
      (mevedel-execution-mailbox-test--wait-consumed session id seen)
      (should (= (length records) 2))
      (let ((delivery-id (plist-get (car records) :delivery-id)))
        (should (equal (plist-get (cadr records) :delivery-id) delivery-id))
        (should (equal (mapcar (lambda (r) (plist-get r :attempt)) (reverse records)) '(1 2)))
        ;; A resend carries the same frozen content.
        (should (equal (mapcar (lambda (r) (plist-get (plist-get r :observation) :output)) records)
                       '("again\n" "again\n")))
        (should (equal (mevedel-execution-mailbox-test--acks-of seen delivery-id)
                       '("disk full" nil)))))))

(ert-deftest mevedel-execution-mailbox-test-erroring-sink ()
  "A sink that signals sends a failure ack and gets the delivery again;
one that signals after its ack changes nothing."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500 :retryMs 50) session seen
    (let* ((calls 0)
           (mevedel-execution-mailbox-delivery-function
            (lambda (_record ack)
              (cl-incf calls)
              (when (= calls 1) (error "Boom"))
              (funcall ack)))
           (id (mevedel-execution-mailbox-test--finish session "first")))
      (mevedel-execution-mailbox-test--wait-consumed session id seen)
      (should (= calls 2))
      (let* ((delivery-id (car (car (cdr (funcall seen)))))
             (acks (mevedel-execution-mailbox-test--acks-of seen delivery-id)))
        (should (= (length acks) 2))
        (should (string-match-p "Boom" (car acks)))
        (should-not (cadr acks))
        (should (equal (mevedel-execution-mailbox-test--attempts-of seen delivery-id) '(1 2)))))
    (let* ((calls 0)
           (mevedel-execution-mailbox-delivery-function
            (lambda (_record ack)
              (cl-incf calls)
              (funcall ack)
              (error "Late boom")))
           (id (mevedel-execution-mailbox-test--finish session "second")))
      (mevedel-execution-mailbox-test--wait-consumed session id seen)
      (should (= calls 1))
      (let ((delivery-id (car (car (last (cdr (funcall seen)))))))
        (should (equal (mevedel-execution-mailbox-test--acks-of seen delivery-id) '(nil)))))))

(ert-deftest mevedel-execution-mailbox-test-no-sink ()
  "Without a sink, deliveries fail and stay pending until one is set."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500 :retryMs 50) session seen
    (let* ((records nil)
           (id (mevedel-execution-mailbox-test--finish session "later")))
      (mevedel-execution-test--wait-until
       (lambda () (car (funcall seen))) "a failure ack")
      (should (string-match-p "no mailbox sink" (cadr (car (car (funcall seen))))))
      (should (plist-get (mevedel-execution-mailbox-test--peek session id) :delivery-id))
      (let ((mevedel-execution-mailbox-delivery-function
             (lambda (record ack) (push record records) (funcall ack))))
        (mevedel-execution-mailbox-test--wait-consumed session id seen))
      (should (= (length records) 1))
      (should (> (plist-get (car records) :attempt) 1)))))

(ert-deftest mevedel-execution-mailbox-test-dedupe ()
  "A resend never reaches the sink twice: not while the sink holds the
delivery, and not after its durable ack was lost, which is repeated."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500 :ackTimeoutMs 200 :retryMs 50)
      session seen
    (let* ((records nil)
           (held nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack) (push record records) (setq held ack)))
           (id (mevedel-execution-mailbox-test--finish session "once"))
           delivery-id)
      (mevedel-execution-test--wait-until (lambda () held) "the delivery")
      (setq delivery-id (plist-get (car records) :delivery-id))
      ;; No ack within 200 ms: the helper sends it again, the sink still
      ;; holds it and does not see it.
      (mevedel-execution-test--wait-until
       (lambda () (member 2 (mevedel-execution-mailbox-test--attempts-of seen delivery-id)))
       "a resend while the sink holds the delivery")
      (should (= (length records) 1))
      (should (plist-get (mevedel-execution-mailbox-test--peek session id) :delivery-id))
      ;; The durable ack is lost on its way.
      (setq mevedel-execution-mailbox-test--drop t)
      (funcall held)
      (should-not mevedel-execution-mailbox-test--drop)
      ;; The next resend is acknowledged again, without the sink.
      (mevedel-execution-mailbox-test--wait-consumed session id seen)
      (should (= (length records) 1))
      (should (>= (apply #'max (mevedel-execution-mailbox-test--attempts-of seen delivery-id)) 3))
      (should (equal (mevedel-execution-mailbox-test--acks-of seen delivery-id) '(nil nil))))))

;;;; Owners and wakes

(ert-deftest mevedel-execution-mailbox-test-wake-idle-not-busy ()
  "An idle owner is woken for a durable result; a busy one is not,
until it turns idle."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((wakes nil)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (mevedel-execution-wake-functions
            (list (lambda (s owner ids) (push (list s owner ids) wakes)))))
      ;; Idle, the default.
      (let ((id (mevedel-execution-mailbox-test--finish session "idle")))
        (mevedel-execution-test--wait-until (lambda () wakes) "a wake")
        (let ((delivery-id (car (car (cdr (funcall seen))))))
          (should (equal (car wakes) (list session "/root" (list delivery-id))))
          ;; The model reads it: it is owed no more, and no later wake
          ;; offers it again.
          (should (eql (mevedel-execution-attend session "/root" (list delivery-id)) 1)))
        (mevedel-execution-mailbox-test--wait-consumed session id seen))
      (setq wakes nil)
      ;; Busy: the result becomes durable and owed, but wakes nobody.
      (should (eq (mevedel-execution-set-owner-state session "/root" 'busy) t))
      (let ((id (mevedel-execution-mailbox-test--finish session "busy")))
        (mevedel-execution-mailbox-test--wait-consumed session id seen)
        ;; The answer to owner/state follows every wake decided before
        ;; it, so this is a barrier: had a wake been sent, it is here.
        (mevedel-execution-set-owner-state session "/root" "busy")
        (should-not wakes)
        ;; Turning idle wakes at once, before the answer.
        (mevedel-execution-set-owner-state session nil 'idle)
        (let ((delivery-id (car (car (last (cdr (funcall seen)))))))
          (should (equal wakes (list (list session "/root" (list delivery-id))))))))))

(ert-deftest mevedel-execution-mailbox-test-retire-owner ()
  "Retiring an owner forgets what it owes: no wake when it turns idle."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((wakes nil)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (mevedel-execution-wake-functions
            (list (lambda (_s owner ids) (push (cons owner ids) wakes)))))
      (mevedel-execution-set-owner-state session "/root" 'busy)
      (mevedel-execution-mailbox-test--wait-consumed
       session (mevedel-execution-mailbox-test--finish session "one") seen)
      (mevedel-execution-mailbox-test--wait-consumed
       session (mevedel-execution-mailbox-test--finish session "two") seen)
      (should (eql (mevedel-execution-retire-owner session "/root") 2))
      (should (eql (mevedel-execution-retire-owner session nil) 0))
      (mevedel-execution-set-owner-state session "/root" 'idle)
      (should-not wakes)
      ;; What comes later is owed again.
      (mevedel-execution-mailbox-test--finish session "three")
      (mevedel-execution-test--wait-until (lambda () wakes) "a wake for a later result")
      (should (equal (car (car wakes)) "/root")))))

(ert-deftest mevedel-execution-mailbox-test-owner-calls-async-and-checked ()
  "Owner calls take a callback; a bad state is refused locally."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (should (eq t (mevedel-execution-test--await
                   (lambda (cb) (mevedel-execution-set-owner-state session "/root/worker" 'busy cb)))))
    (should (equal (mevedel-execution-session-busy-owners session) '("/root/worker")))
    (should (eql 0 (mevedel-execution-test--await
                    (lambda (cb) (mevedel-execution-retire-owner session "/root/worker" cb)))))
    (should (eq t (mevedel-execution-test--await
                   (lambda (cb) (mevedel-execution-set-owner-state session "/root/worker" "idle" cb)))))
    (should-not (mevedel-execution-session-busy-owners session))
    (should-error (mevedel-execution-set-owner-state session "/root" 'asleep)
                  :type 'wrong-type-argument)))

(ert-deftest mevedel-execution-mailbox-test-busy-survives-helper-death ()
  "A session reopened on a new helper tells it which owners are busy."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((wakes nil)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (mevedel-execution-wake-functions
            (list (lambda (_s owner ids) (push (cons owner ids) wakes))))
           (proc (jsonrpc--process mevedel-execution--current)))
      (mevedel-execution-set-owner-state session "/root" 'busy)
      (cl-letf (((symbol-function 'message) #'ignore))
        (signal-process proc 'KILL)
        (mevedel-execution-test--wait-until (lambda () (null mevedel-execution--current))
                                            "the death to be noticed"))
      (mevedel-execution-mailbox-test--wait-consumed
       session (mevedel-execution-mailbox-test--finish session "after") seen)
      (mevedel-execution-set-owner-state session "/root" 'busy)
      (should-not wakes)
      (mevedel-execution-set-owner-state session "/root" 'idle)
      (should (= (length wakes) 1)))))

;;;; The process filter

(ert-deftest mevedel-execution-mailbox-test-call-leaves-no-message-behind ()
  "Messages read with a synchronous call's answer are handled before it returns.
A fake helper writes the answer and a notification in one write and
then nothing more: the notification must not wait for more input."
  (let* ((frame (lambda (json) (format "Content-Length: %d\r\n\r\n%s" (string-bytes json) json)))
         (payload (concat (funcall frame "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}")
                          (funcall frame "{\"jsonrpc\":\"2.0\",\"method\":\"exec/settled\",\"params\":{\"sessionId\":\"s\",\"facts\":{\"executionId\":\"exec-fake-000001\"}}}")))
         (events nil)
         (mevedel-execution-event-functions
          ;; Only this fake's events: the helper of an earlier test may
          ;; still report its exit.
          (list (lambda (type plist)
                  (when (eq type 'settled) (push (cons type plist) events)))))
         (conn (make-instance
                'mevedel-execution-rpc-connection
                :name "mevedel-exec-fake"
                :generation -1
                :events-buffer-scrollback-size 0
                :notification-dispatcher #'mevedel-execution--dispatch-notification
                :request-dispatcher #'mevedel-execution--dispatch-request
                :on-shutdown #'ignore
                :process (lambda ()
                           (make-process
                            :name "mevedel-exec-fake"
                            :command (list "sh" "-c" "read -r _; printf '%s' \"$1\"; exec cat >/dev/null"
                                           "sh" payload)
                            :connection-type 'pipe
                            :coding 'utf-8-emacs-unix
                            :noquery t)))))
    (unwind-protect
        (progn
          (should (equal (mevedel-execution-call conn 'ping nil 10) '(:ok t)))
          (should (equal events
                         '((settled :session-id "s" :facts (:execution-id "exec-fake-000001"))))))
      (delete-process (jsonrpc--process conn)))))

;;;; Monitors

(ert-deftest mevedel-execution-mailbox-test-monitor-functions ()
  "A monitor started through the facade delivers its filtered lines,
then its end; one can be listed and stopped."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session _seen
    (let* ((records nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack) (push record records) (funcall ack)))
           (terminal-of
            (lambda (monitor-id)
              (cl-find-if (lambda (r)
                            (and (equal (plist-get r :kind) "MONITOR_TERMINAL")
                                 (equal (plist-get (plist-get r :attrs) :monitor-id) monitor-id)))
                          records)))
           (filtered (mevedel-execution-monitor-start
                      session :command "echo keep 1; echo drop; echo keep 2"
                      :label "filtered" :filter "^keep")))
      (should (string-prefix-p "mon-" (plist-get filtered :monitor-id)))
      (should (equal (plist-get filtered :label) "filtered"))
      (let ((id (plist-get filtered :monitor-id)))
        (mevedel-execution-test--wait-until (lambda () (funcall terminal-of id))
                                            "the filtered monitor's end")
        (should (equal (apply #'append
                              (mapcar (lambda (r) (append (plist-get r :lines) nil))
                                      (reverse (cl-remove-if-not
                                                (lambda (r) (equal (plist-get r :kind) "MONITOR"))
                                                records))))
                       '("keep 1" "keep 2")))
        (should (eql (plist-get (plist-get (funcall terminal-of id) :attrs) :events) 2)))
      ;; A persistent one runs until stopped.
      (let* ((ticker (mevedel-execution-monitor-start
                      session :command "echo tick; exec sleep 1000" :label "ticker" :persistent t))
             (id (plist-get ticker :monitor-id)))
        (should (equal (mapcar (lambda (m) (plist-get m :monitor-id))
                               (mevedel-execution-monitor-list session nil))
                       (list id)))
        (should (null (mevedel-execution-monitor-list session "/root/other")))
        (let ((stopped (mevedel-execution-test--await
                        (lambda (cb) (mevedel-execution-monitor-stop session nil id cb)))))
          (should (equal (plist-get stopped :monitor-id) id))
          (should-not (equal (plist-get stopped :state) "running")))
        (mevedel-execution-test--wait-until (lambda () (funcall terminal-of id))
                                            "the stopped monitor's end")
        (should (null (mevedel-execution-monitor-list session nil))))
      (should (eq (car (should-error (mevedel-execution-monitor-start session :command " ")))
                  'wrong-type-argument)))))

(provide 'mevedel-execution-mailbox-test)
;;; mevedel-execution-mailbox-test.el ends here

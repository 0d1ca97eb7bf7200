;;; mevedel-execution-attention-test.el --- ERT tests of owed attention and durable ids  -*- lexical-binding: t; -*-

;;; Commentary:

;; The attention contract through the facade, against the real helper
;; with the fixtures of mevedel-execution-test-support.el: owed
;; results offered again at each turn's end until attended, the two
;; phases of a retirement, the `delivered' event, and the sink's memory
;; of durable delivery ids across a helper that died.
;;
;; `mevedel-execution-set-owner-state' is the barrier of these tests:
;; its answer follows every wake decided before it, and turning idle
;; wakes before the answer, so once it returned every wake it implies
;; has reached the wake functions.  Every other wait is a bounded loop
;; on a condition.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

;;;; Helpers

(defun mevedel-execution-attention-test--delivery-of (seen execution-id)
  "Return the delivery id SEEN got for EXECUTION-ID, waiting for it."
  (car (mevedel-execution-test--wait-until
        (lambda () (cl-find execution-id (cdr (funcall seen)) :key #'cl-caddr :test #'equal))
        (format "the delivery of %s" execution-id))))

(defun mevedel-execution-attention-test--durable (session seen text)
  "Run a command printing TEXT in SESSION to a durable delivery; return its id.
SEEN is the recording function of the test."
  (let ((id (mevedel-execution-mailbox-test--finish session text)))
    (mevedel-execution-mailbox-test--wait-consumed session id seen)
    (mevedel-execution-attention-test--delivery-of seen id)))

(defun mevedel-execution-attention-test--turn (session)
  "End a turn of the root owner in SESSION: busy, then idle.
Every wake the idle brings has run when this returns."
  (mevedel-execution-set-owner-state session nil 'busy)
  (mevedel-execution-set-owner-state session nil 'idle))

(defun mevedel-execution-attention-test--kill-helper ()
  "Kill the running helper with SIGKILL; return once its death was noticed."
  (let ((proc (jsonrpc--process mevedel-execution--current)))
    (cl-letf (((symbol-function 'message) #'ignore))
      (signal-process proc 'KILL)
      (mevedel-execution-test--wait-until (lambda () (null mevedel-execution--current))
                                          "the death to be noticed"))))

;;;; Attending

(ert-deftest mevedel-execution-attention-test-attend ()
  "Owed results come again at each idle until attended, coalesced with
newer ones; attended ones never come again; a stopped one is never owed."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((wakes nil)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (mevedel-execution-wake-functions
            (list (lambda (s owner ids)
                    (should (eq s session))
                    (push (cons owner ids) wakes))))
           (d1 (mevedel-execution-attention-test--durable session seen "one")))
      ;; Idle: woken at once.
      (mevedel-execution-test--wait-until (lambda () wakes) "the first wake")
      (should (equal wakes (list (list "/root" d1))))
      ;; Not attended: the next idle offers it again.
      (setq wakes nil)
      (mevedel-execution-attention-test--turn session)
      (should (equal wakes (list (list "/root" d1))))
      ;; A newer one while busy: one wake at idle, both, oldest first.
      (setq wakes nil)
      (mevedel-execution-set-owner-state session nil 'busy)
      (let ((d2 (mevedel-execution-attention-test--durable session seen "two")))
        (mevedel-execution-set-owner-state session nil 'idle)
        (should (equal wakes (list (list "/root" d1 d2))))
        ;; The model read the first: owed no more, counted once.
        (should (eql (mevedel-execution-attend session nil (list d1)) 1))
        (should (eql (mevedel-execution-attend session "/root" (list d1)) 0))
        (setq wakes nil)
        (mevedel-execution-attention-test--turn session)
        (should (equal wakes (list (list "/root" d2))))
        ;; Unknown ids count for nothing; the callback form answers too.
        (should (eql (mevedel-execution-test--await
                      (lambda (cb) (mevedel-execution-attend session nil (list d2 "dlv-none") cb)))
                     1))
        (setq wakes nil)
        (mevedel-execution-attention-test--turn session)
        (should-not wakes)))
    ;; Stopped by the person: the owner gets the result, owes nothing.
    (let* ((wakes nil)
           (records nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack) (push record records) (funcall ack)))
           (mevedel-execution-wake-functions
            (list (lambda (_s owner ids) (push (cons owner ids) wakes))))
           (id (mevedel-execution-mailbox-test--start-background
                session "exec sleep 1000" "sleeper")))
      (mevedel-execution-test--await (lambda (cb) (mevedel-execution-stop-user session id cb)))
      (let ((delivery-id (mevedel-execution-attention-test--delivery-of seen id)))
        (mevedel-execution-mailbox-test--wait-consumed session id seen)
        (should (equal (plist-get (plist-get (car records) :attrs) :status) "stopped"))
        (should (equal (plist-get (car records) :owner) "/root"))
        (mevedel-execution-attention-test--turn session)
        (should-not wakes)
        (should (eql (mevedel-execution-attend session nil (list delivery-id)) 0))))
    (should-error (mevedel-execution-attend session nil "dlv-1") :type 'wrong-type-argument)
    (should-error (mevedel-execution-attend session nil '(1 2)) :type 'wrong-type-argument)))

;;;; Retiring in two phases

(ert-deftest mevedel-execution-attention-test-retire-phases ()
  "Begin takes a frontier; commit retires up to it, abort nothing.
Results made after the frontier stay owed; one made before it whose
delivery becomes durable only after the commit is retired too."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((wakes nil)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (mevedel-execution-wake-functions
            (list (lambda (_s owner ids) (push (cons owner ids) wakes)))))
      (mevedel-execution-set-owner-state session nil 'busy)
      (let* ((d1 (mevedel-execution-attention-test--durable session seen "one"))
             (frontier (mevedel-execution-retire-begin session nil))
             (d2 (mevedel-execution-attention-test--durable session seen "two")))
        (should (natnump frontier))
        ;; Nothing is retired until the commit.
        (mevedel-execution-set-owner-state session nil 'idle)
        (should (equal wakes (list (list "/root" d1 d2))))
        (mevedel-execution-set-owner-state session nil 'busy)
        (should (eql (mevedel-execution-retire-commit session nil frontier) 1))
        (setq wakes nil)
        (mevedel-execution-set-owner-state session nil 'idle)
        (should (equal wakes (list (list "/root" d2))))
        ;; An abort leaves everything owed.
        (mevedel-execution-set-owner-state session nil 'busy)
        (let ((frontier (mevedel-execution-retire-begin session "/root")))
          (should (eq (mevedel-execution-retire-abort session "/root" frontier) t)))
        (setq wakes nil)
        (mevedel-execution-set-owner-state session nil 'idle)
        (should (equal wakes (list (list "/root" d2))))
        ;; The callback forms.
        (let ((frontier (mevedel-execution-test--await
                         (lambda (cb) (mevedel-execution-retire-begin session nil cb)))))
          (should (eql (mevedel-execution-test--await
                        (lambda (cb) (mevedel-execution-retire-commit session nil frontier cb)))
                       1)))
        (setq wakes nil)
        (mevedel-execution-attention-test--turn session)
        (should-not wakes)))
    ;; A result made before the frontier, durable only after the commit.
    (let* ((wakes nil)
           (held nil)
           (mevedel-execution-mailbox-delivery-function (lambda (_record ack) (setq held ack)))
           (mevedel-execution-wake-functions
            (list (lambda (_s owner ids) (push (cons owner ids) wakes))))
           (id (mevedel-execution-mailbox-test--finish session "late")))
      (mevedel-execution-test--wait-until (lambda () held) "the delivery")
      (let ((frontier (mevedel-execution-retire-begin session nil)))
        ;; Not owed yet: nothing to count, but it is covered.
        (should (eql (mevedel-execution-retire-commit session nil frontier) 0)))
      (funcall held)
      (mevedel-execution-mailbox-test--wait-consumed session id seen)
      (mevedel-execution-attention-test--turn session)
      (should-not wakes))
    ;; A frontier the helper never reached is refused.
    (should-error (mevedel-execution-retire-commit session nil 1000000)
                  :type 'mevedel-execution-helper-error)
    (should-error (mevedel-execution-retire-commit session nil -1)
                  :type 'wrong-type-argument)))

(ert-deftest mevedel-execution-attention-test-retire-frontier-of-dead-helper ()
  "A frontier taken on a helper that died is not sent to the next one.
What it covered died with its helper; the commit retires nothing."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (sent nil)
           (note (lambda (_conn method &rest _)
                   (when (eq method 'owner/retire) (push method sent)))))
      (mevedel-execution-attention-test--durable session seen "owed")
      (let ((frontier (mevedel-execution-retire-begin session nil)))
        (should (> frontier 0))
        (mevedel-execution-attention-test--kill-helper)
        (advice-add 'mevedel-execution-call-async :before note)
        (unwind-protect
            (progn
              (should (eql (mevedel-execution-retire-commit session nil frontier) 0))
              (should (eql (mevedel-execution-test--await
                            (lambda (cb)
                              (mevedel-execution-retire-begin session nil cb)))
                           0))
              (should (equal sent '(owner/retire))))
          (advice-remove 'mevedel-execution-call-async note))))))

;;;; The delivered event

(ert-deftest mevedel-execution-attention-test-delivered-event ()
  "Each durable ack is followed by a `delivered' event naming it."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((events nil)
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'delivered) (push plist events)))))
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (id (mevedel-execution-mailbox-test--finish session "heard" "/root/worker"))
           (delivery-id (mevedel-execution-attention-test--delivery-of seen id)))
      (mevedel-execution-test--wait-until (lambda () events) "the delivered event")
      (should (equal (car events)
                     (list :session-id (mevedel-execution-session-id session)
                           :delivery-id delivery-id
                           :execution-id id
                           :owner "/root/worker")))
      ;; A failure ack is no delivery.
      (setq events nil)
      (let* ((mevedel-execution-mailbox-delivery-function nil)
             (id (mevedel-execution-mailbox-test--finish session "unheard")))
        (mevedel-execution-test--wait-until (lambda () (cl-find-if #'cadr (car (funcall seen))))
                                            "a failure ack")
        (should (plist-get (mevedel-execution-mailbox-test--peek session id) :delivery-id))
        ;; The barrier: the events of everything before its answer ran.
        (mevedel-execution-set-owner-state session nil 'idle)
        (should-not events)))))

;;;; Across a helper that died

(ert-deftest mevedel-execution-attention-test-durable-survives-helper-death ()
  "A delivery made durable here whose ack the dying helper never got is
re-made by the next helper under its id: acked again, not handed to
the sink twice, and it wakes nobody."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((records nil)
           (wakes nil)
           (delivered nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack) (push record records) (funcall ack)))
           (mevedel-execution-wake-functions
            (list (lambda (_s owner ids) (push (cons owner ids) wakes))))
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'delivered) (push (plist-get plist :delivery-id) delivered)))))
           (id nil)
           (delivery-id nil))
      ;; The durable ack is lost: the helper still has it pending.
      (setq mevedel-execution-mailbox-test--drop t)
      (setq id (mevedel-execution-mailbox-test--finish session "survivor"))
      (setq delivery-id (mevedel-execution-attention-test--delivery-of seen id))
      (mevedel-execution-test--wait-until (lambda () records) "the sink")
      (should-not mevedel-execution-mailbox-test--drop)
      (should (plist-get (mevedel-execution-mailbox-test--peek session id) :delivery-id))
      ;; Its journal, saying pending, is on disk; then the helper dies.
      (mevedel-execution-request session 'transcript/checkpoint nil 30)
      (mevedel-execution-attention-test--kill-helper)
      ;; The next call starts a helper and reopens the session, whose
      ;; recovery re-makes the delivery under the same id.
      (should-not (mevedel-execution-list session nil))
      (mevedel-execution-test--wait-until (lambda () (member delivery-id delivered))
                                          "the re-made delivery to be acked")
      (should (equal (mevedel-execution-mailbox-test--attempts-of seen delivery-id) '(1 1)))
      (should (= (length records) 1))
      (should (equal (mevedel-execution-mailbox-test--acks-of seen delivery-id) '(nil nil)))
      (should (equal delivered (list delivery-id)))
      ;; Recovery never wakes.
      (mevedel-execution-set-owner-state session nil 'idle)
      (should-not wakes))))

(ert-deftest mevedel-execution-attention-test-pending-survives-helper-death ()
  "A delivery the sink still holds when its helper dies is not handed
over again when the next helper re-makes it; the sink's late ack goes
to the new helper."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((records nil)
           (held nil)
           (delivered nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack) (push record records) (setq held ack)))
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'delivered) (push (plist-get plist :delivery-id) delivered)))))
           (id (mevedel-execution-mailbox-test--finish session "held"))
           (delivery-id (mevedel-execution-attention-test--delivery-of seen id)))
      (mevedel-execution-test--wait-until (lambda () held) "the sink")
      (mevedel-execution-request session 'transcript/checkpoint nil 30)
      (mevedel-execution-attention-test--kill-helper)
      (should-not (mevedel-execution-list session nil))
      (mevedel-execution-test--wait-until
       (lambda () (equal (mevedel-execution-mailbox-test--attempts-of seen delivery-id) '(1 1)))
       "the re-made delivery")
      (should (= (length records) 1))
      (should-not (mevedel-execution-mailbox-test--acks-of seen delivery-id))
      (funcall held)
      (mevedel-execution-test--wait-until (lambda () (member delivery-id delivered))
                                          "the late ack to reach the new helper")
      (should (equal (mevedel-execution-mailbox-test--acks-of seen delivery-id) '(nil)))
      (should (= (length records) 1)))))

(ert-deftest mevedel-execution-attention-test-durable-ids-bounded ()
  "A session remembers a bounded number of durable ids, the newest."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((mevedel-execution-remembered-deliveries 2)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (sid (mevedel-execution-session-id session))
           (mine (lambda ()
                   (let (ids)
                     (maphash (lambda (k v)
                                (when (and (equal (car k) sid) (eq (car v) 'durable))
                                  (push (cdr k) ids)))
                              mevedel-execution--deliveries)
                     (sort ids #'string<))))
           (ids (mapcar (lambda (n)
                          (mevedel-execution-attention-test--durable
                           session seen (format "n%d" n)))
                        '(1 2 3 4 5))))
      ;; Beyond twice the bound, the oldest go down to the bound.
      (should (equal (funcall mine) (sort (last ids 2) #'string<)))
      (mevedel-execution-teardown-session session)
      (should-not (funcall mine)))))

(provide 'mevedel-execution-attention-test)
;;; mevedel-execution-attention-test.el ends here

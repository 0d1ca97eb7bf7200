;;; mevedel-execution-live-test.el --- ERT tests of the facade's live table  -*- lexical-binding: t; -*-

;;; Commentary:

;; `exec/changed' carries only the executions that changed; the facade
;; keeps each session's live table from it and hands listeners the
;; whole live set, as the helper's own `exec/list' gives it.  Driven
;; against the real helper with the fixtures of the mailbox tests;
;; every wait is a bounded loop on a condition.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun mevedel-execution-live-test--kill-helper ()
  "Kill the running helper with SIGKILL; return once its death was noticed."
  (let ((proc (jsonrpc--process mevedel-execution--current)))
    (cl-letf (((symbol-function 'message) #'ignore))
      (signal-process proc 'KILL)
      (mevedel-execution-test--wait-until (lambda () (null mevedel-execution--current))
                                          "the death to be noticed"))))

(defun mevedel-execution-live-test--ids (facts-list)
  "Return the execution ids of FACTS-LIST, in order."
  (mapcar (lambda (facts) (plist-get facts :execution-id)) facts-list))

(ert-deftest mevedel-execution-live-test-follows-changes ()
  "Listeners get the whole live set though the helper sends only changes.
It matches `exec/list' as work starts, and a settled execution leaves
it the one time its final facts come."
  (mevedel-execution-test--with-helper session
    (let* ((sid (mevedel-execution-session-id session))
           (live nil)
           (changed nil)
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (and (eq type 'changed)
                               (equal (plist-get plist :session-id) sid))
                      (setq live (mevedel-execution-live-test--ids (plist-get plist :live)))
                      (setq changed (append changed (plist-get plist :changed)))))))
           (a (mevedel-execution-mailbox-test--start-background session "sleep 300" "a"))
           (b (mevedel-execution-mailbox-test--background session "b done" nil "b"))
           (b-id (car b)))
      (mevedel-execution-test--wait-until
       (lambda () (equal live (list a b-id))) "both to be live")
      (should (equal (mevedel-execution-live-test--ids (mevedel-execution-list-user session))
                     (list a b-id)))
      (should (equal (mevedel-execution-live-test--ids (mevedel-execution-live session))
                     (list a b-id)))
      ;; Only executions that changed come, never the whole set again.
      (should (cl-every (lambda (facts) (member (plist-get facts :execution-id) (list a b-id)))
                        changed))
      (mevedel-execution-mailbox-test--open (cdr b))
      (mevedel-execution-test--wait-until (lambda () (equal live (list a))) "b to leave")
      (let ((finals (cl-remove-if-not
                     (lambda (facts) (equal (plist-get facts :state) "settled"))
                     changed)))
        (should (equal (mevedel-execution-live-test--ids finals) (list b-id)))
        (should (equal (plist-get (car finals) :status) "completed")))
      (should (equal (mevedel-execution-live-test--ids (mevedel-execution-live session))
                     (list a)))
      ;; What a listener is handed is its own: changing it changes nothing.
      (setcar (mevedel-execution-live session) nil)
      (plist-put (car (mevedel-execution-live session)) :state "mangled")
      (should (equal (plist-get (car (mevedel-execution-live session)) :state) "running"))
      (mevedel-execution-stop-user session a)
      (mevedel-execution-test--wait-until (lambda () (null live)) "a to leave")
      (should-not (mevedel-execution-live session))
      (should-not (mevedel-execution-list-user session)))))

(ert-deftest mevedel-execution-live-test-helper-exit ()
  "A helper's exit empties the table; the reopened session starts afresh."
  (mevedel-execution-test--with-helper session
    (let ((a (mevedel-execution-mailbox-test--start-background session "sleep 300" "a")))
      (mevedel-execution-test--wait-until
       (lambda () (equal (mevedel-execution-live-test--ids (mevedel-execution-live session))
                         (list a)))
       "a to be live")
      (mevedel-execution-live-test--kill-helper)
      (mevedel-execution-test--wait-until
       (lambda () (null (mevedel-execution-live session))) "the table to empty")
      ;; The next call reopens the session on a new helper.
      (let ((b (mevedel-execution-mailbox-test--start-background session "sleep 300" "b")))
        (mevedel-execution-test--wait-until
         (lambda () (equal (mevedel-execution-live-test--ids (mevedel-execution-live session))
                           (list b)))
         "only b to be live")
        (mevedel-execution-stop-user session b)))))

(ert-deftest mevedel-execution-live-test-changes-coalesce ()
  "A burst of changes reaches listeners as at most two events, the last one current.
The first goes out at once, the rest together a moment later, with
each execution's latest facts.  A listener that changes what it is
handed changes nothing for a reader, nor the live table, and an
output buffer's follower hears of each change at once."
  (mevedel-execution-test--with-helper session
    (let* ((sid (mevedel-execution-session-id session))
           (events nil)
           (read-states nil)
           (heard nil)
           (mangler (lambda (type plist)
                      (when (eq type 'changed)
                        (dolist (f (plist-get plist :live)) (plist-put f :state "mangled")))))
           (reader (lambda (type plist)
                     (when (and (eq type 'changed) (equal (plist-get plist :session-id) sid))
                       (push (plist-get plist :changed) events)
                       (dolist (f (plist-get plist :live))
                         (push (plist-get f :state) read-states)))))
           (follower (lambda (facts) (push (plist-get facts :output-bytes) heard)))
           (mevedel-execution-event-functions (list mangler)))
      ;; After the table's seeding, which the open asked for.
      (should-not (mevedel-execution-list-user session))
      (mevedel-execution-add-reader reader)
      (mevedel-execution-follow-facts sid "exec-zzzzz-000001" follower)
      (unwind-protect
          (progn
            (dotimes (i 5)
              (mevedel-execution--dispatch-notification
               mevedel-execution--current 'exec/changed
               (list :sessionId sid
                     :changed (vector (list :executionId "exec-zzzzz-000001" :owner "/root"
                                            :command "yes" :state "running"
                                            :outputBytes (1+ i)))))
              (mevedel-execution-drain))
            (should (equal (nreverse heard) '(1 2 3 4 5)))
            (should (<= (length events) 1))
            (mevedel-execution-test--wait-until
             (lambda () (equal (plist-get (car (car events)) :output-bytes) 5))
             "the last size, in a later event")
            (should (<= (length events) 2))
            (should (= 1 (length (car events))))
            (should (member "running" read-states))
            (should-not (member "mangled" read-states))
            (should (equal (plist-get (car (mevedel-execution-live session)) :state) "running")))
        (mevedel-execution-follow-facts sid "exec-zzzzz-000001" follower t)
        (remove-hook 'mevedel-execution-event-functions reader)))))

(ert-deftest mevedel-execution-live-test-growth-in-place ()
  "A `grown' entry takes the new counters into the facts held, in place.
The other facts stay; the follower and the `changed' event get the
table's facts, the event naming the execution as one that only grew;
an execution the table lacks is ignored."
  (mevedel-execution-test--with-helper session
    (let* ((sid (mevedel-execution-session-id session))
           (id "exec-zzzzz-000003")
           (events nil)
           (heard nil)
           (reader (lambda (type plist)
                     (when (and (eq type 'changed) (equal (plist-get plist :session-id) sid))
                       (push plist events))))
           (follower (lambda (facts) (push facts heard)))
           (note (lambda (params)
                   (mevedel-execution--dispatch-notification
                    mevedel-execution--current 'exec/changed (append (list :sessionId sid) params))
                   (mevedel-execution-drain)
                   (mevedel-execution-flush-changed))))
      (should-not (mevedel-execution-list-user session))
      (mevedel-execution-add-reader reader)
      (mevedel-execution-follow-facts sid id follower)
      (unwind-protect
          (progn
            (funcall note (list :changed (vector (list :executionId id :owner "/root" :command "yes"
                                                       :label "flood" :state "running" :wallMs 10
                                                       :outputBytes 0 :outputLines 0 :version 2))))
            (let ((held (car (mevedel-execution--live-list sid t))))
              (funcall note (list :changed []
                                  ;; [id wallMs outputBytes outputLines omittedBytes unreadBytes version]
                                  :grown (vector (vector id 1500 4096 80 0 4096 9)
                                                 (vector "exec-zzzzz-000099" 1 1 1 0 1 1))))
              ;; The same facts, grown: nothing made anew.
              (should (eq (car (mevedel-execution--live-list sid t)) held))
              (should (eq (car heard) held)))
            (let ((facts (car (mevedel-execution-live session))))
              (should (= (length (mevedel-execution-live session)) 1))
              (should (equal (plist-get facts :output-bytes) 4096))
              (should (equal (plist-get facts :output-lines) 80))
              (should (equal (plist-get facts :wall-ms) 1500))
              (should (equal (plist-get facts :version) 9))
              (should (equal (plist-get facts :label) "flood"))
              (should (equal (plist-get facts :state) "running")))
            (let ((last (car events)))
              ;; The live set as it was: the same list, not a copy made
              ;; for each of the events that hundreds growing make.
              (should (eq (plist-get last :live) (plist-get (cadr events) :live)))
              (should (equal (plist-get last :grown) (list id)))
              (should (equal (mapcar (lambda (f) (plist-get f :output-bytes)) (plist-get last :changed))
                             '(4096))))
            ;; Full facts after growth: not named as grown.
            (funcall note (list :changed (vector (list :executionId id :owner "/root" :command "yes"
                                                       :label "flood" :state "stopping"
                                                       :outputBytes 5000 :version 10))))
            (should-not (plist-get (car events) :grown)))
        (mevedel-execution-follow-facts sid id follower t)
        (remove-hook 'mevedel-execution-event-functions reader)))))

(provide 'mevedel-execution-live-test)

;;; mevedel-execution-live-test.el ends here

;;; mevedel-execution-filter-test.el --- ERT tests of what runs outside the process filter  -*- lexical-binding: t; -*-

;;; Commentary:

;; Event functions, wake functions, the mailbox sink and the callbacks
;; of asynchronous calls run from a queue, in the order the helper sent
;; their messages, never inside the process filter: so they may make
;; synchronous calls, and the messages read in the same chunk as theirs
;; are still handled.  Fake helpers (sh scripts) write several messages
;; in one write; against the real helper, a relay filter hands the
;; filter what several reads brought as one chunk, as a slow Emacs
;; would read it.  Every wait is a bounded loop on a condition.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'json)

;;;; Fake helpers

(defun mevedel-execution-filter-test--frame (json)
  "Return the wire frame of the JSON text."
  (format "Content-Length: %d\r\n\r\n%s" (string-bytes json) json))

(defun mevedel-execution-filter-test--settled (id)
  "Return the frame of an `exec/settled' of execution ID in session \"s\"."
  (mevedel-execution-filter-test--frame
   (format "{\"jsonrpc\":\"2.0\",\"method\":\"exec/settled\",\"params\":{\"sessionId\":\"s\",\"facts\":{\"executionId\":%S}}}"
           id)))

(defun mevedel-execution-filter-test--changed ()
  "Return the frame of an empty `exec/changed' of session \"s\"."
  (mevedel-execution-filter-test--frame
   "{\"jsonrpc\":\"2.0\",\"method\":\"exec/changed\",\"params\":{\"sessionId\":\"s\",\"changed\":[]}}"))

(defun mevedel-execution-filter-test--answer (id result)
  "Return the frame of the answer to request ID, RESULT a JSON text."
  (mevedel-execution-filter-test--frame
   (format "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":%s}" id result)))

(cl-defun mevedel-execution-filter-test--fake (script args &key dispatcher on-shutdown)
  "Return a connection to a fake helper running sh -c SCRIPT with ARGS.
DISPATCHER replaces the facade's notification dispatcher and
ON-SHUTDOWN its shutdown function (by default, nothing).  Its
requests are numbered from 1."
  (make-instance
   'mevedel-execution-rpc-connection
   :name "mevedel-exec-fake"
   :generation -1
   :events-buffer-scrollback-size 0
   :notification-dispatcher (or dispatcher #'mevedel-execution--dispatch-notification)
   :request-dispatcher #'mevedel-execution--dispatch-request
   :on-shutdown (or on-shutdown #'ignore)
   :process (lambda ()
              (make-process
               :name "mevedel-exec-fake"
               :command (append (list "sh" "-c" script "sh") args)
               :connection-type 'pipe
               :coding 'utf-8-emacs-unix
               :noquery t))))

(defun mevedel-execution-filter-test--fake-event (log)
  "Return an event function pushing (TYPE EXECUTION-ID) onto the symbol LOG.
Only the fakes' `settled' and `changed' count: the helper of an
earlier test may still report its exit."
  (lambda (type plist)
    (when (and (memq type '(settled changed))
               (equal (plist-get plist :session-id) "s"))
      (set log (cons (list type (plist-get (plist-get plist :facts) :execution-id))
                     (symbol-value log))))))

(defvar mevedel-execution-filter-test--log nil
  "What the running test saw, newest first.")

;;;; Synchronous calls from handlers, fake helpers

(ert-deftest mevedel-execution-filter-test-sync-call-from-event-function ()
  "An event function may make a synchronous call.
The fake writes three notifications in one write; the function
called for the first waits for an answer.  The two after it are
still handled, in order, after it."
  (let* ((mevedel-execution-filter-test--log nil)
         (conn nil)
         (mevedel-execution-event-functions
          (list (mevedel-execution-filter-test--fake-event 'mevedel-execution-filter-test--log)
                (lambda (type plist)
                  (when (and (eq type 'settled)
                             (equal (plist-get (plist-get plist :facts) :execution-id) "A"))
                    (push (list 'call (condition-case err
                                          (mevedel-execution-call conn 'ping nil 10)
                                        (error (list 'error err))))
                          mevedel-execution-filter-test--log))))))
    (setq conn (mevedel-execution-filter-test--fake
                "printf '%s' \"$1\"; read -r _; printf '%s' \"$2\"; exec cat >/dev/null"
                (list (concat (mevedel-execution-filter-test--settled "A")
                              (mevedel-execution-filter-test--changed)
                              (mevedel-execution-filter-test--settled "B"))
                      (mevedel-execution-filter-test--answer 1 "{\"ok\":true}"))))
    (unwind-protect
        (progn
          (mevedel-execution-test--wait-until
           (lambda () (>= (length mevedel-execution-filter-test--log) 4))
           "every event after the one whose function called")
          (should (equal (reverse mevedel-execution-filter-test--log)
                         '((settled "A") (call (:ok t)) (changed nil) (settled "B")))))
      (delete-process (jsonrpc--process conn)))))

(ert-deftest mevedel-execution-filter-test-sync-call-from-callback ()
  "An asynchronous call's callback may make a synchronous call.
The answer it gets comes in one write with a notification; that
notification and the one sent with the inner answer are handled,
after the callback."
  (let* ((mevedel-execution-filter-test--log nil)
         (mevedel-execution-event-functions
          (list (mevedel-execution-filter-test--fake-event 'mevedel-execution-filter-test--log)))
         (conn (mevedel-execution-filter-test--fake
                ;; The first read takes the first request's header line,
                ;; the next its blank line, the third its body and the
                ;; second request's header: it waits for the inner call.
                "read -r _; printf '%s' \"$1\"; read -r _; read -r _; printf '%s' \"$2\"; exec cat >/dev/null"
                (list (concat (mevedel-execution-filter-test--answer 1 "{\"first\":true}")
                              (mevedel-execution-filter-test--settled "X"))
                      (concat (mevedel-execution-filter-test--answer 2 "{\"second\":true}")
                              (mevedel-execution-filter-test--settled "C"))))))
    (unwind-protect
        (progn
          (mevedel-execution-call-async
           conn 'first nil
           :on-result (lambda (r)
                        (push (list 'first r) mevedel-execution-filter-test--log)
                        (push (list 'inner (condition-case err
                                               (mevedel-execution-call conn 'second nil 10)
                                             (error (list 'error err))))
                              mevedel-execution-filter-test--log))
           :timeout 10)
          (mevedel-execution-test--wait-until
           (lambda () (>= (length mevedel-execution-filter-test--log) 4))
           "the events around the callback")
          (should (equal (reverse mevedel-execution-filter-test--log)
                         '((first (:first t)) (inner (:second t))
                           (settled "X") (settled "C")))))
      (delete-process (jsonrpc--process conn)))))

(ert-deftest mevedel-execution-filter-test-call-inside-filter-refused ()
  "A synchronous call made inside the process filter is refused.
Waiting there would run the filter inside itself; the call signals
a clear error instead, and the messages read with it are all
handled."
  (let* ((log nil)
         (conn (mevedel-execution-filter-test--fake
                "printf '%s' \"$1\"; exec cat >/dev/null"
                (list (mapconcat
                       (lambda (m)
                         (mevedel-execution-filter-test--frame
                          (format "{\"jsonrpc\":\"2.0\",\"method\":%S,\"params\":{}}" m)))
                       '("one" "two" "three") ""))
                ;; A dispatcher of one's own runs inside the filter.
                :dispatcher
                (lambda (conn method _params)
                  (push method log)
                  (when (eq method 'one)
                    (push (condition-case err
                              (progn (mevedel-execution-call conn 'ping nil 1) 'returned)
                            (mevedel-execution-error (list 'refused (error-message-string err))))
                          log))))))
    (unwind-protect
        (progn
          (mevedel-execution-test--wait-until (lambda () (memq 'three log)) "the third message")
          (setq log (reverse log))
          (should (equal (car log) 'one))
          (should (eq (car (nth 1 log)) 'refused))
          (should (string-match-p "process filter.*callback" (cadr (nth 1 log))))
          (should (equal (nthcdr 2 log) '(two three))))
      (delete-process (jsonrpc--process conn)))))

(ert-deftest mevedel-execution-filter-test-order-buffers-and-death ()
  "Events, answers, lost answers and the exit come in the helper's order.
Each callback runs in the buffer current when its call was made."
  (let* ((log nil)
         (b1 (generate-new-buffer " *filter-test 1*"))
         (b2 (generate-new-buffer " *filter-test 2*"))
         (mevedel-execution-event-functions
          (list (lambda (type plist)
                  (cond ((memq type '(settled changed))
                         (when (equal (plist-get plist :session-id) "s")
                           (push (list type (plist-get (plist-get plist :facts) :execution-id)) log)))
                        ((and (eq type 'exit) (eql (plist-get plist :generation) -1))
                         (push (list 'exit (plist-get plist :unexpected)) log))))))
         (conn (mevedel-execution-filter-test--fake
                ;; Both requests read, the fake writes its last words and exits.
                "read -r _; read -r _; read -r _; printf '%s' \"$1\""
                (list (concat (mevedel-execution-filter-test--settled "A")
                              (mevedel-execution-filter-test--answer 1 "{\"first\":true}")
                              (mevedel-execution-filter-test--settled "B")))
                :on-shutdown #'mevedel-execution--on-shutdown)))
    ;; An expected end: no report of an unexpected death.
    (mevedel-execution--set-closing conn)
    (unwind-protect
        (progn
          (with-current-buffer b1
            (mevedel-execution-call-async
             conn 'first nil
             :on-result (lambda (r) (push (list 'first r (current-buffer)) log))
             :timeout 10))
          (with-current-buffer b2
            (mevedel-execution-call-async
             conn 'second nil
             :on-result (lambda (_) (push 'second log))
             :on-lost (lambda (_why) (push (list 'lost (current-buffer)) log))))
          (mevedel-execution-test--wait-until (lambda () (assq 'exit log)) "the exit event")
          (should (equal (reverse log)
                         `((settled "A") (first (:first t) ,b1) (settled "B")
                           (lost ,b2) (exit nil)))))
      (delete-process (jsonrpc--process conn))
      (kill-buffer b1)
      (kill-buffer b2))))

;;;; Against the real helper

(defun mevedel-execution-filter-test--frames (bytes)
  "Return the JSON bodies of BYTES, a unibyte string of whole frames.
Return nil when BYTES ends inside a frame."
  (let ((pos 0) (bodies nil) (whole t))
    (while (and whole (< pos (length bytes)))
      (if (and (eq (string-match "Content-Length: \\([0-9]+\\)\r\n\r\n" bytes pos) pos)
               (<= (+ (match-end 0) (string-to-number (match-string 1 bytes))) (length bytes)))
          (let ((end (+ (match-end 0) (string-to-number (match-string 1 bytes)))))
            (push (let ((json-object-type 'plist) (json-array-type 'list)
                        (json-false nil) (json-null nil))
                    (json-read-from-string
                     (decode-coding-string (substring bytes (match-end 0) end) 'utf-8)))
                  bodies)
            (setq pos end))
        (setq whole nil)))
    (and whole (nreverse bodies))))

(defun mevedel-execution-filter-test--as-one-read (conn start done)
  "Call START, then give CONN's filter what the helper wrote as one chunk.
Until DONE, called with the messages read so far, returns non-nil,
a relay filter keeps what arrives; then the filter gets it all at
once, as if Emacs had been too busy to read sooner.  Return the
messages."
  (let* ((proc (jsonrpc--process conn))
         (filter (process-filter proc))
         (chunks nil)
         (messages nil))
    (set-process-filter proc (lambda (_proc string) (push string chunks)))
    (unwind-protect
        (progn
          (funcall start)
          (mevedel-execution-test--wait-until
           (lambda ()
             (setq messages (mevedel-execution-filter-test--frames
                             (encode-coding-string (apply #'concat (reverse chunks)) 'utf-8)))
             (and messages (funcall done messages)))
           "the messages to relay"))
      (set-process-filter proc filter))
    (funcall filter proc (apply #'concat (reverse chunks)))
    messages))

(ert-deftest mevedel-execution-filter-test-sync-call-from-wake-function ()
  "A wake function may say its owner busy synchronously.
Turning idle with attention owed brings the wake and then the answer
to `owner/state'; read in one chunk, the wake's function calls the
helper and waits, and the answer after the wake is still handled,
after it, as is everything the helper sends later."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((log nil)
           (mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'settled)
                      (push (list 'settled (plist-get (plist-get plist :facts) :execution-id)) log)))))
           (mevedel-execution-wake-functions
            (list (lambda (s owner _ids)
                    (push (list 'wake owner) log)
                    (push (list 'busy (condition-case err
                                          (mevedel-execution-set-owner-state s owner 'busy)
                                        (error (list 'error err))))
                          log)))))
      (mevedel-execution-set-owner-state session nil 'busy)
      ;; A durable result of a busy owner: attention owed, nobody woken.
      (mevedel-execution-mailbox-test--wait-consumed
       session (mevedel-execution-mailbox-test--finish session "owed") seen)
      (should-not (assq 'wake log))
      (setq log nil)
      (let* ((conn (mevedel-execution-ensure-session session))
             (handle nil)
             (messages
              (mevedel-execution-filter-test--as-one-read
               conn
               (lambda ()
                 (setq handle (mevedel-execution-set-owner-state
                               session nil 'idle (lambda (v) (push (list 'idle v) log)))))
               (lambda (messages)
                 (cl-find (cdr handle) messages
                          :key (lambda (m) (and (not (plist-get m :method)) (plist-get m :id))))))))
        ;; The premise: the wake came before the answer, in the same chunk.
        (should (cl-find "session/wake"
                         (cl-subseq messages 0 (cl-position (cdr handle) messages
                                                            :key (lambda (m) (plist-get m :id))))
                         :key (lambda (m) (plist-get m :method)) :test #'equal))
        (mevedel-execution-test--wait-until (lambda () (assq 'idle log)) "the answer after the wake")
        (should (equal (reverse log) '((wake "/root") (busy t) (idle t))))
        ;; The stream goes on: a later command's answer and events come.
        (let* ((obs (mevedel-execution-test--start session "echo later"))
               (id (plist-get (plist-get obs :facts) :execution-id)))
          (should (equal (plist-get obs :output) "later\n"))
          (mevedel-execution-test--wait-until
           (lambda () (member (list 'settled id) log)) "the later command's settled event"))))))

;;;; What the sink was handed

(ert-deftest mevedel-execution-filter-test-ack-after-teardown ()
  "A sink that acks after its session was torn down keeps nothing.
The helper dropped the delivery: no ack is sent, and nothing is
remembered of it."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((held nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (_record ack) (setq held ack)))
           (sid (mevedel-execution-session-id session))
           (mine (lambda ()
                   (let (keys)
                     (maphash (lambda (k _) (when (equal (car k) sid) (push k keys)))
                              mevedel-execution--deliveries)
                     keys))))
      (mevedel-execution-mailbox-test--finish session "held")
      (mevedel-execution-test--wait-until (lambda () held) "the delivery")
      (should (= (length (funcall mine)) 1))
      (mevedel-execution-teardown-session session)
      (should-not (funcall mine))
      (funcall held)
      (should-not (funcall mine))
      (should-not (car (funcall seen))))))

(ert-deftest mevedel-execution-filter-test-deliveries-outlive-their-helper ()
  "What the sink made durable is remembered when its helper exits.
The next helper re-makes what was pending under the same ids, so
the session keeps the ids its sink made durable while it is open."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session seen
    (let* ((mevedel-execution-mailbox-delivery-function #'mevedel-execution-mailbox-test--acking-sink)
           (sid (mevedel-execution-session-id session))
           (mine (lambda ()
                   (let (values)
                     (maphash (lambda (k v) (when (equal (car k) sid) (push v values)))
                              mevedel-execution--deliveries)
                     values)))
           (proc (jsonrpc--process mevedel-execution--current)))
      (mevedel-execution-mailbox-test--wait-consumed
       session (mevedel-execution-mailbox-test--finish session "kept") seen)
      (should (equal (mapcar #'car (funcall mine)) '(durable)))
      (cl-letf (((symbol-function 'message) #'ignore))
        (signal-process proc 'KILL)
        (mevedel-execution-test--wait-until (lambda () (null mevedel-execution--current))
                                            "the death to be noticed"))
      (should (equal (mapcar #'car (funcall mine)) '(durable)))
      ;; The session reopens on a new helper, whose deliveries join them.
      (mevedel-execution-mailbox-test--wait-consumed
       session (mevedel-execution-mailbox-test--finish session "again") seen)
      (should (equal (mapcar #'car (funcall mine)) '(durable durable)))
      ;; Closing the session forgets them all.
      (mevedel-execution-teardown-session session)
      (should-not (funcall mine)))))

(provide 'mevedel-execution-filter-test)
;;; mevedel-execution-filter-test.el ends here

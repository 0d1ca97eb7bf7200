;;; mevedel-execution-mailbox.el --- Events, deliveries and owners' attention for mevedel-exec  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; What the helper tells on its own: passive events for
;; `mevedel-execution-event-functions', completion deliveries for the
;; acknowledged sink `mevedel-execution-mailbox-delivery-function' (each
;; handed over once, across helpers), wakes of idle owners, and the
;; calls that tell the helper an owner's state and what it attended to
;; or retired.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'mevedel-execution-session)

(defvar mevedel-execution-mailbox-delivery-function nil
  "Function receiving completion deliveries, the acknowledged sink.
It is called with two arguments: RECORD, the delivery plist
\(`:delivery-id', `:session-id', `:owner', `:kind', `:attrs',
`:attempt', and `:observation', `:lines' or `:text'), and ACK, a
function to call exactly once, now or later: with no argument once
the record is durable on the Emacs side, or with an error message
string when it could not be kept, so the helper sends it again
later.  Only that call sends `mailbox/ack'; later calls are
ignored.  If the function signals an error before calling ACK,
that counts as a failure with the error's message.

A delivery is handed to this function once: while it holds one
whose ACK has not been called, a resend of the same `:delivery-id'
is dropped, and once it acknowledged one as durable, a resend is
acknowledged again without calling it.  That holds across helpers
too: after a helper died, the session's next helper re-makes each
delivery that was pending under its first id, and one already
made durable here is only acknowledged again; an ACK called after
its helper died answers the helper the session is open on then.
This memory lasts while the session is open (see
`mevedel-execution-remembered-deliveries').  Only a delivery it
reported as failed is handed to it again.  When this variable is
nil, deliveries are acknowledged as failed and stay pending in
the helper.  Like `mevedel-execution-event-functions', it runs from
a timer, in the order of the helper's messages.")

(defvar mevedel-execution-wake-functions nil
  "Functions called when the helper wakes an idle owner.
Each receives SESSION (the session object), OWNER (a string such
as `mevedel-execution-root-owner') and DELIVERY-IDS, the ids of
every durable delivery the owner still owes attention to, oldest
first; several owed results come as one wake.  Only results that
ended on their own are owed, never a stopped one.  They stay owed,
and come again with the next wake each time the owner turns idle,
until `mevedel-execution-attend' says the model read them or a
retirement (`mevedel-execution-retire-owner') forgets them.  The
helper wakes only an owner that is idle, see
`mevedel-execution-set-owner-state'.  An
error in one function is reported and does not stop the others.  Like
`mevedel-execution-event-functions', they run from a timer, in the
order of the helper's messages, and may make synchronous calls.")

(defvar mevedel-execution--deliveries (make-hash-table :test #'equal)
  "What the mailbox sink was handed, by (SESSION-ID . DELIVERY-ID).
The value is a fresh cons (STATE . GENERATION): STATE is `pending'
until the sink acknowledges, then `durable'; GENERATION is that of
the helper that sent it.  A failed delivery is removed, so its
resend reaches the sink again.  Entries outlive their helper: the
next helper re-makes a delivery that was pending when its
predecessor died under the same id, and one the sink already made
durable must then be acknowledged again, not handed over twice.  A
session's entries go when it is torn down, and each session keeps
at most `mevedel-execution-remembered-deliveries' durable ones.")

(defcustom mevedel-execution-remembered-deliveries 1024
  "How many durable delivery ids each session remembers, newest kept.
The helper resends a delivery only until it has our durable ack
on record, a few seconds at most, so only the latest few matter."
  :type 'natnum
  :group 'mevedel-execution)

(defvar mevedel-execution--durable-ids (make-hash-table :test #'equal)
  "Per session id, (COUNT . IDS): its durable delivery ids, newest first.
It bounds what `mevedel-execution--deliveries' keeps of a session.")

(defun mevedel-execution--note-durable (session-id delivery-id)
  "Note that DELIVERY-ID of SESSION-ID is durable; forget the oldest ones.
Beyond twice `mevedel-execution-remembered-deliveries' durable ids,
the session's oldest are dropped down to that number."
  (let* ((cell (or (gethash session-id mevedel-execution--durable-ids)
                   (puthash session-id (cons 0 nil) mevedel-execution--durable-ids)))
         (keep mevedel-execution-remembered-deliveries))
    (setcar cell (1+ (car cell)))
    (push delivery-id (cdr cell))
    (when (> (car cell) (* 2 keep))
      (let ((last (nthcdr (1- keep) (cdr cell))))
        (dolist (old (cdr last))
          (let ((key (cons session-id old)))
            (when (eq (car-safe (gethash key mevedel-execution--deliveries)) 'durable)
              (remhash key mevedel-execution--deliveries))))
        (setcdr last nil)
        (setcar cell keep)))))

(defun mevedel-execution-forget-deliveries (&optional session-id)
  "Forget every delivery of SESSION-ID, or of every session when nil.
The helper dropped them: its session was closed, or it exited."
  (if (null session-id)
      (progn (clrhash mevedel-execution--durable-ids)
             (clrhash mevedel-execution--deliveries))
    (remhash session-id mevedel-execution--durable-ids)
    (let (doomed)
      (maphash (lambda (key _value)
                 (when (equal (car key) session-id) (push key doomed)))
               mevedel-execution--deliveries)
      (dolist (key doomed)
        (remhash key mevedel-execution--deliveries)))))

(defun mevedel-execution--event (type params)
  "Hand the event TYPE with wire PARAMS to the listeners, if there are any.
Most notifications are events, often with nobody listening: they
cost nothing then."
  (when (default-value 'mevedel-execution-event-functions)
    (with-temp-buffer
      (mevedel-execution-run-event type params))))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'exec/progress)) params)
  "Hand the `progress' event PARAMS to `mevedel-execution-event-functions'."
  (mevedel-execution--event 'progress params))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'exec/settled)) params)
  "Hand the `settled' event PARAMS to `mevedel-execution-event-functions'."
  (mevedel-execution--event 'settled params))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'mailbox/delivered)) params)
  "Hand the `delivered' event PARAMS to `mevedel-execution-event-functions'."
  (mevedel-execution--event 'delivered params))

(cl-defmethod mevedel-execution-handle-notification (conn (_method (eql 'session/wake)) params)
  "Hand the wake PARAMS from CONN to the listeners, then the wake functions."
  (with-temp-buffer
    (let* ((wake (mevedel-execution-normalize params))
           (session-id (plist-get wake :session-id))
           (owner (plist-get wake :owner))
           (ids (copy-sequence (plist-get wake :delivery-ids))))
      ;; A listener may change WAKE: what the wake needs is read first.
      (mevedel-execution-emit 'wake wake)
      (mevedel-execution--wake conn session-id owner ids))))

(cl-defmethod mevedel-execution-handle-notification (conn (_method (eql 'mailbox/deliver)) params)
  "Hand the delivery PARAMS from CONN to the mailbox sink."
  (with-temp-buffer (mevedel-execution--deliver conn params)))

(defun mevedel-execution--wake (conn session-id owner ids)
  "Run `mevedel-execution-wake-functions' for a wake from CONN.
It is for OWNER of SESSION-ID, about the deliveries IDS.  A wake
for a session that is not open on CONN's helper is dropped."
  (let ((session (mevedel-execution-session-on conn session-id)))
    (when session
      (run-hook-wrapped
       'mevedel-execution-wake-functions
       (lambda (fn)
         (condition-case err
             (funcall fn session owner (copy-sequence ids))
           (error (message "mevedel-exec: error in a wake function: %s"
                           (error-message-string err))))
         nil)))))

(defun mevedel-execution--send-ack (conn session-id delivery-id error)
  "Answer the delivery DELIVERY-ID of SESSION-ID on CONN.
ERROR nil says durable, a string says why it was not kept.  CONN
nil or dead is not asked: the session's next helper re-makes what
was pending, and the answer is repeated then."
  (when (and conn (jsonrpc-running-p conn))
    (mevedel-execution-call-async
     conn 'mailbox/ack
     (mevedel-execution-to-wire
      'mailbox/ack (list :session-id session-id
                         :delivery-id delivery-id
                         :durable (unless error t)
                         :error error))
     ;; A lost ack costs nothing: the helper sends the delivery again,
     ;; and the answer is repeated from `mevedel-execution--deliveries'.
     :timeout mevedel-execution-request-timeout)))

(defun mevedel-execution--deliver (conn params)
  "Hand the delivery PARAMS from CONN's helper to the mailbox sink.
The sink gets it with an ack function that sends `mailbox/ack'
once; see `mevedel-execution-mailbox-delivery-function'."
  (let* ((record (mevedel-execution-normalize params))
         (delivery-id (plist-get record :delivery-id))
         (session-id (plist-get record :session-id))
         (key (cons session-id delivery-id))
         (state (car-safe (gethash key mevedel-execution--deliveries)))
         (sink mevedel-execution-mailbox-delivery-function))
    (cond
     ;; A session torn down was closed in the helper, which dropped its
     ;; deliveries: one still in the pipe has nobody to answer.
     ((not (mevedel-execution-session-on conn session-id)) nil)
     ;; Our durable ack was lost or came late, or this helper re-made
     ;; what an earlier one had sent: say it again.
     ((eq state 'durable)
      (mevedel-execution--send-ack conn session-id delivery-id nil))
     ;; The sink holds it and will answer through its ack.
     ((eq state 'pending) nil)
     ((not (functionp sink))
      (mevedel-execution--send-ack conn session-id delivery-id
                                   "no mailbox sink in this Emacs"))
     (t
      (let* ((handed (cons 'pending (mevedel-execution-generation conn)))
             (done nil)
             (ack (lambda (&optional error)
                    (unless done
                      (setq done t)
                      (let ((error (and error (format "%s" error))))
                        ;; The helper takes an empty error for no error.
                        (when (equal error "")
                          (setq error "the mailbox sink failed"))
                        ;; Unless the session was torn down since, which
                        ;; dropped the delivery: then nobody waits for the
                        ;; answer, and nothing is kept.
                        (when (eq (gethash key mevedel-execution--deliveries) handed)
                          (if error
                              (remhash key mevedel-execution--deliveries)
                            (puthash key (cons 'durable (cdr handed))
                                     mevedel-execution--deliveries)
                            (mevedel-execution--note-durable session-id delivery-id))
                          ;; To the helper the session is open on now,
                          ;; which may not be the one that sent it.
                          (mevedel-execution--send-ack
                           (mevedel-execution-session-connection session-id)
                           session-id delivery-id error))))
                    nil)))
        (puthash key handed mevedel-execution--deliveries)
        ;; Not `condition-case-unless-debug': under `debug-on-error' the
        ;; delivery would stay pending here forever, never to be resent.
        (condition-case err
            (funcall sink record ack)
          (error
           (if done
               (message "mevedel-exec: error in the mailbox sink after its ack: %s"
                        (error-message-string err))
             (funcall ack (format "the mailbox sink failed: %s"
                                  (error-message-string err)))))))))))

;;;; Owners and their attention

(defun mevedel-execution-set-owner-state (session owner state &optional callback)
  "Tell the helper that OWNER in SESSION is STATE, `busy' or `idle'.
OWNER nil means `mevedel-execution-root-owner'.  An owner is idle
until said busy; the helper wakes only idle owners
\(`mevedel-execution-wake-functions'), so say busy when an agent's
turn starts and idle when it ends.  Turning idle with attention
owed brings a wake at once.

Without CALLBACK, wait for the answer and return t: no wake decided
before it comes after it, so once a `busy' call returned, no wake
arrives until the owner is idle again.  (Made from a hook or a
callback of this package, the call returns first, and the wakes read
before its answer follow once that hook or callback returns.)  With
CALLBACK, return at once; CALLBACK receives t, or (:error ERR).  A
busy owner is told busy again when its session reopens on a new
helper."
  (let ((owner (or owner mevedel-execution-root-owner))
        (state (if (symbolp state) (symbol-name state) state)))
    (unless (member state '("busy" "idle"))
      (signal 'wrong-type-argument (list '(member busy idle) state)))
    (setf (mevedel-execution-session-busy-owners session)
          (if (equal state "busy")
              (cl-adjoin owner (mevedel-execution-session-busy-owners session)
                         :test #'equal)
            (remove owner (mevedel-execution-session-busy-owners session))))
    (mevedel-execution-request-either
     session 'owner/state (list :owner owner :state state)
     (lambda (_result) t)
     callback)))

(defun mevedel-execution-attend (session owner delivery-ids &optional callback)
  "Say that OWNER in SESSION attended to DELIVERY-IDS; return how many were owed.
Call it when the model read those results inside a turn (the ids a
wake function received, or a delivery's `:delivery-id'): they are
owed no more and no later wake offers them again.  A result the
model polled to its end needs no call.  OWNER nil means
`mevedel-execution-root-owner'; DELIVERY-IDS is a list of strings,
and ids not owed (unknown, attended or retired already) count for
nothing.  Without CALLBACK, wait and return the count.  With
CALLBACK, return at once; CALLBACK receives the count, or (:error
ERR)."
  (unless (and (or (listp delivery-ids) (vectorp delivery-ids))
               (cl-every #'stringp delivery-ids))
    (signal 'wrong-type-argument (list 'list-of-strings delivery-ids)))
  (mevedel-execution-request-either
   session 'owner/attend
   (list :owner (or owner mevedel-execution-root-owner)
         :delivery-ids (vconcat delivery-ids))
   (lambda (result) (or (plist-get result :attended) 0))
   callback))

(defun mevedel-execution-retire-owner (session owner &optional callback)
  "Retire the attention OWNER in SESSION owes; return how many were owed.
Call it when the person stops that owner's turn: results made up to
now bring no wake, those made later do, and monitors keep running.
OWNER nil means `mevedel-execution-root-owner'.  Without CALLBACK,
wait and return the count.  With CALLBACK, return at once; CALLBACK
receives the count, or (:error ERR).

This retires at once.  When stopping the turn can fail, retire in
two phases instead: `mevedel-execution-retire-begin' takes the
frontier before the stop, then `mevedel-execution-retire-commit'
retires up to it once the stop took, or
`mevedel-execution-retire-abort' leaves everything owed."
  (mevedel-execution-request-either
   session 'owner/retire (list :owner (or owner mevedel-execution-root-owner))
   (lambda (result) (plist-get result :retired))
   callback))

(defun mevedel-execution-retire-begin (session owner &optional callback)
  "Begin retiring the attention OWNER in SESSION owes; return the frontier.
The frontier, an integer, marks every result made so far; nothing
is retired yet.  Pass it to `mevedel-execution-retire-commit' once
the turn is stopped, or to `mevedel-execution-retire-abort' when the
stop failed.  Results made after it stay owed either way.  OWNER
nil means `mevedel-execution-root-owner'.  Without CALLBACK, wait
and return the frontier.  With CALLBACK, return at once; CALLBACK
receives the frontier, or (:error ERR)."
  (let* ((owner (or owner mevedel-execution-root-owner))
         (note (lambda (result)
                 (let ((frontier (plist-get result :frontier)))
                   ;; Which helper took it: a frontier means nothing
                   ;; to the next one.
                   (setf (mevedel-execution-session-retiring session)
                         (cons (cons owner (cons frontier
                                                 (mevedel-execution-session-generation session)))
                               (cl-remove owner (mevedel-execution-session-retiring session)
                                          :key #'car :test #'equal)))
                   frontier))))
    (mevedel-execution-request-either
     session 'owner/retire (list :owner owner :phase "begin") note callback)))

(defun mevedel-execution--retire-end (session owner phase frontier value callback)
  "End OWNER's retirement in SESSION with PHASE at FRONTIER.
VALUE maps the result; CALLBACK as in `mevedel-execution-retire-commit'.
A frontier taken on a helper that has died since is not sent: the
attention it covered died with that helper (a new helper owes
nothing from before, and a delivery it re-makes never wakes), and
the new helper's frontiers count from zero again.  The answer is
then VALUE of an empty result."
  (unless (natnump frontier)
    (signal 'wrong-type-argument (list 'natnump frontier)))
  (let* ((owner (or owner mevedel-execution-root-owner))
         (begun (assoc owner (mevedel-execution-session-retiring session)))
         (stale (and begun (eql (cadr begun) frontier)
                     (not (and (eql (cddr begun)
                                    (mevedel-execution-session-generation session))
                               (mevedel-execution-session-connection
                                (mevedel-execution-session-id session)))))))
    (when (and begun (eql (cadr begun) frontier))
      (setf (mevedel-execution-session-retiring session)
            (delq begun (mevedel-execution-session-retiring session))))
    (cond
     ((not stale)
      (mevedel-execution-request-either
       session 'owner/retire (list :owner owner :phase phase :frontier frontier)
       value callback))
     ((not callback) (funcall value nil))
     (t
      ;; Like an answer: from the queue, in the caller's buffer.
      (mevedel-execution-defer #'mevedel-execution-run-callback
                               (current-buffer) callback (funcall value nil))
      nil))))

(defun mevedel-execution-retire-commit (session owner frontier &optional callback)
  "Retire what OWNER in SESSION owes up to FRONTIER; return how many.
FRONTIER is what `mevedel-execution-retire-begin' returned.  It
retires every result made up to it, including one whose delivery
becomes durable only later; results made after it stay owed, and
monitors keep running.  OWNER nil means
`mevedel-execution-root-owner'.  Without CALLBACK, wait and return
the count.  With CALLBACK, return at once; CALLBACK receives the
count, or (:error ERR).  A frontier taken on a helper that has died
since retires nothing there is left to retire: the count is 0."
  (mevedel-execution--retire-end
   session owner "commit" frontier
   (lambda (result) (or (plist-get result :retired) 0))
   callback))

(defun mevedel-execution-retire-abort (session owner frontier &optional callback)
  "Abandon the retirement OWNER in SESSION began at FRONTIER; return t.
Call it when stopping the turn failed: everything stays owed.
FRONTIER is what `mevedel-execution-retire-begin' returned; OWNER
nil means `mevedel-execution-root-owner'.  Without CALLBACK, wait
and return t.  With CALLBACK, return at once; CALLBACK receives t,
or (:error ERR)."
  (mevedel-execution--retire-end
   session owner "abort" frontier (lambda (_result) t) callback))

(provide 'mevedel-execution-mailbox)
;;; mevedel-execution-mailbox.el ends here

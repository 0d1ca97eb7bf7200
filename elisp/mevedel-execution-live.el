;;; mevedel-execution-live.el --- The live table of each session, from exec/changed  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; Each open session's live table, seeded by an `exec/list' and merged
;; from every `exec/changed' (its `grown' entries in place), and the
;; coalesced `changed' events that hand it to listeners.

;;; Code:

(require 'cl-lib)
(require 'mevedel-execution-connection)

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'exec/changed)) params)
  "Merge the executions that changed, PARAMS, into their session's live table.
The output buffers following one of them learn it at once; the
listeners get the `changed' event, coalesced (see
`mevedel-execution--hold-changed')."
  (let* ((session-id (plist-get params :sessionId))
         (changed (mevedel-execution-normalize (plist-get params :changed)))
         (grown (mevedel-execution--live-grow session-id (plist-get params :grown))))
    (mevedel-execution--live-merge session-id changed)
    (dolist (facts changed)
      (mevedel-execution-tell-followers session-id facts))
    (dolist (facts grown)
      (mevedel-execution-tell-followers session-id facts))
    (when (default-value 'mevedel-execution-event-functions)
      (mevedel-execution--hold-changed session-id changed grown))))

;;;;; Coalesced `changed' events

;; Hundreds of live commands make the helper send `exec/changed' many
;; times a second, and each `changed' event hands every listener the
;; whole live set: a panel redraws it.  So the first change after a
;; quiet spell goes out at once, and the ones that follow within
;; `mevedel-execution-changed-spacing' go out together at its end,
;; their `:changed' merged (the latest facts of each execution) and
;; `:live' as it is then.  Every other event, and the end of every
;; synchronous call, first sends what is held: the order the helper
;; sent things in is kept.

(defconst mevedel-execution-changed-spacing 0.25
  "Seconds between two `changed' events of one session, at least.")

(defvar mevedel-execution--held-changed nil
  "Alist of (SESSION-ID FACTS . FULL) waiting for their `changed' event.
FACTS is newest first, maybe several of one execution; FULL the
ids among them that changed other than by growth.  An entry is an
event owed, even with none.")

(defvar mevedel-execution--changed-sent (make-hash-table :test #'equal)
  "Per session id, the `float-time' its last `changed' event went out.")

(defvar mevedel-execution--changed-timer nil
  "The timer that sends the held `changed' events, or nil.")

(defun mevedel-execution--hold-changed (session-id changed &optional grown)
  "Send the `changed' event of SESSION-ID with CHANGED and GROWN now, or hold it.
GROWN are facts that changed only by growth.  Held when one went
out less than `mevedel-execution-changed-spacing' ago: it then goes
out with what follows, at that spacing."
  (let* ((cell (or (assoc session-id mevedel-execution--held-changed)
                   (car (push (list session-id nil) mevedel-execution--held-changed))))
         (last (gethash session-id mevedel-execution--changed-sent))
         (wait (and last (- (+ last mevedel-execution-changed-spacing) (float-time)))))
    (let ((held (cadr cell)))
      (dolist (facts changed)
        (push (plist-get facts :execution-id) (cddr cell))
        (push facts held))
      (dolist (facts grown)
        (push facts held))
      (setcar (cdr cell) held))
    (if (and wait (> wait 0))
        (unless mevedel-execution--changed-timer
          (setq mevedel-execution--changed-timer
                (run-at-time wait nil #'mevedel-execution--changed-due)))
      (mevedel-execution--send-changed session-id))))

(defun mevedel-execution--changed-due ()
  "Send the held `changed' events, from the queue (where events run)."
  (setq mevedel-execution--changed-timer nil)
  (mevedel-execution-defer #'mevedel-execution-flush-changed))

(defun mevedel-execution--send-changed (session-id)
  "Send the held `changed' event of SESSION-ID, if one is held."
  (let ((cell (assoc session-id mevedel-execution--held-changed)))
    (when cell
      (setq mevedel-execution--held-changed (delq cell mevedel-execution--held-changed))
      (puthash session-id (float-time) mevedel-execution--changed-sent)
      (let ((changed (mevedel-execution--latest (cadr cell))))
        (with-temp-buffer
          ;; Shared with the live table: only listeners that are not
          ;; readers pay for a copy.
          (mevedel-execution-emit
           'changed (list :session-id session-id
                          :changed changed
                          :grown (mevedel-execution--grown-ids changed (cddr cell))
                          :live (mevedel-execution--live-list session-id t))
           t))))))

(defun mevedel-execution--grown-ids (changed full)
  "Return the ids of CHANGED that are not in FULL: they only grew."
  (let ((out nil))
    (dolist (facts changed)
      (let ((id (plist-get facts :execution-id)))
        (unless (member id full)
          (push id out))))
    (nreverse out)))

(defvar mevedel-execution--latest-seen (make-hash-table :test #'equal)
  "The ids `mevedel-execution--latest' met, emptied before each use.
One table kept for every call: it is sized once for the live set,
not allocated again a few times a second.")

(defun mevedel-execution--latest (facts-list)
  "Return the latest facts of each execution in FACTS-LIST.
FACTS-LIST is newest first; what is returned, oldest first."
  (let ((seen mevedel-execution--latest-seen)
        (out nil))
    (clrhash seen)
    (dolist (facts facts-list)
      (let ((id (plist-get facts :execution-id)))
        (unless (gethash id seen)
          (puthash id t seen)
          (push facts out))))
    (clrhash seen)
    out))

(defun mevedel-execution-flush-changed ()
  "Send every held `changed' event now."
  (when mevedel-execution--changed-timer
    (cancel-timer mevedel-execution--changed-timer)
    (setq mevedel-execution--changed-timer nil))
  (while mevedel-execution--held-changed
    (mevedel-execution--send-changed (caar mevedel-execution--held-changed))))

(setq mevedel-execution-flush-held-function #'mevedel-execution-flush-changed)

;;;;; The live table

;; `exec/changed' carries only the executions that changed, a settled
;; one once with its final facts.  The table of each session is seeded
;; by an `exec/list' sent when it opens (whose answer the helper places
;; in the stream of notifications, so merging from there on stays true)
;; and then merged from every `exec/changed'.

(defvar mevedel-execution--live (make-hash-table :test #'equal)
  "The live executions of each session, as its helper last said.
Key: a session id; value: a hash table from execution id to facts.")

(defun mevedel-execution--live-table (session-id)
  "Return the live table of SESSION-ID, made empty if it has none."
  (or (gethash session-id mevedel-execution--live)
      (puthash session-id (make-hash-table :test #'equal) mevedel-execution--live)))

(defvar mevedel-execution--live-order (make-hash-table :test #'eq :weakness 'key)
  "Per live table, its facts in `exec/list' order, until a merge changes it.
Growth, merged in place, changes neither the facts nor their order:
hundreds of live commands are not sorted again for each event.")

(defun mevedel-execution--live-merge (session-id facts-list)
  "Merge FACTS-LIST into the live table of SESSION-ID.
A settled execution leaves it; any other is added or replaced."
  (let ((table (mevedel-execution--live-table session-id)))
    (when facts-list
      (remhash table mevedel-execution--live-order))
    (dolist (facts facts-list)
      (let ((id (plist-get facts :execution-id)))
        (if (equal (plist-get facts :state) "settled")
            (remhash id table)
          ;; Fresh from the wire: listeners that may change what they
          ;; are handed get copies (`mevedel-execution-emit').
          (puthash id facts table))))))

(defconst mevedel-execution--growth-keys
  '(:wall-ms :output-bytes :output-lines :omitted-bytes :unread-bytes :version)
  "The counters of a `grown' entry, in their order after its execution id.
An entry is an array, [ID WALL-MS OUTPUT-BYTES ...]: hundreds a second
are read, and keys would be most of each.")

(defun mevedel-execution--live-grow (session-id grown)
  "Merge GROWN, the wire `grown' entries, into the live table of SESSION-ID.
Each execution's facts there take the new counters in place: with
hundreds growing, no facts are made anew.  Return those facts; an
entry of an execution the table lacks is ignored."
  (let ((table (gethash session-id mevedel-execution--live))
        (out nil))
    (when table
      (mapc (lambda (entry)
              (let ((facts (and (vectorp entry) (> (length entry) 6)
                                (gethash (aref entry 0) table)))
                    (i 0))
                (when facts
                  (dolist (key mevedel-execution--growth-keys)
                    (let ((value (aref entry (setq i (1+ i)))))
                      (when value (plist-put facts key value))))
                  (push facts out))))
            grown))
    (nreverse out)))

(defun mevedel-execution--live-seed (session-id executions)
  "Make EXECUTIONS, an `exec/list' answer, the live table of SESSION-ID."
  (clrhash (mevedel-execution--live-table session-id))
  (remhash (mevedel-execution--live-table session-id) mevedel-execution--live-order)
  (mevedel-execution--live-merge session-id executions))

(defun mevedel-execution--live-before-p (a b)
  "Return non-nil if facts A come before B in `exec/list' order.
Started ones by start, then the others; ties by id (arrival)."
  (let ((sa (plist-get a :started-at))
        (sb (plist-get b :started-at)))
    (cond ((and sa (not sb)) t)
          ((and sb (not sa)) nil)
          ((and sa (not (equal sa sb))) (string< sa sb))
          (t (string< (plist-get a :execution-id) (plist-get b :execution-id))))))

(defun mevedel-execution--live-list (session-id &optional shared)
  "Return fresh facts of the live executions of SESSION-ID, in list order.
SHARED: the table's own list of its own facts, neither copied, which
stays the same list while only growth is merged; whoever gets it
must change neither."
  (let* ((table (gethash session-id mevedel-execution--live))
         (order (and table (gethash table mevedel-execution--live-order))))
    (when (and table (not order) (> (hash-table-count table) 0))
      (maphash (lambda (_id facts) (push facts order)) table)
      (puthash table (sort order #'mevedel-execution--live-before-p)
               mevedel-execution--live-order))
    (setq order (gethash table mevedel-execution--live-order))
    (if shared order (mapcar #'copy-tree order))))

(defun mevedel-execution-live-facts (session-id execution-id)
  "Return a copy of the live table's facts of EXECUTION-ID in SESSION-ID, or nil.
Nil too once it settled: it left the table."
  (let ((table (gethash session-id mevedel-execution--live)))
    (and table (copy-tree (gethash execution-id table)))))

(defun mevedel-execution-live-forget (&optional session-id)
  "Forget the live table of SESSION-ID, or of every session when nil.
Its helper exited, or the session closed."
  (if session-id
      (remhash session-id mevedel-execution--live)
    (clrhash mevedel-execution--live)))

(defun mevedel-execution-live-list (session-id)
  "Return copies of the facts of SESSION-ID's live executions, in list order."
  (mevedel-execution--live-list session-id))

(defun mevedel-execution-seed-live (conn session-id params)
  "Seed the live table of SESSION-ID on CONN's helper from an `exec/list'.
PARAMS are its parameters.  Its answer is handled in the order the
helper sent it among the `exec/changed' events, which then merge
into what it listed."
  (mevedel-execution--live-seed session-id nil)
  (mevedel-execution-call-async
   conn 'exec/list params
   :on-result (lambda (result)
                (mevedel-execution--live-seed session-id (plist-get result :executions)))
   :on-error (lambda (err)
               (message "mevedel-exec: listing %s: %s" session-id (plist-get err :message)))))

(provide 'mevedel-execution-live)
;;; mevedel-execution-live.el ends here

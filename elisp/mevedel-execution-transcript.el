;;; mevedel-execution-transcript.el --- Transcript lines of mevedel-exec background work  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; Author: The mevedel-exec developers
;; Version: 0.1.0
;; Keywords: processes, tools
;; URL: https://github.com/mevedel/mevedel-exec

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; What a person sees of background work in the transcript.  The
;; background-work panel is in mevedel-execution-panel.el.
;;
;; Transcript records.  The helper keeps a durable journal per session:
;; each execution's row at start, its settlement, one completion
;; breadcrumb for each execution that yielded, notices, and `lost' marks
;; for executions a restarted helper found without an end.
;; `mevedel-execution-transcript-records' reads them,
;; `mevedel-execution-transcript-rows' folds them into the latest state
;; of every execution (what a reload needs to rebuild its rows), and
;; `mevedel-execution-transcript-render' turns a breadcrumb or a notice
;; into one line; a breadcrumb gets a [Show result] button that opens
;; the full output.  A line is the helper's text, or built from
;; structured fields, never from command output, which could spoof it.


;;; Code:

(require 'cl-lib)
(require 'button)
(require 'seq)
(require 'subr-x)
(require 'mevedel-execution)
(require 'mevedel-execution-spool)

(defgroup mevedel-execution-transcript nil
  "Faces of the transcript lines of mevedel-exec background work.
Its options are in the group `mevedel-execution'."
  :group 'mevedel-execution
  :prefix "mevedel-execution-transcript-")

;; The panel lived in this file once; its command still works from here.
(autoload 'mevedel-execution-panel "mevedel-execution-panel"
  "Show the live background work of a session in a panel." t)

;;;; Faces

(defface mevedel-execution-transcript-completed '((t :inherit success))
  "Face of a line about a command that completed.")

(defface mevedel-execution-transcript-failed '((t :inherit error))
  "Face of a line about a command that failed.")

(defface mevedel-execution-transcript-stopped '((t :inherit shadow))
  "Face of a line about a command that was stopped.
A stop is neutral: someone asked for it.")

(defface mevedel-execution-transcript-timed-out '((t :inherit warning))
  "Face of a line about a command that timed out.")

(defface mevedel-execution-transcript-lost '((t :inherit warning))
  "Face of a line about a command whose end is unknown.")

(defun mevedel-execution-transcript-status-face (status)
  "Return the face for the view status STATUS (a string), or nil."
  (pcase status
    ("completed" 'mevedel-execution-transcript-completed)
    ("failed" 'mevedel-execution-transcript-failed)
    ("stopped" 'mevedel-execution-transcript-stopped)
    ("timed-out" 'mevedel-execution-transcript-timed-out)
    ("lost" 'mevedel-execution-transcript-lost)))

;;;; Records

(defun mevedel-execution-transcript-records (session &optional since limit)
  "Return SESSION's transcript records after SINCE, as (RECORDS . NEXT).
SINCE is the NEXT of an earlier call (nil starts at the beginning);
LIMIT bounds how many records come back (the helper's default is
1000).  An empty RECORDS means caught up; pass NEXT as SINCE to
continue.  Each record is a plist: `:seq', `:type' (\"row\",
\"settled\", \"breadcrumb\", \"notice\" or \"lost\"),
`:execution-id', `:tool-use-id', `:owner', `:at', `:facts',
`:status', `:exit-code', `:signal', `:label', `:text', `:attrs'."
  (let ((result (mevedel-execution-request
                 session 'transcript/records (list :since since :limit limit) 30)))
    (cons (plist-get result :records) (plist-get result :next))))

(defun mevedel-execution-transcript-checkpoint (session)
  "Make SESSION's journal durable; return the seq everything up to is on disk."
  (plist-get (mevedel-execution-request session 'transcript/checkpoint nil 30)
             :seq))

(defun mevedel-execution-transcript--field (record key)
  "Return KEY of RECORD, falling back to its facts."
  (let ((v (plist-get record key)))
    (if (null v) (plist-get (plist-get record :facts) key) v)))

(defun mevedel-execution-transcript--fold (entry record)
  "Return ENTRY updated with the lifecycle RECORD (row, settled or lost)."
  (let ((entry (plist-put entry :type (plist-get record :type))))
    (dolist (key '(:seq :at))
      (when (plist-get record key)
        (setq entry (plist-put entry key (plist-get record key)))))
    (when (plist-get record :facts)
      (setq entry (plist-put entry :facts (plist-get record :facts))))
    (dolist (key '(:owner :tool-use-id :label :status :exit-code :signal))
      (let ((v (mevedel-execution-transcript--field record key)))
        (when v (setq entry (plist-put entry key v)))))
    (when (equal (plist-get record :type) "lost")
      (setq entry (plist-put entry :status "lost")))
    entry))

(defun mevedel-execution-transcript-rows (records)
  "Fold RECORDS into the latest state of each execution, first seen first.
Return a list of plists, one per execution id: `:execution-id',
`:type' (the latest of \"row\", \"settled\" or \"lost\"; nil when
only a breadcrumb was seen), `:seq', `:at', `:facts' (the latest
facts), `:owner', `:tool-use-id', `:label', `:status',
`:exit-code', `:signal', and `:breadcrumb', the execution's
breadcrumb record or nil.  A settlement or a lost mark overrides
the row; a row never overrides either.  Notices and records
without an execution id belong to no row and are left out.
RECORDS are in the order the helper returned them."
  (let ((table (make-hash-table :test #'equal))
        (order nil))
    (dolist (record records)
      (let ((id (plist-get record :execution-id))
            (type (plist-get record :type)))
        (when (and id (member type '("row" "settled" "lost" "breadcrumb")))
          (let ((entry (gethash id table)))
            (unless entry
              (push id order)
              (setq entry (list :execution-id id :type nil)))
            (setq entry
                  (pcase type
                    ("breadcrumb" (plist-put entry :breadcrumb record))
                    ("row" (if (member (plist-get entry :type) '("settled" "lost"))
                               entry
                             (mevedel-execution-transcript--fold entry record)))
                    (_ (mevedel-execution-transcript--fold entry record))))
            (puthash id entry table)))))
    (mapcar (lambda (id) (gethash id table)) (nreverse order))))

;;;; Wording

;; The helper words breadcrumbs and notices (Go's transcript.Breadcrumb
;; and transcript.Notice) and journals the text; a record carries it.
;; These build the same line from structured fields, for a record
;; without one.  test/golden/wire.json holds the helper's wording of a
;; set of cases, and the ERT suite checks these functions against it.

(defconst mevedel-execution-transcript--name-chars 60
  "Most characters of a label or a command in quotes.")

(defconst mevedel-execution-transcript--field-chars 60
  "Most characters of an owner or a reason.")

(defconst mevedel-execution-transcript--word-chars 24
  "Most characters of a status or a signal name.")

(defconst mevedel-execution-transcript--gaps
  "[[:cntrl:][:space:]\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]+"
  "A run of what may not show in a line, which becomes one space.")

(defun mevedel-execution-transcript-one-line (text)
  "Return TEXT on one line, without control or format characters.
Bidirectional overrides and zero-width marks, which could reorder
or hide text, go too.  The result is a new string."
  (let ((i 0) (n (length text)) (plain t))
    ;; Most texts (a panel's 200 commands, redrawn) have nothing to
    ;; replace but single spaces between words: a copy, where the
    ;; replacement makes several strings a space.
    (while (and plain (string-match mevedel-execution-transcript--gaps text i))
      (setq plain (and (> (match-beginning 0) 0) (< (match-end 0) n)
                       (= (match-end 0) (1+ (match-beginning 0)))
                       (eq (aref text (match-beginning 0)) ?\s))
            i (match-end 0)))
    (if plain
        (copy-sequence text)
      (string-trim (replace-regexp-in-string mevedel-execution-transcript--gaps " " text)))))

(defun mevedel-execution-transcript--gap-p (char)
  "Return non-nil if CHAR may not show in a line: it becomes a space.
Those are spaces, line breaks, control and format characters (bidi
overrides and zero-width marks could reorder or hide text)."
  (memq (get-char-code-property char 'general-category) '(Cc Cf Zs Zl Zp)))

(defun mevedel-execution-transcript-clean (text max)
  "Return TEXT made safe on one line, at most MAX characters long.
Every run of characters that may not show (see
`mevedel-execution-transcript--gap-p') becomes one space, the ends
are trimmed, and a longer text is cut to MAX - 1 characters and an
ellipsis.  TEXT nil or not a string gives \"\"."
  (let ((out nil) (n 0) (gap nil))
    (when (stringp text)
      (cl-loop for c across text
               do (cond ((mevedel-execution-transcript--gap-p c) (setq gap (> n 0)))
                        ((> n max) (cl-return))
                        (t (when gap
                             (push ?\s out)
                             (setq n (1+ n) gap nil))
                           (push c out)
                           (setq n (1+ n))))))
    (let ((line (concat (nreverse out))))
      (if (<= n max)
          line
        (concat (string-trim-right (substring line 0 (1- max)) " +") "…")))))

(defun mevedel-execution-transcript--quoted-name (label command)
  "Return \" \\\"NAME\\\"\" for LABEL, or else COMMAND; \"\" when both are blank.
A quote or backslash in the name is escaped, so it cannot close
its quotes early."
  (let ((name (mevedel-execution-transcript-clean
               label mevedel-execution-transcript--name-chars)))
    (when (string-empty-p name)
      (setq name (mevedel-execution-transcript-clean
                  command mevedel-execution-transcript--name-chars)))
    (if (string-empty-p name)
        ""
      (concat " \"" (replace-regexp-in-string "[\"\\]" "\\\\\\&" name t) "\""))))

(defun mevedel-execution-transcript--ending (status exit-code signal)
  "Return STATUS worded with the detail it warrants.
EXIT-CODE (an integer or nil) or else SIGNAL is that detail."
  (let* ((signal (mevedel-execution-transcript-clean
                  signal mevedel-execution-transcript--word-chars))
         (detail (cond (exit-code (format " (exit code %d)" exit-code))
                       ((not (string-empty-p signal)) (format " (signal %s)" signal))
                       (t ""))))
    (pcase status
      ("completed" (if exit-code (concat "completed" detail) "completed"))
      ("failed" (concat "failed" detail))
      ("stopped" "stopped")             ; neutral: whoever stopped it meant to
      ("timed-out" "timed out")
      ("lost" "lost (the helper restarted before it ended)")
      ((or 'nil "") (concat "ended" detail))
      (_ (concat (mevedel-execution-transcript-clean
                  status mevedel-execution-transcript--word-chars)
                 detail)))))

(defun mevedel-execution-transcript-breadcrumb-text (label command status exit-code signal)
  "Return the completion line of a yielded execution, as the helper words it.
It is named by LABEL, or else COMMAND.  STATUS is \"completed\",
\"failed\", \"stopped\", \"timed-out\" or \"lost\"; a failure shows
EXIT-CODE, or SIGNAL when there is no code, and a stop shows
neither:

  ● Background command \"Run tests\" completed (exit code 0)"
  (concat "● Background command"
          (mevedel-execution-transcript--quoted-name label command)
          " "
          (mevedel-execution-transcript--ending status exit-code signal)))

(defun mevedel-execution-transcript-ended-text (noun label command status exit-code signal)
  "Return NOUN, the name of LABEL or else COMMAND, and how it ended.
STATUS, EXIT-CODE and SIGNAL are worded as in breadcrumbs:

  Build \"make\" failed (exit code 2)"
  (concat noun (mevedel-execution-transcript--quoted-name label command)
          " " (mevedel-execution-transcript--ending status exit-code signal)))

(defun mevedel-execution-transcript-ending-words (status exit-code signal)
  "Return how an execution ended, worded as in breadcrumbs: failed (exit code 2).
STATUS, EXIT-CODE and SIGNAL are its facts of those names."
  (mevedel-execution-transcript--ending status exit-code signal))

(defun mevedel-execution-transcript-named-text (noun label command)
  "Return NOUN and the quoted name of LABEL or else COMMAND: Build \"make\"."
  (concat noun (mevedel-execution-transcript--quoted-name label command)))

(defun mevedel-execution-transcript--attr-int (attrs key)
  "Return KEY of ATTRS as an integer, or nil when it is not a whole number."
  (let ((v (plist-get attrs key)))
    (cond ((integerp v) v)
          ((and (floatp v) (= v (ftruncate v))) (truncate v)))))

(defun mevedel-execution-transcript--attr-string (attrs key)
  "Return KEY of ATTRS if it is a string, else \"\"."
  (let ((v (plist-get attrs key)))
    (if (stringp v) v "")))

(defun mevedel-execution-transcript-notice-text (attrs)
  "Return the line of a notice, as the helper words it, from ATTRS only.
ATTRS is a plist with Lisp keys: `:kind' (\"EXECUTION\" or
\"MONITOR_TERMINAL\"), `:owner', `:label', `:command', `:status',
`:exit-code', `:signal', `:events', `:suppressed', `:reason'.

  ● Command \"build\" from /root/sub completed (exit code 0)
  ● Monitor \"ticker\" stopped · 2 events · 5 suppressed"
  (let* ((str (lambda (key) (mevedel-execution-transcript--attr-string attrs key)))
         (monitor (string-prefix-p "MONITOR" (funcall str :kind)))
         (owner (mevedel-execution-transcript-clean
                 (funcall str :owner) mevedel-execution-transcript--field-chars))
         (code (let ((n (mevedel-execution-transcript--attr-int attrs :exit-code)))
                 (and n (<= -2147483648 n 2147483647) n)))
         (events (mevedel-execution-transcript--attr-int attrs :events))
         (suppressed (mevedel-execution-transcript--attr-int attrs :suppressed))
         (reason (mevedel-execution-transcript-clean
                  (funcall str :reason) mevedel-execution-transcript--field-chars)))
    (concat (if monitor "● Monitor" "● Command")
            (mevedel-execution-transcript--quoted-name (funcall str :label) (funcall str :command))
            (if (string-empty-p owner) "" (concat " from " owner))
            " "
            (mevedel-execution-transcript--ending (funcall str :status) code (funcall str :signal))
            (if (or monitor events)
                (format " · %d %s" (or events 0) (if (eql events 1) "event" "events"))
              "")
            (if (and suppressed (> suppressed 0)) (format " · %d suppressed" suppressed) "")
            (if (string-empty-p reason) "" (concat " · " reason)))))

;;;; Rendering

(defun mevedel-execution-transcript--describe (record)
  "Return the line of the breadcrumb or notice RECORD from its fields.
A record the helper journaled carries its line; this words one
without, as the helper would."
  (if (equal (plist-get record :type) "notice")
      (mevedel-execution-transcript-notice-text (plist-get record :attrs))
    (mevedel-execution-transcript-breadcrumb-text
     (mevedel-execution-transcript--field record :label)
     (mevedel-execution-transcript--field record :command)
     (mevedel-execution-transcript--field record :status)
     (mevedel-execution-transcript--field record :exit-code)
     (mevedel-execution-transcript--field record :signal))))

(defun mevedel-execution-transcript--status (record)
  "Return the view status of RECORD, or nil.
A notice keeps its status among its attributes."
  (or (mevedel-execution-transcript--field record :status)
      (plist-get (plist-get record :attrs) :status)))

(define-button-type 'mevedel-execution-transcript-show-result
  'action #'mevedel-execution-transcript--show-result
  'follow-link t
  'help-echo "Open the full output of this command")

(defun mevedel-execution-transcript--show-result (button)
  "Open the full output of the execution BUTTON is about."
  (let ((session (mevedel-execution-resolve-session
                  (button-get button 'mevedel-execution-session)
                  (button-get button 'mevedel-execution-session-id))))
    (pop-to-buffer
     (mevedel-execution-spool-open-output
      session (button-get button 'mevedel-execution-id)))))

(defun mevedel-execution-transcript--button (record session)
  "Return a [Show result] button for RECORD's execution in SESSION."
  (make-text-button
   (copy-sequence "[Show result]") nil
   'type 'mevedel-execution-transcript-show-result
   'mevedel-execution-id (plist-get record :execution-id)
   'mevedel-execution-session session
   'mevedel-execution-session-id
   (or (and session (mevedel-execution-session-id session))
       (mevedel-execution-transcript--field record :session-id))))

(defun mevedel-execution-transcript-render (record &optional session)
  "Return the transcript line of RECORD as a propertized string, or nil.
A breadcrumb shows its text and a [Show result] button that opens
the execution's full output in SESSION (by default the open
session the record names, or the only open one); a notice shows
its text only.  The status gives the line its face.  Row, settled
and lost records have no line of their own: they are the state of
the tool call that started the command (see
`mevedel-execution-transcript-rows'), and a yielded execution found
lost after a restart has its own breadcrumb saying so.  For them
the value is nil.  The line never contains command output: it is
the record's `:text', or built from its structured fields."
  (let ((type (plist-get record :type))
        (id (plist-get record :execution-id)))
    (when (member type '("breadcrumb" "notice"))
      (let* ((text (plist-get record :text))
             (line (mevedel-execution-transcript-one-line
                    (if (and (stringp text) (not (string-blank-p text)))
                        text
                      (mevedel-execution-transcript--describe record))))
             (face (mevedel-execution-transcript-status-face
                    (mevedel-execution-transcript--status record))))
        (when face
          (add-face-text-property 0 (length line) face t line))
        (when (and id (equal type "breadcrumb"))
          (setq line (concat line " " (mevedel-execution-transcript--button record session))))
        (add-text-properties 0 (length line)
                             (list 'mevedel-execution-record record
                                   'mevedel-execution-id id)
                             line)
        line))))

;;;; Deliveries

;; What the mailbox sink receives can show in the transcript too: a
;; result forwarded from another owner, a monitor's events, its end.
;; As for records, the line is built from the delivery's structured
;; attributes; an execution's output never shows, and a monitor's
;; event lines, which are output, show only after their prefix, on one
;; line each, without escapes or control characters.

(defcustom mevedel-execution-transcript-event-lines 20
  "Most event lines one MONITOR delivery shows; the rest are counted."
  :type 'natnum
  :group 'mevedel-execution)

(defcustom mevedel-execution-transcript-event-chars 200
  "Most characters of one monitor event line."
  :type 'natnum
  :group 'mevedel-execution)

(defconst mevedel-execution-transcript--escape-regexp
  (concat
   ;; Strings (OSC, DCS, SOS, PM, APC) up to BEL or ST, or to the end.
   "\\(?:\e[]PX^_]\\|[\u0090\u0098\u009d-\u009f]\\)"
   "[^\a\e\u009c]*\\(?:\a\\|\e\\\\\\|\u009c\\)?"
   ;; Control sequences (CSI), colours among them.
   "\\|\\(?:\e\\[\\|\u009b\\)[0-?]*[ -/]*[@-~]?"
   ;; Any other escape: ESC, intermediates, a final byte.
   "\\|\e[ -/]*[0-~]?")
  "A terminal escape sequence, 7-bit or 8-bit.")

(defun mevedel-execution-transcript-event-text (line)
  "Return the monitor event LINE fit for one transcript line.
Terminal escape sequences go, what may not show becomes a space
\(see `mevedel-execution-transcript-clean'), and the line is cut at
`mevedel-execution-transcript-event-chars' characters."
  (mevedel-execution-transcript-clean
   (and (stringp line)
        (let ((case-fold-search nil))
          (replace-regexp-in-string
           mevedel-execution-transcript--escape-regexp "" line t t)))
   mevedel-execution-transcript-event-chars))

(defun mevedel-execution-transcript--monitor-notice-attrs (attrs)
  "Return the notice attributes of a MONITOR_TERMINAL delivery's ATTRS.
As the helper words a monitor's end: a stop shows no exit code, and
a reason only when it says why the monitor was stopped for noise."
  (let* ((status (mevedel-execution-transcript--attr-string attrs :status))
         (reason (mevedel-execution-transcript--attr-string attrs :reason))
         (stopped (equal status "stopped")))
    (list :kind "MONITOR_TERMINAL"
          :label (plist-get attrs :label)
          :command (plist-get attrs :command)
          :status status
          :signal (plist-get attrs :signal)
          :events (or (plist-get attrs :events) 0)
          :suppressed (plist-get attrs :suppressed)
          :exit-code (unless stopped (plist-get attrs :exit-code))
          :reason (unless (and stopped (not (string-match-p "noisy" reason)))
                    reason))))

(defun mevedel-execution-transcript--monitor-events (attrs lines)
  "Return the transcript lines of a MONITOR delivery: ATTRS and LINES.
One line per event, at most `mevedel-execution-transcript-event-lines',
then one that counts the events not shown and those suppressed."
  (let* ((max mevedel-execution-transcript-event-lines)
         (shown (seq-take lines max))
         (hidden (- (length lines) (length shown)))
         (suppressed (or (mevedel-execution-transcript--attr-int attrs :suppressed) 0))
         (out (mapcar (lambda (line)
                        (string-trim-right
                         (concat "● Monitor event: "
                                 (mevedel-execution-transcript-event-text line))))
                      shown)))
    (when (or (> hidden 0) (> suppressed 0))
      (setq out
            (append out
                    (list (concat
                           "● Monitor"
                           (mevedel-execution-transcript--quoted-name
                            (mevedel-execution-transcript--attr-string attrs :label)
                            (mevedel-execution-transcript--attr-string attrs :command))
                           (if (> hidden 0)
                               (format " · %d more %s not shown" hidden
                                       (if (= hidden 1) "event" "events"))
                             "")
                           (if (> suppressed 0) (format " · %d suppressed" suppressed) ""))))))
    out))

(defun mevedel-execution-transcript-render-delivery (record &optional own-owner)
  "Return the transcript lines of the delivery RECORD, or nil.
RECORD is the plist `mevedel-execution-mailbox-delivery-function'
receives (`:kind', `:owner', `:attrs', `:lines', ...).  The value
is a string, its lines joined by newlines (no final newline), or
nil when the delivery needs no line:

- EXECUTION for OWN-OWNER (default `mevedel-execution-root-owner'):
  nil, its breadcrumb is the line;
- EXECUTION for another owner, forwarded: the breadcrumb line,
  `● Background command \"LABEL\" completed (exit code 0)' (failed,
  stopped or timed out likewise; a stop is neutral);
- MONITOR: one `● Monitor event: LINE' per event, at most
  `mevedel-execution-transcript-event-lines' of them, each cut at
  `mevedel-execution-transcript-event-chars' characters and without
  escapes or control characters, then one line counting the events
  not shown and those suppressed, if any;
- MONITOR_TERMINAL: the monitor's end as the helper words it,
  `● Monitor \"LABEL\" stopped · 2 events';
- any other kind: nil.

Lines are built from RECORD's structured attributes only, never
from its observation's output or its `:text' (output could spoof a
line); a monitor's event lines are the one place output shows, each
after its prefix.  An execution's and a monitor's end carry the
face of their status."
  (let* ((attrs (plist-get record :attrs))
         (status (mevedel-execution-transcript--attr-string attrs :status))
         (face (mevedel-execution-transcript-status-face status))
         (faced (lambda (line)
                  (when face
                    (add-face-text-property 0 (length line) face t line))
                  line)))
    (pcase (plist-get record :kind)
      ("EXECUTION"
       (unless (equal (plist-get record :owner)
                      (or own-owner mevedel-execution-root-owner))
         (funcall faced
                  (mevedel-execution-transcript-breadcrumb-text
                   (mevedel-execution-transcript--attr-string attrs :label)
                   (mevedel-execution-transcript--attr-string attrs :command)
                   status
                   (mevedel-execution-transcript--attr-int attrs :exit-code)
                   (mevedel-execution-transcript--attr-string attrs :signal)))))
      ("MONITOR"
       (let ((lines (plist-get record :lines)))
         (when (vectorp lines) (setq lines (append lines nil)))
         (and (listp lines)
              (let ((out (mevedel-execution-transcript--monitor-events attrs lines)))
                (and out (mapconcat #'identity out "\n"))))))
      ("MONITOR_TERMINAL"
       (funcall faced
                (mevedel-execution-transcript-notice-text
                 (mevedel-execution-transcript--monitor-notice-attrs attrs)))))))

(defun mevedel-execution-transcript-insert (session records)
  "Insert the lines of the breadcrumb and notice RECORDS at point.
Each line ends with a newline; their buttons open output in
SESSION.  Other records are skipped.  Return how many lines were
inserted."
  (let ((n 0))
    (dolist (record records)
      (let ((line (mevedel-execution-transcript-render record session)))
        (when line
          (insert line "\n")
          (cl-incf n))))
    n))

(provide 'mevedel-execution-transcript)
;;; mevedel-execution-transcript.el ends here

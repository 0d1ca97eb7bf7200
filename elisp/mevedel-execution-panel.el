;;; mevedel-execution-panel.el --- The background-work panel of mevedel-exec  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; Author: The mevedel-exec developers
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: processes, tools
;; URL: https://github.com/mevedel/mevedel-exec

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; About 640 lines on purpose: one mode, its buffer-local state and the
;; drawing that keeps point; the inspector shares all of it.
;;
;; M-x mevedel-execution-panel lists the live executions of one session
;; (commands and monitors) with their owner, label, state, runtime and
;; output size.  It is filled once from `mevedel-execution-list-user'
;; and then follows the helper's `exec/changed' events; it never polls.
;;
;; The local inspector.  In the panel, RET expands a row in place with
;; its facts and the last lines of its output, read by offset from the
;; end of its log; RET again collapses it.
;;
;; The panel talks to the helper only through the public functions of
;; mevedel-execution.el.

;;; Code:

(require 'ansi-color)
(require 'cl-lib)
(require 'parse-time)
(require 'subr-x)
(require 'tabulated-list)
(require 'mevedel-execution)
(require 'mevedel-execution-spool)
(require 'mevedel-execution-transcript)

(defgroup mevedel-execution-panel nil
  "The background-work panel of mevedel-exec."
  :group 'mevedel-execution
  :prefix "mevedel-execution-panel-")

(defcustom mevedel-execution-panel-buffer-name "*mevedel background*"
  "Name of the background-work panel's buffer.
A panel for a second session adds the session id in angle brackets."
  :type 'string)

(defcustom mevedel-execution-panel-inspector-lines 10
  "How many of the last output lines the inspector shows."
  :type 'natnum)

(defcustom mevedel-execution-panel-inspector-bytes 4096
  "How many bytes from the end of a log the inspector reads at most."
  :type 'natnum)

(defvar-local mevedel-execution-panel--session nil
  "The session this panel shows.")

(defvar-local mevedel-execution-panel--session-id nil
  "The id of the session this panel shows.")

(defvar-local mevedel-execution-panel--live nil
  "Facts of the live executions shown, in the helper's order.")

(defvar-local mevedel-execution-panel--expanded nil
  "Ids of the executions whose inspector is open.")

(defvar-local mevedel-execution-panel--tails nil
  "Hash table: execution id to the inspector's output tail.
Each value is a plist (:bytes N :lines LIST :error STRING :pending BOOL).")

(defvar-local mevedel-execution-panel--gone nil
  "Non-nil once the helper behind the rows shown exited: its exit status.")

(defvar-local mevedel-execution-panel--listener nil
  "This panel's function on `mevedel-execution-event-functions'.")

(defvar mevedel-execution-panel-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'mevedel-execution-panel-inspect)
    (define-key map (kbd "i") #'mevedel-execution-panel-inspect)
    (define-key map (kbd "k") #'mevedel-execution-panel-stop)
    (define-key map (kbd "C-c C-c") #'mevedel-execution-panel-interrupt)
    (define-key map (kbd "I") #'mevedel-execution-panel-interrupt)
    (define-key map (kbd "s") #'mevedel-execution-panel-send-input)
    (define-key map (kbd "o") #'mevedel-execution-panel-open-output)
    (define-key map (kbd "g") #'mevedel-execution-panel-refresh)
    map)
  "Keys of `mevedel-execution-panel-mode'.")

(define-derived-mode mevedel-execution-panel-mode tabulated-list-mode "Background"
  "The live background work of one mevedel-exec session.
Rows follow the helper's `exec/changed' events; nothing polls.
The runtime column is computed from each command's start at every
refresh, and the mode line says when that was.  When the helper
exits, the rows go and the panel says so.

\\{mevedel-execution-panel-mode-map}"
  (setq tabulated-list-format
        [("Id" 17 nil)
         ("Kind" 8 nil)
         ("Owner" 12 nil)
         ("Label" 36 nil)
         ("State" 8 nil)
         ("Runtime" 8 nil :right-align t)
         ("Output" 10 nil :right-align t)])
  (setq tabulated-list-padding 1)
  (setq tabulated-list-sort-key nil)
  (setq tabulated-list-printer #'mevedel-execution-panel--print-entry)
  (setq mevedel-execution-panel--tails (make-hash-table :test #'equal))
  (setq-local revert-buffer-function #'mevedel-execution-panel--revert)
  (add-hook 'kill-buffer-hook #'mevedel-execution-panel--detach nil t)
  (add-hook 'change-major-mode-hook #'mevedel-execution-panel--detach nil t)
  (tabulated-list-init-header))

(defun mevedel-execution-panel--detach ()
  "Stop following the helper's events in this panel."
  (when mevedel-execution-panel--listener
    (remove-hook 'mevedel-execution-event-functions mevedel-execution-panel--listener)
    (setq mevedel-execution-panel--listener nil)))

(defun mevedel-execution-panel--attach ()
  "Follow the helper's `exec/changed' events in this panel."
  (unless mevedel-execution-panel--listener
    (let* ((buffer (current-buffer))
           (listener nil))
      (setq listener
            (lambda (type plist)
              (if (not (buffer-live-p buffer))
                  (remove-hook 'mevedel-execution-event-functions listener)
                (pcase type
                  ('changed (with-current-buffer buffer
                              (mevedel-execution-panel--on-changed plist)))
                  ('exit (with-current-buffer buffer
                           (mevedel-execution-panel--on-exit plist)))))))
      (setq mevedel-execution-panel--listener listener)
      (add-hook 'mevedel-execution-event-functions listener))))

(defun mevedel-execution-panel--on-changed (plist)
  "Show the live set of the `exec/changed' payload PLIST, if it is ours."
  (when (equal (plist-get plist :session-id) mevedel-execution-panel--session-id)
    (mevedel-execution-panel--show (plist-get plist :live))))

(defun mevedel-execution-panel--on-exit (plist)
  "Empty the panel if the helper whose exit PLIST reports drove it.
Nothing that helper ran is followed any more; rows that stayed
would claim it still is."
  (let ((session mevedel-execution-panel--session))
    (when (or (null session)
              (eql (plist-get plist :generation)
                   (mevedel-execution-session-generation session)))
      (mevedel-execution-panel--show nil (or (plist-get plist :status) t)))))

(defun mevedel-execution-panel--id (facts)
  "Return the execution id of FACTS."
  (plist-get facts :execution-id))

(defun mevedel-execution-panel--facts (id)
  "Return the facts of the live execution ID shown in this panel."
  (cl-find id mevedel-execution-panel--live
           :key #'mevedel-execution-panel--id :test #'equal))

;;;; Columns

(defun mevedel-execution-panel--runtime-seconds (facts)
  "Return how many seconds the execution of FACTS has run, or nil."
  (let ((started (plist-get facts :started-at)))
    (when (stringp started)
      (let ((t0 (ignore-errors (parse-iso8601-time-string started))))
        (when t0
          (max 0 (floor (float-time (time-subtract nil t0)))))))))

(defun mevedel-execution-panel--local-time (stamp)
  "Return the RFC 3339 STAMP as local date and time, or \"-\"."
  (let ((time (and (stringp stamp) (ignore-errors (parse-iso8601-time-string stamp)))))
    (if time (format-time-string "%F %T" time) "-")))

(defun mevedel-execution-panel--duration (seconds)
  "Return SECONDS as a short duration: 9s, 4m07s, 2h05m."
  (cond ((null seconds) "-")
        ((< seconds 60) (format "%ds" seconds))
        ((< seconds 3600) (format "%dm%02ds" (/ seconds 60) (% seconds 60)))
        (t (format "%dh%02dm" (/ seconds 3600) (% (/ seconds 60) 60)))))

(defun mevedel-execution-panel--size (bytes)
  "Return BYTES human-readable: 532 B, 1.2 KiB."
  (file-size-human-readable (or bytes 0) 'iec " " "B"))

(defun mevedel-execution-panel--kind (facts)
  "Return what the execution of FACTS is, as the helper says in their kind.
\"monitor\" for a monitor's execution, \"command\" for managed Bash,
else the kind itself: \"one-shot\", \"helper\" or \"eval\"."
  (let ((kind (plist-get facts :kind)))
    (cond ((plist-get facts :monitor-id) "monitor")
          ((or (null kind) (equal kind "bash")) "command")
          (t kind))))

(defun mevedel-execution-panel--label (facts)
  "Return the label of FACTS, or its command on one line."
  (let ((label (plist-get facts :label)))
    (if (and label (not (string-empty-p label)))
        (mevedel-execution-transcript-one-line label)
      (mevedel-execution-transcript-one-line (or (plist-get facts :command) "")))))

(defun mevedel-execution-panel--entry (facts)
  "Return the `tabulated-list-entries' element of FACTS."
  (let ((state (or (plist-get facts :state) "?")))
    (list (mevedel-execution-panel--id facts)
          (vector (mevedel-execution-panel--id facts)
                  (mevedel-execution-panel--kind facts)
                  (or (plist-get facts :owner) mevedel-execution-root-owner)
                  (mevedel-execution-panel--label facts)
                  (pcase state
                    ("stopping" (propertize state 'face 'warning))
                    ("queued" (propertize state 'face 'shadow))
                    (_ state))
                  (mevedel-execution-panel--duration
                   (mevedel-execution-panel--runtime-seconds facts))
                  (mevedel-execution-panel--size (plist-get facts :output-bytes))))))

;;;; The inspector

(defun mevedel-execution-panel--clean-line (line)
  "Return the output LINE as a terminal would leave it, safe to show.
Only what follows its last carriage return stays; colour escapes,
other control characters and format characters (which could
reorder or hide text) go.  Indentation stays."
  (let ((line (string-remove-suffix "\r" line)))
    (when (string-match ".*\r\\(.*\\)\\'" line)
      (setq line (match-string 1 line)))
    (string-trim-right
     (replace-regexp-in-string
      "[\u0000-\u0008\u000b-\u001f\u007f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]+"
      "" (ansi-color-filter-apply line)))))

(defun mevedel-execution-panel--tail-lines (text offset)
  "Return the last lines of TEXT, read from byte OFFSET of a log.
A first line cut by OFFSET is dropped."
  (let ((lines (split-string text "\n")))
    (when (and (> offset 0) (cdr lines)) (setq lines (cdr lines)))
    (when (equal (car (last lines)) "") (setq lines (butlast lines)))
    (mapcar #'mevedel-execution-panel--clean-line
            (last lines mevedel-execution-panel-inspector-lines))))

(defun mevedel-execution-panel--fetch-tail (id)
  "Read the end of ID's log, asynchronously; the panel redraws with it.
The read starts `mevedel-execution-panel-inspector-bytes' before
the size the facts report and takes twice that, so output written
since is seen too; when the log has grown past it, the read
starts again from its new end."
  (let* ((facts (mevedel-execution-panel--facts id))
         (bytes (or (plist-get facts :output-bytes) 0))
         (offset (max 0 (- bytes mevedel-execution-panel-inspector-bytes)))
         (old (gethash id mevedel-execution-panel--tails))
         (buffer (current-buffer)))
    (puthash id (plist-put (copy-sequence old) :pending t) mevedel-execution-panel--tails)
    ;; This runs from the helper's events too: report, never throw.
    (condition-case err
        (mevedel-execution-panel--read-tail
         (mevedel-execution-panel--live-session) buffer id facts offset)
      (error
       (puthash id (list :bytes bytes :error (error-message-string err))
                mevedel-execution-panel--tails)))))

(defun mevedel-execution-panel--read-tail (session buffer id facts offset &optional again)
  "Ask for the log of ID in SESSION from OFFSET, for the panel BUFFER.
FACTS say where the log is.  AGAIN non-nil means this is the read
from the new end of a log that grew past the first one; however
fast the log grows, there is no third."
  (let ((length (* 2 mevedel-execution-panel-inspector-bytes)))
    (mevedel-execution-request-async
     session 'spool/read
     (list :as "user"
           :address (or (plist-get facts :output-address)
                        (mevedel-execution-spool-address id))
           :offset offset
           :length length)
     :on-result
     (lambda (r)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (let ((total (or (plist-get r :total-bytes) 0))
                 (end (+ (or (plist-get r :offset) offset) (or (plist-get r :length) 0))))
             (if (and (< end total) (not (plist-get r :eof)) (not again))
                 ;; It grew past what we read: read its new end.
                 (mevedel-execution-panel--read-tail
                  session buffer id facts
                  (max 0 (- total mevedel-execution-panel-inspector-bytes)) t)
               (puthash id (list :bytes total
                                 :lines (mevedel-execution-panel--tail-lines
                                         (or (plist-get r :text) "")
                                         (or (plist-get r :offset) offset)))
                        mevedel-execution-panel--tails)
               (mevedel-execution-panel--redraw))))))
     :on-error
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (puthash id (list :bytes (or (plist-get facts :output-bytes) 0)
                             :error (plist-get err :message))
                    mevedel-execution-panel--tails)
           (mevedel-execution-panel--redraw))))
     :timeout 30)))

(defun mevedel-execution-panel--ensure-tails ()
  "Start reading the tail of each open inspector whose log has grown."
  (dolist (id mevedel-execution-panel--expanded)
    (let ((tail (gethash id mevedel-execution-panel--tails))
          (bytes (or (plist-get (mevedel-execution-panel--facts id) :output-bytes) 0)))
      (unless (or (plist-get tail :pending)
                  (and tail (>= (or (plist-get tail :bytes) 0) bytes)))
        (mevedel-execution-panel--fetch-tail id)))))

(defun mevedel-execution-panel--inspector-text (facts)
  "Return the inspector lines of FACTS, ending with a newline."
  (let* ((id (mevedel-execution-panel--id facts))
         (tail (gethash id mevedel-execution-panel--tails))
         (item (lambda (name value) (and value (format "%s %s" name value))))
         (join (lambda (&rest parts) (string-join (delq nil parts) " · ")))
         (lines-of (plist-get facts :output-lines))
         (target (plist-get facts :target))
         (lines
          (list
           (funcall join
                    (funcall item "state" (or (plist-get facts :state) "?"))
                    ;; A live row has no end yet; these show only if it has.
                    (funcall item "status" (plist-get facts :status))
                    (funcall item "exit" (plist-get facts :exit-code))
                    (funcall item "signal" (plist-get facts :signal))
                    (funcall item "pid" (plist-get facts :pid))
                    (funcall item "pgid" (plist-get facts :pgid))
                    (funcall item "lane" (plist-get facts :lane))
                    (funcall item "monitor" (plist-get facts :monitor-id))
                    ;; Not yielded: a tool call is still waiting on it.
                    (and (plist-get facts :yielded) "yielded")
                    (and (plist-get facts :tty) "tty"))
           (concat "command " (mevedel-execution-transcript-one-line
                               (or (plist-get facts :command) "")))
           (funcall join
                    (concat "cwd " (mevedel-execution-transcript-one-line
                                    (or (plist-get facts :cwd) "-")))
                    (and target (not (equal target "local")) (concat "on " target)))
           (funcall join
                    (concat "started " (mevedel-execution-panel--local-time
                                        (plist-get facts :started-at)))
                    (concat "runtime " (mevedel-execution-panel--duration
                                        (mevedel-execution-panel--runtime-seconds facts)))
                    (format "output %s%s"
                            (mevedel-execution-panel--size (plist-get facts :output-bytes))
                            (if lines-of
                                (format " in %d line%s" lines-of (if (eql lines-of 1) "" "s"))
                              "")))
           (concat "log " (or (plist-get facts :output-address)
                              (mevedel-execution-spool-address id)))))
         (tail-lines
          (cond ((plist-get tail :error)
                 (list (format "(cannot read the output: %s)" (plist-get tail :error))))
                ((plist-member tail :lines)
                 (or (mapcar (lambda (l) (concat "| " l)) (plist-get tail :lines))
                     (list "(no output yet)")))
                (t (list "(reading the output...)")))))
    (concat
     (mapconcat (lambda (l) (concat "    " l)) lines "\n")
     "\n"
     (propertize (mapconcat (lambda (l) (concat "    " l)) tail-lines "\n")
                 'face 'shadow)
     "\n")))

(defun mevedel-execution-panel--print-entry (id cols)
  "Insert the row ID with COLS, and its inspector when it is open."
  (tabulated-list-print-entry id cols)
  (when (member id mevedel-execution-panel--expanded)
    (let ((facts (mevedel-execution-panel--facts id)))
      (when facts
        (insert (propertize (mevedel-execution-panel--inspector-text facts)
                            'tabulated-list-id id
                            'mevedel-execution-panel-inspector id))))))

;;;; Drawing, keeping point

(defun mevedel-execution-panel--row-start (id)
  "Return the start of ID's row in this buffer, or nil."
  (save-excursion
    (goto-char (point-min))
    (let (found)
      (while (and (not found) (not (eobp)))
        (if (and (equal (get-text-property (point) 'tabulated-list-id) id)
                 (not (get-text-property (point) 'mevedel-execution-panel-inspector)))
            (setq found (point))
          (forward-line 1)))
      found)))

(defun mevedel-execution-panel--spot (pos)
  "Return where POS is, as (ID LINE COLUMN), LINE counting from ID's row."
  (save-excursion
    (goto-char pos)
    (let ((id (get-text-property (line-beginning-position) 'tabulated-list-id)))
      (when id
        (let ((start (mevedel-execution-panel--row-start id)))
          (list id
                (if start (count-lines start (line-beginning-position)) 0)
                (current-column)))))))

(defun mevedel-execution-panel--place (spot order)
  "Return the position of SPOT after a redraw.
ORDER is the list of ids before the redraw; when SPOT's execution
is gone, the row that followed it takes its place."
  (pcase-let ((`(,id ,line ,column) spot))
    (let* ((start (and id (mevedel-execution-panel--row-start id)))
           (next (and id (not start)
                      (cl-some #'mevedel-execution-panel--row-start
                               (cdr (member id order)))))
           (prev (and id (not start) (not next)
                      (cl-some #'mevedel-execution-panel--row-start
                               (reverse (cl-subseq order 0 (cl-position id order :test #'equal)))))))
      (save-excursion
        (cond (start
               (goto-char start)
               (let ((end (save-excursion
                            (forward-line 1)
                            (while (and (not (eobp))
                                        (equal (get-text-property (point) 'mevedel-execution-panel-inspector) id))
                              (forward-line 1))
                            (point))))
                 (forward-line line)
                 (when (>= (point) end) (goto-char start)))
               (move-to-column column))
              ((or next prev) (goto-char (or next prev)) (move-to-column (or column 0)))
              (t (goto-char (point-min))))
        (point)))))

(defun mevedel-execution-panel--redraw ()
  "Print the panel again, keeping point and every window's point on its row."
  (let* ((order (mapcar #'car tabulated-list-entries))
         (here (mevedel-execution-panel--spot (point)))
         (windows (mapcar (lambda (w) (cons w (mevedel-execution-panel--spot (window-point w))))
                          (get-buffer-window-list (current-buffer) nil t))))
    (setq tabulated-list-entries
          (mapcar #'mevedel-execution-panel--entry mevedel-execution-panel--live))
    (tabulated-list-print)
    (when (null tabulated-list-entries)
      (let ((inhibit-read-only t))
        (insert (propertize
                 (if mevedel-execution-panel--gone
                     (concat
                      (format " The mevedel-exec helper exited (status %s): nothing is followed here.\n"
                              mevedel-execution-panel--gone)
                      (substitute-command-keys
                       " \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-refresh] starts it again and shows what is live.\n"))
                   " No background work.\n")
                 'face 'shadow))
        (set-buffer-modified-p nil)))
    ;; Runtimes are as of this drawing: nothing redraws on a clock.
    (setq mode-line-process
          (format " %s: %d live, as of %s"
                  (string-replace "%" "%%" mevedel-execution-panel--session-id)
                  (length mevedel-execution-panel--live)
                  (format-time-string "%T")))
    (goto-char (if here (mevedel-execution-panel--place here order) (point-min)))
    (dolist (w windows)
      (when (cdr w)
        (set-window-point (car w) (mevedel-execution-panel--place (cdr w) order))))
    (mevedel-execution-panel--ensure-tails)))

(defun mevedel-execution-panel--show (live &optional gone)
  "Show LIVE, the facts of the session's live executions.
GONE non-nil, the helper's exit status, says its helper exited."
  (setq mevedel-execution-panel--live live)
  (setq mevedel-execution-panel--gone gone)
  (let ((ids (mapcar #'mevedel-execution-panel--id live)))
    (setq mevedel-execution-panel--expanded
          (cl-remove-if-not (lambda (id) (member id ids)) mevedel-execution-panel--expanded))
    (maphash (lambda (id _) (unless (member id ids) (remhash id mevedel-execution-panel--tails)))
             mevedel-execution-panel--tails))
  (mevedel-execution-panel--redraw))

(defun mevedel-execution-panel--note-facts (facts)
  "Show FACTS in place of the panel's facts of that execution, if fresher."
  (let* ((id (mevedel-execution-panel--id facts))
         (old (and id (mevedel-execution-panel--facts id))))
    (when (and old (> (or (plist-get facts :version) 0) (or (plist-get old :version) 0)))
      (setq mevedel-execution-panel--live
            (mapcar (lambda (f) (if (eq f old) facts f)) mevedel-execution-panel--live))
      (mevedel-execution-panel--redraw))))

;;;; Commands

(defun mevedel-execution-panel--live-session ()
  "Return this panel's session, or the open session with its id."
  (let ((session (mevedel-execution-resolve-session
                  mevedel-execution-panel--session mevedel-execution-panel--session-id)))
    (setq mevedel-execution-panel--session session)))

(defun mevedel-execution-panel--current-id ()
  "Return the execution id on the current line, or signal a `user-error'."
  (or (tabulated-list-get-id) (user-error "No execution on this line")))

(defun mevedel-execution-panel--buffer (session)
  "Return the panel buffer of SESSION, creating it if needed."
  (let ((id (mevedel-execution-session-id session)))
    (or (cl-find-if (lambda (b)
                      (with-current-buffer b
                        (and (derived-mode-p 'mevedel-execution-panel-mode)
                             (equal mevedel-execution-panel--session-id id))))
                    (buffer-list))
        (let ((plain (get-buffer mevedel-execution-panel-buffer-name)))
          (get-buffer-create
           (if (and plain (buffer-local-value 'mevedel-execution-panel--session-id plain))
               (format "%s<%s>" mevedel-execution-panel-buffer-name id)
             mevedel-execution-panel-buffer-name))))))

(defun mevedel-execution-panel--read-session ()
  "Return the session to show: the only open one, or the one chosen."
  (let ((open (mevedel-execution-sessions)))
    (cond ((null open) (user-error "No mevedel-exec session is open"))
          ((null (cdr open)) (car open))
          (t (mevedel-execution-find-session
              (completing-read "Session: "
                               (mapcar #'mevedel-execution-session-id open)
                               nil t))))))

;;;###autoload
(defun mevedel-execution-panel (&optional session)
  "Show the live background work of SESSION in a panel; return its buffer.
Interactively, the only open session, or one chosen among several.
The panel lists running commands and monitors and follows the
helper's change events.  In it:
\\<mevedel-execution-panel-mode-map>
\\[mevedel-execution-panel-inspect] expands or collapses a row's inspector;
\\[mevedel-execution-panel-stop] stops the command;
\\[mevedel-execution-panel-interrupt] sends it Ctrl-C;
\\[mevedel-execution-panel-send-input] types a line into it;
\\[mevedel-execution-panel-open-output] opens its full output;
\\[mevedel-execution-panel-refresh] asks the helper again."
  (interactive (list (mevedel-execution-panel--read-session)))
  (let ((session (or session (mevedel-execution-panel--read-session)))
        buffer)
    (setq buffer (mevedel-execution-panel--buffer session))
    (with-current-buffer buffer
      (unless (derived-mode-p 'mevedel-execution-panel-mode)
        (mevedel-execution-panel-mode))
      (setq mevedel-execution-panel--session session)
      (setq mevedel-execution-panel--session-id (mevedel-execution-session-id session))
      ;; Listen first: a change during the listing then shows too.
      (mevedel-execution-panel--attach)
      (mevedel-execution-panel-refresh))
    (when (called-interactively-p 'interactive)
      (pop-to-buffer buffer))
    buffer))

(defun mevedel-execution-panel-refresh ()
  "Ask the helper for the live executions and show them.
After the helper died this starts a new one and reopens the
session; what that open marked lost is reported."
  (interactive)
  (let* ((session (mevedel-execution-panel--live-session))
         (generation (mevedel-execution-session-generation session))
         (live (mevedel-execution-list-user session))
         (lost (and (not (eql generation (mevedel-execution-session-generation session)))
                    (mevedel-execution-session-recovered session))))
    (mevedel-execution-panel--show live)
    (when lost
      (message "mevedel-exec: the helper had ended without recording the end of %s; marked lost"
               (mapconcat (lambda (f) (format "%s (%s)" (plist-get f :execution-id)
                                              (mevedel-execution-panel--label f)))
                          lost ", ")))))

(defun mevedel-execution-panel--revert (&rest _)
  "The `revert-buffer-function' of the panel: refresh it."
  (mevedel-execution-panel-refresh))

(defun mevedel-execution-panel-inspect ()
  "Expand the inspector of the execution at point, or collapse it."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id)))
    (if (member id mevedel-execution-panel--expanded)
        (setq mevedel-execution-panel--expanded (delete id mevedel-execution-panel--expanded))
      (push id mevedel-execution-panel--expanded))
    (let ((start (mevedel-execution-panel--row-start id)))
      (when start (goto-char start)))
    (mevedel-execution-panel--redraw)))

(defun mevedel-execution-panel-stop ()
  "Stop the execution at point (SIGTERM to its group, then SIGKILL).
Its row goes once the helper reports it settled."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id)))
    (mevedel-execution-stop-user
     (mevedel-execution-panel--live-session) id
     (lambda (obs)
       (let ((err (plist-get obs :error))
             (facts (plist-get obs :facts)))
         (if err
             (message "mevedel-exec: stopping %s: %s" id (plist-get err :message))
           (message "mevedel-exec: %s %s" id (or (plist-get facts :status) "stopped"))))))
    (message "mevedel-exec: stopping %s..." id)))

(defun mevedel-execution-panel-interrupt ()
  "Send Ctrl-C to the execution at point."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id))
        (session (mevedel-execution-panel--live-session)))
    ;; Asynchronous, unlike `mevedel-execution-interrupt-user': a key
    ;; in the panel never waits on the helper; the answer is reported
    ;; when it comes.
    (mevedel-execution-request-async
     session 'exec/interrupt (list :as "user" :execution-id id)
     :on-result (lambda (_facts) (message "mevedel-exec: sent Ctrl-C to %s" id))
     :on-error (lambda (err)
                 (message "mevedel-exec: interrupting %s: %s" id (plist-get err :message)))
     :timeout mevedel-execution-request-timeout)))

(defun mevedel-execution-panel-send-input (line)
  "Type LINE and a newline into the execution at point.
Only a command started with a terminal takes input."
  (interactive
   (let ((facts (mevedel-execution-panel--facts (mevedel-execution-panel--current-id))))
     (unless (plist-get facts :tty)
       (user-error "%s has no terminal; only Ctrl-C (%s) reaches it"
                   (mevedel-execution-panel--id facts)
                   (substitute-command-keys "\\[mevedel-execution-panel-interrupt]")))
     (list (read-string (format "Input to %s: " (mevedel-execution-panel--label facts))))))
  (let ((id (mevedel-execution-panel--current-id)))
    (mevedel-execution-write-user
     (mevedel-execution-panel--live-session) id (concat line "\n")
     (lambda (obs)
       (let ((err (plist-get obs :error)))
         (if err
             (message "mevedel-exec: input to %s: %s" id (plist-get err :message))
           (when (derived-mode-p 'mevedel-execution-panel-mode)
             (mevedel-execution-panel--note-facts (plist-get obs :facts)))))))))

(defun mevedel-execution-panel-open-output (&optional from-end)
  "Open the full output of the execution at point, a page at a time.
With a prefix argument FROM-END, start at its last page."
  (interactive "P")
  (pop-to-buffer
   (mevedel-execution-spool-open-output
    (mevedel-execution-panel--live-session) (mevedel-execution-panel--current-id) from-end)))

(provide 'mevedel-execution-panel)
;;; mevedel-execution-panel.el ends here

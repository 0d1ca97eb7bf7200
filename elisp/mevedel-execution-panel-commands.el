;;; mevedel-execution-panel-commands.el --- The commands of the mevedel-exec panel  -*- lexical-binding: t; -*-

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

;; What the panel's keys do to the row at point or the marked rows:
;; inspect, stop, Ctrl-C, type a line, open the output, dismiss (and
;; undo), mark, sort, and open a listening port in a browser.  The
;; panel's state and its drawing are in mevedel-execution-panel.el.

;;; Code:

(require 'browse-url)
(require 'cl-lib)
(require 'seq)
(require 'subr-x)
(require 'tabulated-list)
(require 'mevedel-execution)
(require 'mevedel-execution-spool)
(require 'mevedel-execution-person)
(require 'mevedel-execution-panel-view)

;; The panel's state and drawing, in mevedel-execution-panel.el, which
;; requires this file: they exist whenever these commands run.
(defvar mevedel-execution-panel-expanded)
(defvar mevedel-execution-panel-marked)
(defvar mevedel-execution-panel-closed)
(defvar mevedel-execution-panel-dismissed-ids)
(defvar mevedel-execution-panel-finished-rows)
(defvar mevedel-execution-panel-gone)
(defvar mevedel-execution-panel-live-rows)
(defvar mevedel-execution-panel-session-id)
(declare-function mevedel-execution-panel-facts "mevedel-execution-panel" (id))
(declare-function mevedel-execution-panel-id "mevedel-execution-panel" (facts))
(declare-function mevedel-execution-panel-live-p "mevedel-execution-panel" (id))
(declare-function mevedel-execution-panel-live-session "mevedel-execution-panel" ())
(declare-function mevedel-execution-panel-note-facts "mevedel-execution-panel" (facts))
(declare-function mevedel-execution-panel-redraw "mevedel-execution-panel" (&optional clock))
(declare-function mevedel-execution-panel-row-start "mevedel-execution-panel" (id))
(declare-function mevedel-execution-panel-show "mevedel-execution-panel" (live &optional gone))

(defvar-local mevedel-execution-panel--dismissed nil
  "Dismissals \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-unmark] can undo, newest first.
Each is (FACTS-LIST . REMEMBERED): the facts of the rows one
dismissal removed, and the ids among them the person's finished
work held (`mevedel-execution-finished-work').")

(defconst mevedel-execution-panel--undo-limit 20
  "How many dismissals a panel can undo.")

;;;; Commands


(defun mevedel-execution-panel--current-id ()
  "Return the execution id on the current line, or signal a `user-error'."
  (or (tabulated-list-get-id) (user-error "No execution on this line")))

(defun mevedel-execution-panel--targets ()
  "Return the ids a command acts on: the marked rows, else the row at point."
  (or (cl-remove-if-not #'mevedel-execution-panel-facts mevedel-execution-panel-marked)
      (list (mevedel-execution-panel--current-id))))

(defun mevedel-execution-panel--name (id)
  "Return how a person names the execution ID of this panel."
  (let ((facts (mevedel-execution-panel-facts id)))
    (if facts (mevedel-execution-describe facts) id)))

(defun mevedel-execution-panel-inspect ()
  "Expand the inspector of the execution at point, or collapse it.
The inspector, under the row, says its state, pid, lane, command,
working directory, start, output size, log address, waiting prompt,
ready line and listening ports, and shows the last lines of output
\(read from the end of its log, cleaned of escapes), kept up to date."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id)))
    (if (member id mevedel-execution-panel-expanded)
        (progn
          (setq mevedel-execution-panel-expanded (delete id mevedel-execution-panel-expanded))
          (mevedel-execution-panel--follow id nil))
      (push id mevedel-execution-panel-expanded)
      (mevedel-execution-panel--follow id t))
    (let ((start (mevedel-execution-panel-row-start id)))
      (when start (goto-char start)))
    (mevedel-execution-panel-redraw)))

(defun mevedel-execution-panel--follow (id on)
  "Ask the helper to watch ID's listening ports while its inspector is open.
ON nil undoes one earlier follow.  A finished execution needs none, and a
refusal (it ended meanwhile) is no news."
  (when (and (mevedel-execution-panel-live-p id)
             (not mevedel-execution-panel-closed))
    ;; Advisory: a helper that cannot be reached just shows no new ports.
    (ignore-errors
      (mevedel-execution-request-async
       (mevedel-execution-panel-live-session) 'exec/follow
       (list :execution-id id :as "user" :follow (if on t :json-false))
       :on-error #'ignore))))

(defun mevedel-execution-panel-stop ()
  "Stop the marked executions, or the one at point.
SIGTERM to each one's process group, SIGKILL after the grace period;
each row goes once the helper reports it settled."
  (interactive)
  (let* ((session (mevedel-execution-panel-live-session))
         (sid (mevedel-execution-session-id session))
         (ids (cl-remove-if-not #'mevedel-execution-panel-live-p
                                (mevedel-execution-panel--targets))))
    (unless ids (user-error "That has finished already; %s dismisses it"
                            (substitute-command-keys "\\[mevedel-execution-panel-dismiss]")))
    (dolist (id ids)
      (let ((name (mevedel-execution-panel--name id)))
        (mevedel-execution-note-person-stop sid id)
        (mevedel-execution-stop-user
         session id
         (lambda (obs)
           (let ((err (plist-get obs :error))
                 (facts (plist-get obs :facts)))
             (if err
                 (message "mevedel-exec: stopping %s (\"%s\"): %s" id name (plist-get err :message))
               (message "mevedel-exec: %s %s (\"%s\")"
                        id (or (plist-get facts :status) "stopped") name)))))))
    (setq mevedel-execution-panel-marked nil)
    (message "mevedel-exec: stopping %s..."
             (if (cdr ids) (format "%d commands" (length ids))
               (format "\"%s\"" (mevedel-execution-panel--name (car ids)))))
    (mevedel-execution-panel-redraw)))

(defun mevedel-execution-panel-interrupt ()
  "Send Ctrl-C to the marked executions, or the one at point.
A command with a terminal gets it on its terminal, one without as
SIGINT to its process group; a command that handles it goes on."
  (interactive)
  (let* ((session (mevedel-execution-panel-live-session))
         (sid (mevedel-execution-session-id session))
         (ids (cl-remove-if-not #'mevedel-execution-panel-live-p
                                (mevedel-execution-panel--targets))))
    (unless ids (user-error "That has finished already"))
    (dolist (id ids)
      (let ((name (mevedel-execution-panel--name id)))
        ;; What ends after a person's Ctrl-C is theirs to know about.
        (mevedel-execution-note-person-stop sid id)
        ;; Asynchronous, unlike `mevedel-execution-interrupt-user': a key
        ;; in the panel never waits on the helper; the answer is reported
        ;; when it comes.
        (mevedel-execution-request-async
         session 'exec/interrupt (list :as "user" :execution-id id)
         :on-result (lambda (_facts) (message "mevedel-exec: sent Ctrl-C to \"%s\"" name))
         :on-error (lambda (err)
                     (message "mevedel-exec: interrupting \"%s\": %s" name (plist-get err :message)))
         :timeout mevedel-execution-request-timeout)))
    (setq mevedel-execution-panel-marked nil)
    (mevedel-execution-panel-redraw)))

(defun mevedel-execution-panel--read-input ()
  "Read a line for the row at point; return (LINE ID NAME).
The row is taken when the key is pressed, before the prompt: the
line goes to that execution whatever moves under point meanwhile,
and NAME, how the prompt named it, names it in what follows even
if its row went meanwhile."
  (let* ((id (mevedel-execution-panel--current-id))
         (facts (mevedel-execution-panel-facts id)))
    (unless (mevedel-execution-panel-live-p id)
      (user-error "\"%s\" has finished" (mevedel-execution-panel--name id)))
    (unless (plist-get facts :tty)
      (user-error "%s has no terminal; only Ctrl-C (%s) reaches it"
                  (mevedel-execution-panel-id facts)
                  (substitute-command-keys "\\[mevedel-execution-panel-interrupt]")))
    (list (read-string (format "Input to \"%s\"%s: "
                               (mevedel-execution-panel-label facts)
                               (let ((prompt (plist-get facts :prompt)))
                                 (if (and (plist-get facts :waiting-for-input) prompt)
                                     (format " (%s)" (mevedel-execution-transcript-one-line prompt))
                                   ""))))
          id
          (mevedel-execution-describe facts))))

(defun mevedel-execution-panel-send-input (line &optional id name)
  "Type LINE and a newline into the execution ID (default: the row at point).
Only a command started with a terminal takes input.  Interactively,
ID is the row at point when the key was pressed: what the prompt
names is what gets the line.  NAME names it in a message saying the
line was not sent (default: from its row)."
  (interactive (mevedel-execution-panel--read-input))
  (let* ((id (or id (mevedel-execution-panel--current-id)))
         (name (or name (mevedel-execution-panel--name id)))
         (panel (current-buffer)))
    (mevedel-execution-write-user
     (mevedel-execution-panel-live-session) id (concat line "\n")
     (lambda (obs)
       (let ((err (plist-get obs :error)))
         (if err
             (message "mevedel-exec: input to \"%s\" not sent: %s" name (plist-get err :message))
           (when (buffer-live-p panel)
             (with-current-buffer panel
               (mevedel-execution-panel-note-facts (plist-get obs :facts))))))))))

(defun mevedel-execution-panel-open-output (&optional from-end)
  "Open the full output of the execution at point, a page at a time.
With a prefix argument FROM-END, start at its last page."
  (interactive "P")
  (let* ((id (mevedel-execution-panel--current-id))
         (facts (mevedel-execution-panel-facts id)))
    (pop-to-buffer
     (mevedel-execution-spool-open-output
      (mevedel-execution-panel-live-session) id from-end facts))))

(defun mevedel-execution-panel--dismiss-ids (ids)
  "Remove the finished rows IDS, kept for an undo to bring back."
  (let ((gone (cl-remove-if-not (lambda (f) (member (mevedel-execution-panel-id f) ids))
                                mevedel-execution-panel-finished-rows)))
    (when gone
      ;; With which of them a panel opened later would show, to be
      ;; remembered again on an undo.
      (push (cons gone (cl-loop for f in (mevedel-execution-finished-work
                                          mevedel-execution-panel-session-id)
                                for id = (mevedel-execution-panel-id f)
                                when (member id ids) collect id))
            mevedel-execution-panel--dismissed)
      (setq mevedel-execution-panel--dismissed
            (seq-take mevedel-execution-panel--dismissed mevedel-execution-panel--undo-limit)))
    (setq mevedel-execution-panel-finished-rows
          (cl-set-difference mevedel-execution-panel-finished-rows gone))
    (mevedel-execution-forget-finished mevedel-execution-panel-session-id ids)
    (puthash mevedel-execution-panel-session-id
             (seq-take (append ids (gethash mevedel-execution-panel-session-id
                                            mevedel-execution-panel-dismissed-ids))
                       1000)
             mevedel-execution-panel-dismissed-ids)
    (setq mevedel-execution-panel-marked
          (cl-set-difference mevedel-execution-panel-marked ids :test #'equal))
    (mevedel-execution-panel-show mevedel-execution-panel-live-rows mevedel-execution-panel-gone)
    (when gone
      (message "%s; %s brings %s back"
               (if (cdr gone)
                   (format "Dismissed %d finished rows" (length gone))
                 (format "Dismissed \"%s\"" (mevedel-execution-describe (car gone))))
               (substitute-command-keys
                "\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-unmark]")
               (if (cdr gone) "them" "it")))))

(defun mevedel-execution-panel-dismiss ()
  "Dismiss the finished row at point, or the marked finished rows.
The row goes from the panel, not from the helper: its output stays
readable (\\[mevedel-execution-spool-open-output]).  When several rows
are marked, ask first.  \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-unmark] on a row that is not marked
undoes the last dismissal."
  (interactive)
  (let ((ids (cl-remove-if #'mevedel-execution-panel-live-p (mevedel-execution-panel--targets))))
    (unless ids
      (user-error "\"%s\" is still running; %s stops it"
                  (mevedel-execution-panel--name (mevedel-execution-panel--current-id))
                  (substitute-command-keys "\\[mevedel-execution-panel-stop]")))
    (when (and (cdr ids) (called-interactively-p 'any)
               (not (y-or-n-p (format "Dismiss %d marked finished rows? " (length ids)))))
      (user-error "Nothing dismissed"))
    (mevedel-execution-panel--dismiss-ids ids)))

(defun mevedel-execution-panel-dismiss-finished ()
  "Dismiss every finished row.
The rows go from the panel, not from the helper.  \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-unmark] on a row
that is not marked brings them back."
  (interactive)
  (mevedel-execution-panel--dismiss-ids
   (mapcar #'mevedel-execution-panel-id mevedel-execution-panel-finished-rows)))

(defun mevedel-execution-panel-undo-dismiss ()
  "Bring back the rows the last dismissal removed, point on the first.
Return their ids, or nil when there is nothing to undo."
  (interactive)
  (let* ((undo (pop mevedel-execution-panel--dismissed))
         (back (car undo)))
    (if (not undo)
        (progn (when (called-interactively-p 'any) (message "No dismissal to undo"))
               nil)
      (let ((shown (mapcar #'mevedel-execution-panel-id mevedel-execution-panel-finished-rows)))
        (setq back (cl-remove-if (lambda (f) (member (mevedel-execution-panel-id f) shown)) back))
        (setq mevedel-execution-panel-finished-rows
              (mevedel-execution-panel-sort-finished
               (append back mevedel-execution-panel-finished-rows)))
        (puthash mevedel-execution-panel-session-id
                 (cl-set-difference (gethash mevedel-execution-panel-session-id
                                             mevedel-execution-panel-dismissed-ids)
                                    (mapcar #'mevedel-execution-panel-id back)
                                    :test #'equal)
                 mevedel-execution-panel-dismissed-ids)
        (dolist (f (reverse back))
          (when (member (mevedel-execution-panel-id f) (cdr undo))
            (mevedel-execution-remember-finished mevedel-execution-panel-session-id f)))
        (mevedel-execution-panel-show mevedel-execution-panel-live-rows mevedel-execution-panel-gone)
        (let ((start (and back (mevedel-execution-panel-row-start
                                (mevedel-execution-panel-id (car back))))))
          (when start (goto-char start)))
        (message "%s back" (if (cdr back) (format "%d finished rows" (length back))
                             (format "\"%s\"" (mevedel-execution-describe (car back)))))
        (mapcar #'mevedel-execution-panel-id back)))))

(defun mevedel-execution-panel-mark ()
  "Mark the row at point and move to the next row.
\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-stop], \\[mevedel-execution-panel-interrupt] and \\[mevedel-execution-panel-dismiss] then act on every marked row instead of
the row at point; \\[mevedel-execution-panel-unmark] unmarks one, \\[mevedel-execution-panel-unmark-all] all."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id)))
    (cl-pushnew id mevedel-execution-panel-marked :test #'equal)
    (mevedel-execution-panel-redraw)
    (mevedel-execution-panel--next-row id)))

(defun mevedel-execution-panel-unmark ()
  "Unmark the row at point and move to the next row; else undo a dismissal.
On a row that is not marked, right after rows were dismissed
\(\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-dismiss], \\[mevedel-execution-panel-dismiss-finished]), bring them back
instead (`mevedel-execution-panel-undo-dismiss')."
  (interactive)
  (let ((id (tabulated-list-get-id)))
    (cond
     ((and id (member id mevedel-execution-panel-marked))
      (setq mevedel-execution-panel-marked (delete id mevedel-execution-panel-marked))
      (mevedel-execution-panel-redraw)
      (mevedel-execution-panel--next-row id))
     (mevedel-execution-panel--dismissed
      (call-interactively #'mevedel-execution-panel-undo-dismiss))
     (id (mevedel-execution-panel--next-row id))
     (t (user-error "No execution on this line")))))

(defun mevedel-execution-panel-unmark-all ()
  "Unmark every row.
Commands then act on the row at point again."
  (interactive)
  (setq mevedel-execution-panel-marked nil)
  (mevedel-execution-panel-redraw))

(defun mevedel-execution-panel--next-row (id)
  "Move point to the row after ID's, if there is one."
  (let* ((ids (mapcar #'car tabulated-list-entries))
         (next (cadr (member id ids)))
         (start (and next (mevedel-execution-panel-row-start next))))
    (when start (goto-char start))))

(defun mevedel-execution-panel-history ()
  "Show the transcript of this panel's session.
That is `mevedel-execution-history': one line per finished
background command of the session, from its journal, each with a
button that opens the whole result."
  (interactive)
  (pop-to-buffer (mevedel-execution-history (mevedel-execution-panel-live-session))))

(defun mevedel-execution-panel-sort (column)
  "Sort the rows by COLUMN; again on the same column reverses the order.
Interactively, the column at point, or one read when point is on
none (an inspector line, say)."
  (interactive
   (list (or (get-text-property (point) 'tabulated-list-column-name)
             (completing-read "Sort by column: "
                              (mapcar #'car tabulated-list-format) nil t))))
  (let ((n (cl-position column (mapcar #'car tabulated-list-format) :test #'equal)))
    (unless n (user-error "No column %s" column))
    (setq tabulated-list-sort-key
          (cons column (and (equal (car tabulated-list-sort-key) column)
                            (not (cdr tabulated-list-sort-key)))))
    (tabulated-list-init-header)
    (mevedel-execution-panel-redraw)))

;;;; Listening ports

(defun mevedel-execution-panel--local-p (facts)
  "Return non-nil if the execution of FACTS is on this machine."
  (member (or (plist-get facts :target) "local") '("local")))

(defun mevedel-execution-panel--read-port (facts)
  "Return the port to open among those FACTS say are listened on."
  (let* ((listening (plist-get facts :listening))
         (choices (mapcar (lambda (l) (cons (mevedel-execution-panel-listener-text l)
                                            (plist-get l :port)))
                          listening)))
    (cond ((null listening)
           (user-error "\"%s\" listens on no port" (mevedel-execution-describe facts)))
          ((null (cdr listening)) (cdar choices))
          (t (cdr (assoc (completing-read "Open port: " choices nil t) choices))))))

(defun mevedel-execution-panel-browse (&optional port)
  "Open PORT, which the execution at point listens on, in a browser.
Interactively, the port it listens on (chosen when there are
several).  A local one opens as http://127.0.0.1:PORT; for one on
another host the helper first forwards a local port to it
\(exec/forward)."
  (interactive)
  (let* ((id (mevedel-execution-panel--current-id))
         (facts (mevedel-execution-panel-facts id))
         (port (or port (mevedel-execution-panel--read-port facts))))
    (if (mevedel-execution-panel--local-p facts)
        (browse-url (format "http://127.0.0.1:%s" port))
      (mevedel-execution-request-async
       (mevedel-execution-panel-live-session) 'exec/forward
       (list :execution-id id :port port)
       :on-result (lambda (r)
                    (let ((local (plist-get r :local-address)))
                      (message "mevedel-exec: %s port %s is at %s"
                               (plist-get facts :target) port local)
                      (browse-url (concat "http://" local))))
       :on-error (lambda (err)
                   (message "mevedel-exec: forwarding port %s: %s" port (plist-get err :message)))
       :timeout 60))))

(provide 'mevedel-execution-panel-commands)
;;; mevedel-execution-panel-commands.el ends here

;;; mevedel-execution-panel.el --- The background-work panel of mevedel-exec  -*- lexical-binding: t; -*-

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

;; About 1250 lines on purpose: one mode, its buffer-local state and the
;; drawing that keeps point; the inspector, the marks and the finished
;; rows share all of it.
;;
;; M-x mevedel-execution-panel lists the live executions of one session
;; (commands and monitors) with their owner, label, state, runtime and
;; output size.  It is filled once from `mevedel-execution-list-user'
;; and then follows the helper's `exec/changed' and `exec/settled'
;; events; it never asks the helper on a clock.  While it is on screen
;; a one-second timer redraws the runtimes (from the facts it holds).
;; Finished work stays, dimmed, with how it ended, until the person
;; dismisses it or `mevedel-execution-panel-finished-limit' ages it out.
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
(require 'mevedel-execution-person)
(require 'easymenu)
(require 'browse-url)
(require 'seq)

(defgroup mevedel-execution-panel nil
  "Faces of the background-work panel of mevedel-exec.
Its options are in the group `mevedel-execution'."
  :group 'mevedel-execution
  :prefix "mevedel-execution-panel-")

(defcustom mevedel-execution-panel-buffer-name "*mevedel background*"
  "Name of the background-work panel's buffer.
A panel for a second session adds the session id in angle brackets."
  :type 'string
  :group 'mevedel-execution)

(defcustom mevedel-execution-panel-inspector-lines 10
  "How many of the last output lines the inspector shows."
  :type 'natnum
  :group 'mevedel-execution)

(defcustom mevedel-execution-panel-inspector-bytes 4096
  "How many bytes from the end of a log the inspector reads at most."
  :type 'natnum
  :group 'mevedel-execution)

(defcustom mevedel-execution-panel-finished-limit 20
  "How many finished rows a panel keeps; older ones age out.
Finished work stays, dimmed, with how it ended, until dismissed
\(\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-dismiss], \\[mevedel-execution-panel-dismiss-finished]) or aged out by newer ones.  0 keeps none."
  :type 'natnum
  :group 'mevedel-execution)

(defcustom mevedel-execution-panel-refresh-interval 1
  "Seconds between redraws of the runtimes while a panel is on screen.
nil never redraws on a clock."
  :type '(choice (const :tag "Never" nil) number)
  :group 'mevedel-execution)

(defface mevedel-execution-panel-running '((t :inherit success))
  "Face of a running row's state.")

(defface mevedel-execution-panel-stopping '((t :inherit warning))
  "Face of a stopping row's state.")

(defface mevedel-execution-panel-waiting
  '((((class color)) :inherit warning :weight bold :inverse-video t)
    (t :inverse-video t))
  "Face of a row waiting for input: its state and its prompt.")

(defface mevedel-execution-panel-failed '((t :inherit error))
  "Face of a failed row's state.")

(defface mevedel-execution-panel-finished '((t :inherit shadow))
  "Face of a finished row: dimmed.")

(defvar-local mevedel-execution-panel--session nil
  "The session this panel shows.")

(defvar-local mevedel-execution-panel--session-id nil
  "The id of the session this panel shows.")

(defvar-local mevedel-execution-panel--live nil
  "Facts of the live executions shown, in the helper's order.")

(defvar-local mevedel-execution-panel--finished nil
  "Facts of the finished executions shown, newest first.")

(defvar-local mevedel-execution-panel--seen nil
  "Hash table of the ids this panel showed live and saw no end of yet.")

(defvar-local mevedel-execution-panel--marked nil
  "Ids of the marked rows.")

(defvar-local mevedel-execution-panel--dismissed nil
  "Dismissals \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-unmark] can undo, newest first.
Each is (FACTS-LIST . REMEMBERED): the facts of the rows one
dismissal removed, and the ids among them the person's finished
work held (`mevedel-execution-finished-work').")

(defconst mevedel-execution-panel--undo-limit 20
  "How many dismissals a panel can undo.")

(defvar-local mevedel-execution-panel--expanded nil
  "Ids of the executions whose inspector is open.")

(defvar-local mevedel-execution-panel--tails nil
  "Hash table: execution id to the inspector's output tail.
Each value is a plist (:bytes N :lines LIST :error STRING :pending BOOL).")

(defvar-local mevedel-execution-panel--gone nil
  "Non-nil once the helper behind the rows shown exited: its exit status.")

(defvar-local mevedel-execution-panel--closed nil
  "Non-nil once the session shown was closed.")

(defvar-local mevedel-execution-panel--listener nil
  "This panel's function on `mevedel-execution-event-functions'.")

(defvar-local mevedel-execution-panel--timer nil
  "The timer redrawing this panel's runtimes while it is on screen.")

(defvar-local mevedel-execution-panel--width nil
  "The window width the columns were last sized for.")

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
    (define-key map (kbd "d") #'mevedel-execution-panel-dismiss)
    (define-key map (kbd "x") #'mevedel-execution-panel-dismiss-finished)
    (define-key map (kbd "m") #'mevedel-execution-panel-mark)
    (define-key map (kbd "u") #'mevedel-execution-panel-unmark)
    (define-key map (kbd "U") #'mevedel-execution-panel-unmark-all)
    (define-key map [remap undo] #'mevedel-execution-panel-undo-dismiss)
    (define-key map (kbd "w") #'mevedel-execution-panel-browse)
    (define-key map (kbd "!") #'mevedel-execution-shell-command)
    (define-key map (kbd "h") #'mevedel-execution-panel-history)
    (define-key map (kbd "S") #'mevedel-execution-panel-sort)
    map)
  "Keys of `mevedel-execution-panel-mode'.")

(easy-menu-define mevedel-execution-panel-menu mevedel-execution-panel-mode-map
  "Menu of the background-work panel."
  '("Background"
    ["Inspect" mevedel-execution-panel-inspect :help "Expand or collapse the row's inspector"]
    ["Open output" mevedel-execution-panel-open-output]
    ["Type a line" mevedel-execution-panel-send-input]
    ["Open listening port in browser" mevedel-execution-panel-browse]
    "---"
    ["Stop" mevedel-execution-panel-stop :help "Stop the marked rows, or the row at point"]
    ["Send Ctrl-C" mevedel-execution-panel-interrupt]
    ["Mark" mevedel-execution-panel-mark]
    ["Unmark" mevedel-execution-panel-unmark]
    ["Unmark all" mevedel-execution-panel-unmark-all]
    "---"
    ["Dismiss finished row" mevedel-execution-panel-dismiss]
    ["Dismiss all finished" mevedel-execution-panel-dismiss-finished]
    ["Undo the last dismissal" mevedel-execution-panel-undo-dismiss]
    ["Refresh" mevedel-execution-panel-refresh]
    "---"
    ["Run a command..." mevedel-execution-shell-command]
    ["Session history" mevedel-execution-panel-history]
    ["Stop everything..." mevedel-execution-stop-all]
    ["Restart the helper..." mevedel-execution-restart-helper]
    ["Close the session..." mevedel-execution-close-session]))

(define-derived-mode mevedel-execution-panel-mode tabulated-list-mode "Background"
  "The background work of one mevedel-exec session, live and finished.
Rows follow the helper's `exec/changed' and `exec/settled' events.
While the panel is on screen its runtimes are redrawn every
`mevedel-execution-panel-refresh-interval' seconds from the facts
held; the mode line says when the helper last reported.  Finished
rows stay, dimmed, until dismissed.  When the helper exits, the
live rows go and the panel says so.  Columns fit the window: the
Label column takes what the others leave.

\\{mevedel-execution-panel-mode-map}"
  (setq tabulated-list-format (mevedel-execution-panel--format 80))
  (setq tabulated-list-padding 2)
  (setq tabulated-list-sort-key nil)
  (setq tabulated-list-printer #'mevedel-execution-panel--print-entry)
  (setq mevedel-execution-panel--tails (make-hash-table :test #'equal))
  (setq mevedel-execution-panel--seen (make-hash-table :test #'equal))
  (setq-local revert-buffer-function #'mevedel-execution-panel--revert)
  (add-hook 'kill-buffer-hook #'mevedel-execution-panel--detach nil t)
  (add-hook 'change-major-mode-hook #'mevedel-execution-panel--detach nil t)
  (add-hook 'window-size-change-functions #'mevedel-execution-panel--on-resize nil t)
  (add-hook 'window-buffer-change-functions #'mevedel-execution-panel--on-shown nil t)
  (tabulated-list-init-header))

(defun mevedel-execution-panel--detach ()
  "Stop following the helper's events in this panel, and its timer."
  (when mevedel-execution-panel--listener
    (remove-hook 'mevedel-execution-event-functions mevedel-execution-panel--listener)
    (setq mevedel-execution-panel--listener nil))
  (mevedel-execution-panel--stop-timer))

(defun mevedel-execution-panel--attach ()
  "Follow the helper's events in this panel."
  (unless mevedel-execution-panel--listener
    (let* ((buffer (current-buffer))
           (listener nil))
      (setq listener
            (lambda (type plist)
              (if (not (buffer-live-p buffer))
                  (remove-hook 'mevedel-execution-event-functions listener)
                (with-current-buffer buffer
                  (unless mevedel-execution-panel--closed
                    (pcase type
                      ('changed (mevedel-execution-panel--on-changed plist))
                      ('settled (mevedel-execution-panel--on-settled plist))
                      ('exit (mevedel-execution-panel--on-exit plist))))))))
      (setq mevedel-execution-panel--listener listener)
      (add-hook 'mevedel-execution-event-functions listener))))

(defun mevedel-execution-panel--on-changed (plist)
  "Show the live set of the `exec/changed' payload PLIST, if it is ours."
  (when (equal (plist-get plist :session-id) mevedel-execution-panel--session-id)
    (mevedel-execution-panel--show (plist-get plist :live))))

(defun mevedel-execution-panel--keep-p (facts)
  "Return non-nil if the finished execution of FACTS stays as a row.
What a person started, and what this panel showed running in the
background (yielded, or a monitor's), stays; what a person stopped
goes, as do quick foreground commands the agent has the result of."
  (let ((id (mevedel-execution-panel--id facts))
        (sid mevedel-execution-panel--session-id))
    (and (> mevedel-execution-panel-finished-limit 0)
         (not (mevedel-execution-stopped-by-person-p sid facts))
         (or (mevedel-execution-person-started-p sid id)
             (cl-find id (mevedel-execution-finished-work sid)
                      :key #'mevedel-execution-panel--id :test #'equal)
             (and (gethash id mevedel-execution-panel--seen)
                  (or (plist-get facts :yielded) (plist-get facts :monitor-id)))))))

(defun mevedel-execution-panel--on-settled (plist)
  "Keep the finished execution of the `exec/settled' payload PLIST as a row."
  (when (equal (plist-get plist :session-id) mevedel-execution-panel--session-id)
    (let* ((facts (plist-get plist :facts))
           (id (mevedel-execution-panel--id facts)))
      (when (mevedel-execution-panel--keep-p facts)
        (setq mevedel-execution-panel--finished
              (cons facts (cl-remove id mevedel-execution-panel--finished
                                     :key #'mevedel-execution-panel--id :test #'equal)))
        (let ((excess (nthcdr mevedel-execution-panel-finished-limit
                              mevedel-execution-panel--finished)))
          (when excess
            (setq mevedel-execution-panel--finished
                  (butlast mevedel-execution-panel--finished (length excess))))))
      (remhash id mevedel-execution-panel--seen)
      (mevedel-execution-panel--show
       (cl-remove id mevedel-execution-panel--live
                  :key #'mevedel-execution-panel--id :test #'equal)
       mevedel-execution-panel--gone))))

(defun mevedel-execution-panel--on-exit (plist)
  "Empty the panel's live rows if the helper whose exit PLIST reports drove it.
Nothing that helper ran is followed any more; rows that stayed
would claim it still is.  Finished rows stay: they are true."
  (let ((session mevedel-execution-panel--session))
    (when (or (null session)
              (eql (plist-get plist :generation)
                   (mevedel-execution-session-generation session)))
      (clrhash mevedel-execution-panel--seen)
      (mevedel-execution-panel--show nil (or (plist-get plist :status) t)))))

(defun mevedel-execution-panel--on-teardown (session owner)
  "Mark the panels of SESSION closed when it closes (OWNER nil).
SESSION nil means every session: Emacs is shutting the helper down."
  (unless owner
    (dolist (buffer (buffer-list))
      (with-current-buffer buffer
        (when (and (derived-mode-p 'mevedel-execution-panel-mode)
                   (or (null session) (eq session mevedel-execution-panel--session)
                       (equal (and session (mevedel-execution-session-id session))
                              mevedel-execution-panel--session-id)))
          (setq mevedel-execution-panel--closed t)
          (mevedel-execution-panel--detach)
          (setq mevedel-execution-panel--live nil
                mevedel-execution-panel--marked nil
                mevedel-execution-panel--expanded nil)
          (mevedel-execution-panel--redraw))))))

(add-hook 'mevedel-execution-teardown-functions #'mevedel-execution-panel--on-teardown)

(defun mevedel-execution-panel--id (facts)
  "Return the execution id of FACTS."
  (plist-get facts :execution-id))

(defun mevedel-execution-panel--short-id (facts)
  "Return the Id cell of FACTS: the id's sequence number, the full id as its help.
Every row of a panel shares the rest (the session's part), which
the inspector (\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-inspect]) shows whole."
  (let ((id (or (plist-get facts :execution-id) "")))
    (propertize (if (string-match "-\\([0-9]+\\)\\'" id) (match-string 1 id) id)
                'help-echo id)))

(defun mevedel-execution-panel--facts (id)
  "Return the facts of the execution ID shown in this panel, live or finished."
  (or (cl-find id mevedel-execution-panel--live
               :key #'mevedel-execution-panel--id :test #'equal)
      (cl-find id mevedel-execution-panel--finished
               :key #'mevedel-execution-panel--id :test #'equal)))

(defun mevedel-execution-panel--live-p (id)
  "Return non-nil if ID is one of this panel's live rows."
  (cl-find id mevedel-execution-panel--live
           :key #'mevedel-execution-panel--id :test #'equal))

;;;; The runtime clock

(defun mevedel-execution-panel--visible-p ()
  "Return non-nil if this panel is in a window."
  (get-buffer-window (current-buffer) t))

(defun mevedel-execution-panel--stop-timer ()
  "Cancel this panel's runtime timer."
  (when mevedel-execution-panel--timer
    (cancel-timer mevedel-execution-panel--timer)
    (setq mevedel-execution-panel--timer nil)))

(defun mevedel-execution-panel--update-timer ()
  "Run the runtime timer while this panel is on screen with live rows; else not."
  (if (and mevedel-execution-panel-refresh-interval
           mevedel-execution-panel--live
           (not mevedel-execution-panel--closed)
           (mevedel-execution-panel--visible-p))
      (unless mevedel-execution-panel--timer
        (let ((buffer (current-buffer))
              (timer nil))
          (setq timer (run-at-time mevedel-execution-panel-refresh-interval
                                   mevedel-execution-panel-refresh-interval
                                   (lambda () (mevedel-execution-panel--tick buffer timer))))
          (setq mevedel-execution-panel--timer timer)))
    (mevedel-execution-panel--stop-timer)))

(defun mevedel-execution-panel--tick (buffer timer)
  "Redraw BUFFER's runtimes if it is still on screen; else cancel TIMER."
  (if (not (buffer-live-p buffer))
      (cancel-timer timer)
    (with-current-buffer buffer
      (if (and (mevedel-execution-panel--visible-p) mevedel-execution-panel--live)
          ;; Not while the person types in the minibuffer about a row,
          ;; or searches the panel.
          (unless (or (active-minibuffer-window) (bound-and-true-p isearch-mode))
            (mevedel-execution-panel--redraw t))
        (mevedel-execution-panel--stop-timer)))))

(defun mevedel-execution-panel--on-shown (&rest _)
  "Size the columns and start the clock when the panel comes on screen."
  (when (derived-mode-p 'mevedel-execution-panel-mode)
    (mevedel-execution-panel--update-timer)
    (unless (eql mevedel-execution-panel--width (mevedel-execution-panel--window-width))
      (mevedel-execution-panel--redraw))))

(defun mevedel-execution-panel--on-resize (&rest _)
  "Size the columns again when a window showing the panel changed width."
  (when (and (derived-mode-p 'mevedel-execution-panel-mode)
             (not (eql mevedel-execution-panel--width (mevedel-execution-panel--window-width))))
    (mevedel-execution-panel--redraw)))

(defun mevedel-execution-panel--hidden-check (_frame)
  "Stop the clock of panels that are in no window any more."
  (dolist (buffer (buffer-list))
    (when (buffer-local-value 'mevedel-execution-panel--timer buffer)
      (with-current-buffer buffer
        (mevedel-execution-panel--update-timer)))))

(add-hook 'window-buffer-change-functions #'mevedel-execution-panel--hidden-check)

;;;; Columns

(defun mevedel-execution-panel--runtime-seconds (facts)
  "Return how many seconds the execution of FACTS has run, or nil.
A finished one ran for its wall time."
  (let ((started (plist-get facts :started-at)))
    (cond
     ((equal (plist-get facts :state) "settled")
      (and started (/ (or (plist-get facts :wall-ms) 0) 1000)))
     ((stringp started)
      (let ((t0 (ignore-errors (parse-iso8601-time-string started))))
        (when t0
          (max 0 (floor (float-time (time-subtract nil t0))))))))))

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
  "Return what the execution of FACTS is, from the kind the helper gave it.
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

(defun mevedel-execution-panel--bytes (facts)
  "Return the output size of FACTS in bytes."
  (or (plist-get facts :output-bytes) 0))

(defun mevedel-execution-panel--sorter (key)
  "Return a `tabulated-list' sort predicate comparing rows by KEY of their facts."
  (lambda (a b)
    (< (or (funcall key (mevedel-execution-panel--facts (car a))) -1)
       (or (funcall key (mevedel-execution-panel--facts (car b))) -1))))

(defconst mevedel-execution-panel--columns
  ;; Name, preferred width, narrowest width, sort, right-aligned.
  '(("Id" 6 6 t nil)
    ("Kind" 8 7 t nil)
    ("Owner" 12 6 t nil)
    ("Label" nil 10 t nil)
    ("State" 12 11 t nil)
    ("Runtime" 7 6 runtime t)
    ("Output" 9 8 bytes t))
  "The panel's columns; Label takes what the others leave.")

(defun mevedel-execution-panel--window-width ()
  "Return the width of the narrowest window showing this panel, or 80."
  (let ((widths (mapcar #'window-body-width
                        (get-buffer-window-list (current-buffer) nil t))))
    (if widths (apply #'min widths) 80)))

(defun mevedel-execution-panel--format (width)
  "Return a `tabulated-list-format' whose columns fit WIDTH columns.
Label gets what the others leave, and at least 24 columns while
the others can shrink to make room: Kind, State, Output
and last Owner, down to their narrowest.  In a narrower window
every column gives way to a tight floor, and Label keeps at least
six."
  (let* ((columns mevedel-execution-panel--columns)
         (fixed (cl-remove "Label" columns :key #'car :test #'equal))
         ;; The left padding, a space between columns, and the
         ;; last column's right edge.
         (room (- width 2 (length columns) 1))
         (widths (mapcar (lambda (c) (cons (car c) (nth 1 c))) fixed))
         (sum (lambda () (apply #'+ (mapcar #'cdr widths))))
         (label-min 24))
    (dolist (name '("Kind" "State" "Output" "Owner"))
      (let* ((cell (assoc name widths))
             (floor (nth 2 (assoc name columns)))
             (over (- (+ (funcall sum) label-min) room)))
        (when (> over 0)
          (setcdr cell (max floor (- (cdr cell) over))))))
    ;; Narrower than that (a window beside another): the Id keeps
    ;; its start, then every column gives way to a tight floor.
    (when (> (+ (funcall sum) label-min) room)
      (setq label-min 6)
      (pcase-dolist (`(,name . ,floor) '(("State" . 7) ("Kind" . 4)
                                         ("Output" . 6) ("Runtime" . 5) ("Owner" . 4)))
        (let ((cell (assoc name widths))
              (over (- (+ (funcall sum) label-min) room)))
          (when (> over 0)
            (setcdr cell (max floor (- (cdr cell) over)))))))
    (let ((label (max label-min (- room (funcall sum)))))
      (vconcat
       (mapcar (lambda (c)
                 (let ((name (car c)))
                   (append
                    (list name
                          (if (equal name "Label") label (cdr (assoc name widths)))
                          (pcase (nth 3 c)
                            ('runtime (mevedel-execution-panel--sorter
                                       #'mevedel-execution-panel--runtime-seconds))
                            ('bytes (mevedel-execution-panel--sorter
                                     #'mevedel-execution-panel--bytes))
                            (v v)))
                    (and (nth 4 c) '(:right-align t)))))
               columns)))))

(defun mevedel-execution-panel--state (facts)
  "Return the State cell of FACTS, with its face.
A finished row shows its status and exit code (or signal)."
  (let ((state (or (plist-get facts :state) "?")))
    (cond
     ((equal state "settled")
      (let ((status (or (plist-get facts :status) "ended"))
            (code (plist-get facts :exit-code))
            (signal (plist-get facts :signal)))
        (propertize (cond (code (format "%s %d" status code))
                          ((and signal (not (equal status "stopped")))
                           (format "%s %s" status (string-remove-prefix "SIG" signal)))
                          (t status))
                    'face (if (equal (plist-get facts :outcome) "failure")
                              (if (equal status "stopped")
                                  'mevedel-execution-panel-finished
                                'mevedel-execution-panel-failed)
                            'mevedel-execution-panel-finished))))
     ((plist-get facts :waiting-for-input)
      (propertize "waiting" 'face 'mevedel-execution-panel-waiting))
     (t (propertize state 'face (pcase state
                                  ("running" 'mevedel-execution-panel-running)
                                  ("stopping" 'mevedel-execution-panel-stopping)
                                  (_ 'shadow)))))))

(defun mevedel-execution-panel--entry (facts)
  "Return the `tabulated-list-entries' element of FACTS."
  (let* ((finished (equal (plist-get facts :state) "settled"))
         (dim (lambda (text) (if finished
                                 (propertize text 'face 'mevedel-execution-panel-finished)
                               text)))
         (prompt (and (plist-get facts :waiting-for-input)
                      (mevedel-execution-transcript-one-line (or (plist-get facts :prompt) ""))))
         (label (mevedel-execution-panel--label facts)))
    (list (mevedel-execution-panel--id facts)
          (vector (funcall dim (mevedel-execution-panel--short-id facts))
                  (funcall dim (mevedel-execution-panel--kind facts))
                  (funcall dim (or (plist-get facts :owner) mevedel-execution-root-owner))
                  (if (and prompt (not (string-empty-p prompt)))
                      (concat label " "
                              (propertize prompt 'face 'mevedel-execution-panel-waiting))
                    (funcall dim label))
                  (mevedel-execution-panel--state facts)
                  (funcall dim (mevedel-execution-panel--duration
                                (mevedel-execution-panel--runtime-seconds facts)))
                  (funcall dim (mevedel-execution-panel--size (plist-get facts :output-bytes)))))))

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
                    (funcall item "id" id)
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
                              (mevedel-execution-spool-address id)))
           (and (plist-get facts :waiting-for-input)
                (funcall join
                         (concat "waiting for input"
                                 (let ((p (plist-get facts :prompt)))
                                   (if (and p (not (string-empty-p p)))
                                       (concat ": " (mevedel-execution-transcript-one-line p))
                                     "")))
                         (funcall item "since" (and (plist-get facts :waiting-since)
                                                    (mevedel-execution-panel--local-time
                                                     (plist-get facts :waiting-since))))))
           (and (plist-get facts :ready)
                (concat "ready"
                        (let ((l (plist-get facts :ready-line)))
                          (if (and l (not (string-empty-p l)))
                              (concat ": " (mevedel-execution-transcript-one-line l))
                            ""))))
           (and (plist-get facts :listening)
                (concat "listening "
                        (mapconcat #'mevedel-execution-panel--listener-text
                                   (plist-get facts :listening) ", ")
                        (substitute-command-keys
                         "  (\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-browse] opens one in a browser)")))))
         (tail-lines
          (cond ((plist-get tail :error)
                 (list (format "(cannot read the output: %s)" (plist-get tail :error))))
                ((plist-member tail :lines)
                 (or (mapcar (lambda (l) (concat "| " l)) (plist-get tail :lines))
                     (list "(no output yet)")))
                (t (list "(reading the output...)")))))
    (concat
     (mapconcat (lambda (l) (concat "    " l)) (delq nil lines) "\n")
     "\n"
     (propertize (mapconcat (lambda (l) (concat "    " l)) tail-lines "\n")
                 'face 'shadow)
     "\n")))

(defun mevedel-execution-panel--listener-text (listening)
  "Return the LISTENING plist (:address :port :pid) as ADDRESS:PORT (pid N)."
  (let ((address (or (plist-get listening :address) "?"))
        (pid (plist-get listening :pid)))
    (format "%s:%s%s"
            (if (string-match-p ":" address) (format "[%s]" address) address)
            (plist-get listening :port)
            (if pid (format " (pid %s)" pid) ""))))

(defun mevedel-execution-panel--print-entry (id cols)
  "Insert the row ID with COLS, and its inspector when it is open.
A marked row starts with a star."
  (let ((start (point)))
    (tabulated-list-print-entry id cols)
    (when (member id mevedel-execution-panel--marked)
      (save-excursion
        (goto-char start)
        (delete-char 1)
        (insert (propertize "*" 'tabulated-list-id id 'face 'bold)))))
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

(defun mevedel-execution-panel--redraw (&optional clock)
  "Print the panel again, keeping point and every window's point on its row.
The columns are sized to the narrowest window showing the panel.
CLOCK non-nil says only time passed: the mode line keeps the time
of the helper's last report."
  (let* ((order (mapcar #'car tabulated-list-entries))
         (here (mevedel-execution-panel--spot (point)))
         (windows (mapcar (lambda (w) (cons w (mevedel-execution-panel--spot (window-point w))))
                          (get-buffer-window-list (current-buffer) nil t)))
         (width (mevedel-execution-panel--window-width)))
    (unless (eql width mevedel-execution-panel--width)
      (setq mevedel-execution-panel--width width)
      (setq tabulated-list-format (mevedel-execution-panel--format width))
      (tabulated-list-init-header))
    (setq tabulated-list-entries
          (mapcar #'mevedel-execution-panel--entry
                  (append mevedel-execution-panel--live mevedel-execution-panel--finished)))
    (tabulated-list-print)
    (let ((note
           (cond
            (mevedel-execution-panel--closed
             (concat
              (format " Session %s is closed: nothing runs here any more.\n"
                      mevedel-execution-panel--session-id)
              " M-x mevedel-execution-open-session opens a session again.\n"))
            (mevedel-execution-panel--gone
             (concat
              (format " The mevedel-exec helper exited (status %s): nothing is followed here.\n"
                      mevedel-execution-panel--gone)
              (substitute-command-keys
               " \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-refresh] starts it again and shows what is live.\n")))
            ((null tabulated-list-entries)
             (concat " No background work.\n"
                     (substitute-command-keys
                      " \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-shell-command] runs a command.\n")))
            ((and mevedel-execution-panel--finished (null mevedel-execution-panel--live))
             " Nothing runs now.\n"))))
      (when note
        (let ((inhibit-read-only t))
          (save-excursion
            (goto-char (point-max))
            (insert (propertize note 'face 'shadow)))
          (set-buffer-modified-p nil))))
    (unless clock
      (setq mode-line-process
            (format " %s: %d live%s, as of %s"
                    (string-replace "%" "%%" mevedel-execution-panel--session-id)
                    (length mevedel-execution-panel--live)
                    (if mevedel-execution-panel--finished
                        (format ", %d finished" (length mevedel-execution-panel--finished))
                      "")
                    (format-time-string "%T"))))
    (goto-char (if here (mevedel-execution-panel--place here order) (point-min)))
    (dolist (w windows)
      (when (cdr w)
        (set-window-point (car w) (mevedel-execution-panel--place (cdr w) order))))
    (mevedel-execution-panel--update-timer)
    (mevedel-execution-panel--ensure-tails)))

(defun mevedel-execution-panel--show (live &optional gone)
  "Show LIVE, the facts of the session's live executions.
GONE non-nil, the helper's exit status, says its helper exited.
A row that starts waiting for input is also said in the echo area
\(through `mevedel-execution-event-functions')."
  (let ((finished (mapcar #'mevedel-execution-panel--id mevedel-execution-panel--finished)))
    (setq live (cl-remove-if (lambda (f) (member (mevedel-execution-panel--id f) finished)) live)))
  (setq mevedel-execution-panel--live live)
  (setq mevedel-execution-panel--gone gone)
  (dolist (f live)
    (puthash (mevedel-execution-panel--id f) t mevedel-execution-panel--seen))
  (let ((ids (mapcar #'mevedel-execution-panel--id
                     (append live mevedel-execution-panel--finished))))
    (setq mevedel-execution-panel--expanded
          (cl-remove-if-not (lambda (id) (member id ids)) mevedel-execution-panel--expanded))
    (setq mevedel-execution-panel--marked
          (cl-remove-if-not (lambda (id) (member id ids)) mevedel-execution-panel--marked))
    (maphash (lambda (id _) (unless (member id ids) (remhash id mevedel-execution-panel--tails)))
             mevedel-execution-panel--tails))
  (mevedel-execution-panel--redraw))

(defun mevedel-execution-panel--note-facts (facts)
  "Show FACTS in place of the panel's facts of that execution, if fresher."
  (let* ((id (mevedel-execution-panel--id facts))
         (old (and id (mevedel-execution-panel--live-p id))))
    (when (and old (> (or (plist-get facts :version) 0) (or (plist-get old :version) 0)))
      (setq mevedel-execution-panel--live
            (mapcar (lambda (f) (if (eq f old) facts f)) mevedel-execution-panel--live))
      (mevedel-execution-panel--redraw))))

(defun mevedel-execution-panel--watching-p (session-id execution-id)
  "Return non-nil if EXECUTION-ID of SESSION-ID is live in a panel on screen.
For `mevedel-execution-watching-functions'."
  (cl-some (lambda (buffer)
             (with-current-buffer buffer
               (and (derived-mode-p 'mevedel-execution-panel-mode)
                    (equal mevedel-execution-panel--session-id session-id)
                    (get-buffer-window buffer t)
                    (or (gethash execution-id mevedel-execution-panel--seen)
                        (mevedel-execution-panel--live-p execution-id))
                    t)))
           (buffer-list)))

(add-hook 'mevedel-execution-watching-functions #'mevedel-execution-panel--watching-p)

(defun mevedel-execution-panel--after-restart ()
  "Show what is live in each open panel after the helper restarted."
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (when (and (derived-mode-p 'mevedel-execution-panel-mode)
                 (not mevedel-execution-panel--closed))
        (ignore-errors (mevedel-execution-panel-refresh))))))

(add-hook 'mevedel-execution-restart-hook #'mevedel-execution-panel--after-restart)

;;;; Commands

(defun mevedel-execution-panel--live-session ()
  "Return this panel's session, or the open session with its id."
  (when mevedel-execution-panel--closed
    (user-error "Session %s is closed; M-x mevedel-execution-open-session opens one"
                mevedel-execution-panel--session-id))
  (let ((session (mevedel-execution-resolve-session
                  mevedel-execution-panel--session mevedel-execution-panel--session-id)))
    (setq mevedel-execution-panel--session session)))

(defun mevedel-execution-panel--current-id ()
  "Return the execution id on the current line, or signal a `user-error'."
  (or (tabulated-list-get-id) (user-error "No execution on this line")))

(defun mevedel-execution-panel--targets ()
  "Return the ids a command acts on: the marked rows, else the row at point."
  (or (cl-remove-if-not #'mevedel-execution-panel--facts mevedel-execution-panel--marked)
      (list (mevedel-execution-panel--current-id))))

(defun mevedel-execution-panel--name (id)
  "Return how a person names the execution ID of this panel."
  (let ((facts (mevedel-execution-panel--facts id)))
    (if facts (mevedel-execution-describe facts) id)))

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
  "Return the session to show.
The only open one, or one chosen among several (the current
buffer's first); with none open, the person's session of the
current project, opened now."
  (let ((open (mevedel-execution-sessions)))
    (cond ((null open) (mevedel-execution-person-session))
          ((null (cdr open)) (car open))
          (t (mevedel-execution-read-session "Show the background work of session")))))

;;;###autoload
(defun mevedel-execution-panel (&optional session)
  "Show the background work of SESSION in a panel; return its buffer.
Interactively, the only open session, or one chosen among several;
with none open, the person's session of the current project.  The
panel lists running commands and monitors, follows the helper's
events, and keeps finished work, dimmed, until dismissed.  In it:
\\<mevedel-execution-panel-mode-map>
\\[mevedel-execution-panel-inspect] expands or collapses a row's inspector;
\\[mevedel-execution-panel-stop] stops the command (or the marked ones);
\\[mevedel-execution-panel-interrupt] sends it Ctrl-C;
\\[mevedel-execution-panel-send-input] types a line into it;
\\[mevedel-execution-panel-open-output] opens its full output;
\\[mevedel-execution-panel-browse] opens a port it listens on in a browser;
\\[mevedel-execution-panel-mark] and \\[mevedel-execution-panel-unmark] mark and unmark rows;
\\[mevedel-execution-panel-dismiss] dismisses a finished row, \\[mevedel-execution-panel-dismiss-finished] all of them;
\\[mevedel-execution-panel-sort] sorts by the column at point;
\\[mevedel-execution-shell-command] runs a command;
\\[mevedel-execution-panel-refresh] asks the helper again."
  (interactive (list (mevedel-execution-panel--read-session)))
  (let ((session (or session (mevedel-execution-panel--read-session)))
        buffer)
    (setq buffer (mevedel-execution-panel--buffer session))
    (with-current-buffer buffer
      (unless (derived-mode-p 'mevedel-execution-panel-mode)
        (mevedel-execution-panel-mode))
      (setq mevedel-execution-panel--session session)
      (setq mevedel-execution-buffer-session session)
      (setq mevedel-execution-panel--session-id (mevedel-execution-session-id session))
      (setq mevedel-execution-panel--closed nil)
      ;; Listen first: a change during the listing then shows too.
      (mevedel-execution-panel--attach)
      (mevedel-execution-panel-refresh))
    (when (called-interactively-p 'interactive)
      (pop-to-buffer buffer))
    buffer))

(defun mevedel-execution-panel-refresh ()
  "Ask the helper for the live executions and the recent history; show them.
The finished rows include the session's recently finished work
from its journal (`mevedel-execution-history'), so a panel opened
after Emacs restarted, with the helper daemon, shows what ended
before too.  After the helper died this starts a new one and
reopens the session; the reopen reports what it marked lost."
  (interactive)
  (let* ((session (mevedel-execution-panel--live-session))
         (live (mevedel-execution-list-user session)))
    (mevedel-execution-panel--adopt-finished (mevedel-execution-panel--history session))
    (mevedel-execution-panel--show live)))

(defconst mevedel-execution-panel--history-records 400
  "How many of the journal's latest records a panel reads for its history.
An execution leaves three or four, so the finished limit's worth.")

(defvar mevedel-execution-panel--dismissed-ids (make-hash-table :test #'equal)
  "Per session id, the ids of the finished rows a person dismissed here.
The journal still holds them: the history read again must not bring
them back.")

(defun mevedel-execution-panel--history-keep-p (facts)
  "Return non-nil if FACTS, final facts from the journal, make a row.
What a person ran and what ran in the background, as the panel keeps
them live; not what a person stopped, nor what was dismissed here."
  (let ((id (mevedel-execution-panel--id facts)))
    (and (not (member id (gethash mevedel-execution-panel--session-id
                                  mevedel-execution-panel--dismissed-ids)))
         (not (mevedel-execution-stopped-by-person-p mevedel-execution-panel--session-id facts))
         (or (equal (plist-get facts :owner) mevedel-execution-person-owner)
             (plist-get facts :yielded)
             (plist-get facts :monitor-id)))))

(defun mevedel-execution-panel--history (session)
  "Return the final facts of SESSION's recently finished work, from its journal.
Only what the panel keeps as rows; nil when the journal cannot be read."
  (condition-case err
      (let* ((last (or (mevedel-execution-transcript-checkpoint session) 0))
             (since (max 0 (- last mevedel-execution-panel--history-records)))
             (records (car (mevedel-execution-transcript-records
                            session since mevedel-execution-panel--history-records))))
        (cl-loop for row in (mevedel-execution-transcript-rows records)
                 for facts = (plist-get row :facts)
                 when (and facts (member (plist-get row :type) '("settled" "lost"))
                           (equal (plist-get facts :state) "settled")
                           (mevedel-execution-panel--history-keep-p facts))
                 collect facts))
    (mevedel-execution-error
     (message "mevedel-exec: the panel could not read the session's history: %s"
              (error-message-string err))
     nil)))

(defun mevedel-execution-panel--adopt-finished (&optional history)
  "Add the person's finished commands this panel does not show yet.
They may have ended before it opened; newest first, within the limit.
HISTORY, final facts from the session's journal, is added the same way."
  (let* ((all mevedel-execution-panel--finished))
    (dolist (facts (append (mevedel-execution-finished-work mevedel-execution-panel--session-id)
                           history))
      (unless (cl-find (mevedel-execution-panel--id facts) all
                       :key #'mevedel-execution-panel--id :test #'equal)
        (push facts all)))
    (setq mevedel-execution-panel--finished
          (seq-take (mevedel-execution-panel--sort-finished all)
                    mevedel-execution-panel-finished-limit))))

(defun mevedel-execution-panel--on-finished-work (session-id facts)
  "Show FACTS, a person's command of SESSION-ID that ended, in its open panels.
Those the panel kept as it settled are there already."
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (when (and (derived-mode-p 'mevedel-execution-panel-mode)
                 (equal mevedel-execution-panel--session-id session-id)
                 (not mevedel-execution-panel--closed)
                 (not (mevedel-execution-panel--facts (mevedel-execution-panel--id facts))))
        (mevedel-execution-panel--adopt-finished)
        (mevedel-execution-panel--show mevedel-execution-panel--live
                                       mevedel-execution-panel--gone)))))

(add-hook 'mevedel-execution-finished-work-functions #'mevedel-execution-panel--on-finished-work)

(defun mevedel-execution-panel--revert (&rest _)
  "The `revert-buffer-function' of the panel: refresh it."
  (mevedel-execution-panel-refresh))

(defun mevedel-execution-panel-inspect ()
  "Expand the inspector of the execution at point, or collapse it.
The inspector, under the row, says its state, pid, lane, command,
working directory, start, output size, log address, waiting prompt,
ready line and listening ports, and shows the last lines of output
\(read from the end of its log, cleaned of escapes), kept up to date."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id)))
    (if (member id mevedel-execution-panel--expanded)
        (progn
          (setq mevedel-execution-panel--expanded (delete id mevedel-execution-panel--expanded))
          (mevedel-execution-panel--follow id nil))
      (push id mevedel-execution-panel--expanded)
      (mevedel-execution-panel--follow id t))
    (let ((start (mevedel-execution-panel--row-start id)))
      (when start (goto-char start)))
    (mevedel-execution-panel--redraw)))

(defun mevedel-execution-panel--follow (id on)
  "Ask the helper to watch ID's listening ports while its inspector is open.
ON nil undoes one earlier follow.  A finished execution needs none, and a
refusal (it ended meanwhile) is no news."
  (when (and (mevedel-execution-panel--live-p id)
             (not mevedel-execution-panel--closed))
    ;; Advisory: a helper that cannot be reached just shows no new ports.
    (ignore-errors
      (mevedel-execution-request-async
       (mevedel-execution-panel--live-session) 'exec/follow
       (list :execution-id id :as "user" :follow (if on t :json-false))
       :on-error #'ignore))))

(defun mevedel-execution-panel-stop ()
  "Stop the marked executions, or the one at point.
SIGTERM to each one's process group, SIGKILL after the grace period;
each row goes once the helper reports it settled."
  (interactive)
  (let* ((session (mevedel-execution-panel--live-session))
         (sid (mevedel-execution-session-id session))
         (ids (cl-remove-if-not #'mevedel-execution-panel--live-p
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
    (setq mevedel-execution-panel--marked nil)
    (message "mevedel-exec: stopping %s..."
             (if (cdr ids) (format "%d commands" (length ids))
               (format "\"%s\"" (mevedel-execution-panel--name (car ids)))))
    (mevedel-execution-panel--redraw)))

(defun mevedel-execution-panel-interrupt ()
  "Send Ctrl-C to the marked executions, or the one at point.
A command with a terminal gets it on its terminal, one without as
SIGINT to its process group; a command that handles it goes on."
  (interactive)
  (let* ((session (mevedel-execution-panel--live-session))
         (sid (mevedel-execution-session-id session))
         (ids (cl-remove-if-not #'mevedel-execution-panel--live-p
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
    (setq mevedel-execution-panel--marked nil)
    (mevedel-execution-panel--redraw)))

(defun mevedel-execution-panel--read-input ()
  "Read a line for the row at point; return (LINE ID NAME).
The row is taken when the key is pressed, before the prompt: the
line goes to that execution whatever moves under point meanwhile,
and NAME, how the prompt named it, names it in what follows even
if its row went meanwhile."
  (let* ((id (mevedel-execution-panel--current-id))
         (facts (mevedel-execution-panel--facts id)))
    (unless (mevedel-execution-panel--live-p id)
      (user-error "\"%s\" has finished" (mevedel-execution-panel--name id)))
    (unless (plist-get facts :tty)
      (user-error "%s has no terminal; only Ctrl-C (%s) reaches it"
                  (mevedel-execution-panel--id facts)
                  (substitute-command-keys "\\[mevedel-execution-panel-interrupt]")))
    (list (read-string (format "Input to \"%s\"%s: "
                               (mevedel-execution-panel--label facts)
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
     (mevedel-execution-panel--live-session) id (concat line "\n")
     (lambda (obs)
       (let ((err (plist-get obs :error)))
         (if err
             (message "mevedel-exec: input to \"%s\" not sent: %s" name (plist-get err :message))
           (when (buffer-live-p panel)
             (with-current-buffer panel
               (mevedel-execution-panel--note-facts (plist-get obs :facts))))))))))

(defun mevedel-execution-panel-open-output (&optional from-end)
  "Open the full output of the execution at point, a page at a time.
With a prefix argument FROM-END, start at its last page."
  (interactive "P")
  (let* ((id (mevedel-execution-panel--current-id))
         (facts (mevedel-execution-panel--facts id)))
    (pop-to-buffer
     (mevedel-execution-spool-open-output
      (mevedel-execution-panel--live-session) id from-end facts))))

(defun mevedel-execution-panel--sort-finished (facts-list)
  "Return FACTS-LIST, finished rows, newest end first."
  (sort facts-list (lambda (a b) (string> (or (plist-get a :ended-at) "")
                                          (or (plist-get b :ended-at) "")))))

(defun mevedel-execution-panel--dismiss-ids (ids)
  "Remove the finished rows IDS, kept for an undo to bring back."
  (let ((gone (cl-remove-if-not (lambda (f) (member (mevedel-execution-panel--id f) ids))
                                mevedel-execution-panel--finished)))
    (when gone
      ;; With which of them a panel opened later would show, to be
      ;; remembered again on an undo.
      (push (cons gone (cl-loop for f in (mevedel-execution-finished-work
                                          mevedel-execution-panel--session-id)
                                for id = (mevedel-execution-panel--id f)
                                when (member id ids) collect id))
            mevedel-execution-panel--dismissed)
      (setq mevedel-execution-panel--dismissed
            (seq-take mevedel-execution-panel--dismissed mevedel-execution-panel--undo-limit)))
    (setq mevedel-execution-panel--finished
          (cl-set-difference mevedel-execution-panel--finished gone))
    (mevedel-execution-forget-finished mevedel-execution-panel--session-id ids)
    (puthash mevedel-execution-panel--session-id
             (seq-take (append ids (gethash mevedel-execution-panel--session-id
                                            mevedel-execution-panel--dismissed-ids))
                       1000)
             mevedel-execution-panel--dismissed-ids)
    (setq mevedel-execution-panel--marked
          (cl-set-difference mevedel-execution-panel--marked ids :test #'equal))
    (mevedel-execution-panel--show mevedel-execution-panel--live mevedel-execution-panel--gone)
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
  (let ((ids (cl-remove-if #'mevedel-execution-panel--live-p (mevedel-execution-panel--targets))))
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
   (mapcar #'mevedel-execution-panel--id mevedel-execution-panel--finished)))

(defun mevedel-execution-panel-undo-dismiss ()
  "Bring back the rows the last dismissal removed, point on the first.
Return their ids, or nil when there is nothing to undo."
  (interactive)
  (let* ((undo (pop mevedel-execution-panel--dismissed))
         (back (car undo)))
    (if (not undo)
        (progn (when (called-interactively-p 'any) (message "No dismissal to undo"))
               nil)
      (let ((shown (mapcar #'mevedel-execution-panel--id mevedel-execution-panel--finished)))
        (setq back (cl-remove-if (lambda (f) (member (mevedel-execution-panel--id f) shown)) back))
        (setq mevedel-execution-panel--finished
              (mevedel-execution-panel--sort-finished
               (append back mevedel-execution-panel--finished)))
        (puthash mevedel-execution-panel--session-id
                 (cl-set-difference (gethash mevedel-execution-panel--session-id
                                             mevedel-execution-panel--dismissed-ids)
                                    (mapcar #'mevedel-execution-panel--id back)
                                    :test #'equal)
                 mevedel-execution-panel--dismissed-ids)
        (dolist (f (reverse back))
          (when (member (mevedel-execution-panel--id f) (cdr undo))
            (mevedel-execution-remember-finished mevedel-execution-panel--session-id f)))
        (mevedel-execution-panel--show mevedel-execution-panel--live mevedel-execution-panel--gone)
        (let ((start (and back (mevedel-execution-panel--row-start
                                (mevedel-execution-panel--id (car back))))))
          (when start (goto-char start)))
        (message "%s back" (if (cdr back) (format "%d finished rows" (length back))
                             (format "\"%s\"" (mevedel-execution-describe (car back)))))
        (mapcar #'mevedel-execution-panel--id back)))))

(defun mevedel-execution-panel-mark ()
  "Mark the row at point and move to the next row.
\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-stop], \\[mevedel-execution-panel-interrupt] and \\[mevedel-execution-panel-dismiss] then act on every marked row instead of
the row at point; \\[mevedel-execution-panel-unmark] unmarks one, \\[mevedel-execution-panel-unmark-all] all."
  (interactive)
  (let ((id (mevedel-execution-panel--current-id)))
    (cl-pushnew id mevedel-execution-panel--marked :test #'equal)
    (mevedel-execution-panel--redraw)
    (mevedel-execution-panel--next-row id)))

(defun mevedel-execution-panel-unmark ()
  "Unmark the row at point and move to the next row; else undo a dismissal.
On a row that is not marked, right after rows were dismissed
\(\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-dismiss], \\[mevedel-execution-panel-dismiss-finished]), bring them back
instead (`mevedel-execution-panel-undo-dismiss')."
  (interactive)
  (let ((id (tabulated-list-get-id)))
    (cond
     ((and id (member id mevedel-execution-panel--marked))
      (setq mevedel-execution-panel--marked (delete id mevedel-execution-panel--marked))
      (mevedel-execution-panel--redraw)
      (mevedel-execution-panel--next-row id))
     (mevedel-execution-panel--dismissed
      (call-interactively #'mevedel-execution-panel-undo-dismiss))
     (id (mevedel-execution-panel--next-row id))
     (t (user-error "No execution on this line")))))

(defun mevedel-execution-panel-unmark-all ()
  "Unmark every row.
Commands then act on the row at point again."
  (interactive)
  (setq mevedel-execution-panel--marked nil)
  (mevedel-execution-panel--redraw))

(defun mevedel-execution-panel--next-row (id)
  "Move point to the row after ID's, if there is one."
  (let* ((ids (mapcar #'car tabulated-list-entries))
         (next (cadr (member id ids)))
         (start (and next (mevedel-execution-panel--row-start next))))
    (when start (goto-char start))))

(defun mevedel-execution-panel-history ()
  "Show the transcript of this panel's session.
That is `mevedel-execution-history': one line per finished
background command of the session, from its journal, each with a
button that opens the whole result."
  (interactive)
  (pop-to-buffer (mevedel-execution-history (mevedel-execution-panel--live-session))))

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
    (mevedel-execution-panel--redraw)))

;;;; Listening ports

(defun mevedel-execution-panel--local-p (facts)
  "Return non-nil if the execution of FACTS is on this machine."
  (member (or (plist-get facts :target) "local") '("local")))

(defun mevedel-execution-panel--read-port (facts)
  "Return the port to open among those FACTS say are listened on."
  (let* ((listening (plist-get facts :listening))
         (choices (mapcar (lambda (l) (cons (mevedel-execution-panel--listener-text l)
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
         (facts (mevedel-execution-panel--facts id))
         (port (or port (mevedel-execution-panel--read-port facts))))
    (if (mevedel-execution-panel--local-p facts)
        (browse-url (format "http://127.0.0.1:%s" port))
      (mevedel-execution-request-async
       (mevedel-execution-panel--live-session) 'exec/forward
       (list :execution-id id :port port)
       :on-result (lambda (r)
                    (let ((local (plist-get r :local-address)))
                      (message "mevedel-exec: %s port %s is at %s"
                               (plist-get facts :target) port local)
                      (browse-url (concat "http://" local))))
       :on-error (lambda (err)
                   (message "mevedel-exec: forwarding port %s: %s" port (plist-get err :message)))
       :timeout 60))))

(provide 'mevedel-execution-panel)
;;; mevedel-execution-panel.el ends here

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

;; M-x mevedel-execution-panel lists the live executions of one session
;; (commands and monitors) with their owner, label, state, runtime and
;; output size.  It is filled once from `mevedel-execution-list-user'
;; and the session's recent history, and then follows the helper's
;; `exec/changed' and `exec/settled' events; it never asks the helper
;; on a clock.  While it is on screen a one-second timer redraws the
;; runtimes (from the facts it holds).  Finished work stays, dimmed,
;; with how it ended, until the person dismisses it or
;; `mevedel-execution-panel-finished-limit' ages it out.
;;
;; This file holds the mode, the panel's buffer-local state (its
;; public names are for the panel's other files), the events it
;; follows and the drawing that keeps point on its execution.  The
;; columns and the inspector are in mevedel-execution-panel-view.el,
;; the commands of its keys in mevedel-execution-panel-commands.el.
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
(require 'mevedel-execution-panel-view)
(require 'mevedel-execution-panel-commands)

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

(defvar-local mevedel-execution-panel-session nil
  "The session this panel shows.")

(defvar-local mevedel-execution-panel-session-id nil
  "The id of the session this panel shows.")

(defvar-local mevedel-execution-panel-live-rows nil
  "Facts of the live executions shown, in the helper's order.")

(defvar-local mevedel-execution-panel-finished-rows nil
  "Facts of the finished executions shown, newest first.")

(defvar-local mevedel-execution-panel--seen nil
  "Hash table of the ids this panel showed live and saw no end of yet.")

(defvar-local mevedel-execution-panel-marked nil
  "Ids of the marked rows.")

(defvar-local mevedel-execution-panel-expanded nil
  "Ids of the executions whose inspector is open.")

(defvar-local mevedel-execution-panel-tails nil
  "Hash table: execution id to the inspector's output tail.
Each value is a plist (:bytes N :lines LIST :error STRING :pending BOOL).")

(defvar-local mevedel-execution-panel-gone nil
  "Non-nil once the helper behind the rows shown exited: its exit status.")

(defvar-local mevedel-execution-panel-closed nil
  "Non-nil once the session shown was closed.")

(defvar-local mevedel-execution-panel--listener nil
  "This panel's function on `mevedel-execution-event-functions'.")

(defvar-local mevedel-execution-panel--timer nil
  "The timer redrawing this panel's runtimes while it is on screen.")

(defvar-local mevedel-execution-panel--width nil
  "The window width the columns were last sized for.")

(defvar-local mevedel-execution-panel--stale nil
  "Non-nil while the rows hold facts newer than what is drawn.
Only sizes and such: see `mevedel-execution-panel--on-changed'.")

(defvar-local mevedel-execution-panel--later nil
  "The timer that draws a stale panel, or nil.")

(defconst mevedel-execution-panel-stale-seconds 1
  "How long a panel may show an output size older than the helper's.
The helper itself announces a size at most once a second.")

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
  (setq tabulated-list-format (mevedel-execution-panel-format 80))
  (setq tabulated-list-padding 2)
  (setq tabulated-list-sort-key nil)
  (setq tabulated-list-printer #'mevedel-execution-panel-print-entry)
  (setq mevedel-execution-panel-tails (make-hash-table :test #'equal))
  (setq mevedel-execution-panel--seen (make-hash-table :test #'equal))
  (setq-local revert-buffer-function #'mevedel-execution-panel--revert)
  (add-hook 'kill-buffer-hook #'mevedel-execution-panel--detach nil t)
  (add-hook 'change-major-mode-hook #'mevedel-execution-panel--detach nil t)
  (add-hook 'window-size-change-functions #'mevedel-execution-panel--on-resize nil t)
  (add-hook 'window-buffer-change-functions #'mevedel-execution-panel--on-shown nil t)
  (tabulated-list-init-header))

(defun mevedel-execution-panel--detach ()
  "Stop following the helper's events in this panel, and its timers."
  (when mevedel-execution-panel--listener
    (remove-hook 'mevedel-execution-event-functions mevedel-execution-panel--listener)
    (setq mevedel-execution-panel--listener nil))
  (mevedel-execution-panel--stop-timer)
  (mevedel-execution-panel--cancel-later))

(defun mevedel-execution-panel--cancel-later ()
  "Cancel the timer that would draw this stale panel."
  (when mevedel-execution-panel--later
    (cancel-timer mevedel-execution-panel--later)
    (setq mevedel-execution-panel--later nil)))

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
                  (unless mevedel-execution-panel-closed
                    (pcase type
                      ('changed (mevedel-execution-panel--on-changed plist))
                      ('settled (mevedel-execution-panel--on-settled plist))
                      ('exit (mevedel-execution-panel--on-exit plist))))))))
      (setq mevedel-execution-panel--listener listener)
      (mevedel-execution-add-reader listener))))

(defun mevedel-execution-panel--on-changed (plist)
  "Show the live set of the `exec/changed' payload PLIST, if it is ours.
A row that comes or goes, or whose state, label or inspector
changed, is drawn at once.  A change of only its output size or
runtime is drawn within `mevedel-execution-panel-stale-seconds':
with hundreds of live commands, that is one redraw a second, not
one per event."
  (when (equal (plist-get plist :session-id) mevedel-execution-panel-session-id)
    ;; Seen, though it ran and ended within one coalesced event.
    (dolist (facts (plist-get plist :changed))
      (puthash (mevedel-execution-panel-id facts) t mevedel-execution-panel--seen))
    (let ((live (mevedel-execution-panel--unfinished (plist-get plist :live))))
      (if (mevedel-execution-panel--draw-now-p (plist-get plist :changed) live)
          (mevedel-execution-panel-show live)
        (setq mevedel-execution-panel-live-rows live)
        (mevedel-execution-panel--draw-later)))))

(defconst mevedel-execution-panel--row-keys
  '(:execution-id :kind :monitor-id :owner :label :command :prompt :waiting-for-input
    :state :status :exit-code :signal :outcome :started-at)
  "The facts a row's cells show, but its runtime and output size.")

(defun mevedel-execution-panel--draw-now-p (changed live)
  "Return non-nil if the CHANGED facts, with LIVE after them, are drawn now.
That is unless each one is a live row that only grew (see
`mevedel-execution-panel--grew-only-p'), with its inspector closed.
A row that holds the very facts of the table, which growth changes
in place, needs no comparing; one that holds other facts (from a
listing) is compared."
  (let ((rows mevedel-execution-panel-live-rows))
    (or (/= (length live) (length rows))
        (and mevedel-execution-panel-expanded
             (cl-some (lambda (facts)
                        (member (mevedel-execution-panel-id facts) mevedel-execution-panel-expanded))
                      changed))
        ;; Called a few times a second with hundreds of rows: the
        ;; table's own facts, grown in place, are found by `memq' and
        ;; nothing is allocated; only other facts are compared.
        (let ((other (cl-remove-if (lambda (facts) (memq facts rows)) changed)))
          (and other
               (let ((by-id (make-hash-table :test #'equal :size (length rows))))
                 (dolist (f rows)
                   (puthash (mevedel-execution-panel-id f) f by-id))
                 (cl-some (lambda (facts)
                            (let ((old (gethash (mevedel-execution-panel-id facts) by-id)))
                              (or (null old)
                                  (not (mevedel-execution-panel--grew-only-p facts old)))))
                          other)))))))

(defun mevedel-execution-panel--grew-only-p (new old)
  "Return non-nil if the rows of facts NEW and OLD differ only by growth.
Only its runtime and output size may differ: the facts of
`mevedel-execution-panel--row-keys' are the same."
  (cl-every (lambda (key) (equal (plist-get new key) (plist-get old key)))
            mevedel-execution-panel--row-keys))

(defun mevedel-execution-panel--unfinished (live)
  "Return LIVE without the rows this panel has as finished already."
  (let ((finished (mapcar #'mevedel-execution-panel-id mevedel-execution-panel-finished-rows)))
    (if finished
        (cl-remove-if (lambda (f) (member (mevedel-execution-panel-id f) finished)) live)
      live)))

(defun mevedel-execution-panel--draw-later ()
  "Draw this panel within `mevedel-execution-panel-stale-seconds'.
Its runtime clock, when it runs, does it; else a timer.  Off screen,
neither: it is drawn when it comes on screen (see
`mevedel-execution-panel--on-shown')."
  (setq mevedel-execution-panel--stale t)
  (unless (or mevedel-execution-panel--timer mevedel-execution-panel--later
              (not (mevedel-execution-panel--visible-p)))
    (let ((buffer (current-buffer)))
      (setq mevedel-execution-panel--later
            (run-at-time mevedel-execution-panel-stale-seconds nil
                         #'mevedel-execution-panel--draw-stale buffer)))))

(defun mevedel-execution-panel--draw-stale (buffer)
  "Draw BUFFER's panel if it is stale."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq mevedel-execution-panel--later nil)
      ;; Gone off screen meanwhile, it stays stale until it comes back.
      (when (and mevedel-execution-panel--stale (not mevedel-execution-panel-closed)
                 (mevedel-execution-panel--visible-p))
        (mevedel-execution-panel--draw-growth)))))

(defun mevedel-execution-panel--draw-growth (&optional clock)
  "Show the growth and runtimes of the rows on screen, cell by cell.
CLOCK non-nil says only time passed: the mode line keeps the time
of the helper's last report."
  (setq mevedel-execution-panel--stale nil)
  (mevedel-execution-panel--cancel-later)
  (mevedel-execution-panel-update-cells)
  (unless clock
    (mevedel-execution-panel--mode-line)))

(defun mevedel-execution-panel--keep-p (facts)
  "Return non-nil if the finished execution of FACTS stays as a row.
What a person started, and what this panel showed running in the
background (yielded, or a monitor's), stays; what a person stopped
goes, as do quick foreground commands the agent has the result of."
  (let ((id (mevedel-execution-panel-id facts))
        (sid mevedel-execution-panel-session-id))
    (and (> mevedel-execution-panel-finished-limit 0)
         (not (mevedel-execution-stopped-by-person-p sid facts))
         (or (mevedel-execution-person-started-p sid id)
             (cl-find id (mevedel-execution-finished-work sid)
                      :key #'mevedel-execution-panel-id :test #'equal)
             (and (gethash id mevedel-execution-panel--seen)
                  (or (plist-get facts :yielded) (plist-get facts :monitor-id)))))))

(defun mevedel-execution-panel--on-settled (plist)
  "Keep the finished execution of the `exec/settled' payload PLIST as a row."
  (when (equal (plist-get plist :session-id) mevedel-execution-panel-session-id)
    (let* ((facts (plist-get plist :facts))
           (id (mevedel-execution-panel-id facts)))
      (when (mevedel-execution-panel--keep-p facts)
        (setq mevedel-execution-panel-finished-rows
              (cons facts (cl-remove id mevedel-execution-panel-finished-rows
                                     :key #'mevedel-execution-panel-id :test #'equal)))
        (let ((excess (nthcdr mevedel-execution-panel-finished-limit
                              mevedel-execution-panel-finished-rows)))
          (when excess
            (setq mevedel-execution-panel-finished-rows
                  (butlast mevedel-execution-panel-finished-rows (length excess))))))
      (remhash id mevedel-execution-panel--seen)
      (mevedel-execution-panel-show
       (cl-remove id mevedel-execution-panel-live-rows
                  :key #'mevedel-execution-panel-id :test #'equal)
       mevedel-execution-panel-gone))))

(defun mevedel-execution-panel--on-exit (plist)
  "Empty the panel's live rows if the helper whose exit PLIST reports drove it.
Nothing that helper ran is followed any more; rows that stayed
would claim it still is.  Finished rows stay: they are true."
  (let ((session mevedel-execution-panel-session))
    (when (or (null session)
              (eql (plist-get plist :generation)
                   (mevedel-execution-session-generation session)))
      (clrhash mevedel-execution-panel--seen)
      (mevedel-execution-panel-show nil (or (plist-get plist :status) t)))))

(defun mevedel-execution-panel--on-teardown (session owner)
  "Mark the panels of SESSION closed when it closes (OWNER nil).
SESSION nil means every session: Emacs is shutting the helper down."
  (unless owner
    (dolist (buffer (buffer-list))
      (with-current-buffer buffer
        (when (and (derived-mode-p 'mevedel-execution-panel-mode)
                   (or (null session) (eq session mevedel-execution-panel-session)
                       (equal (and session (mevedel-execution-session-id session))
                              mevedel-execution-panel-session-id)))
          (setq mevedel-execution-panel-closed t)
          (mevedel-execution-panel--detach)
          (setq mevedel-execution-panel-live-rows nil
                mevedel-execution-panel-marked nil
                mevedel-execution-panel-expanded nil)
          (mevedel-execution-panel-redraw))))))

(add-hook 'mevedel-execution-teardown-functions #'mevedel-execution-panel--on-teardown)

(defun mevedel-execution-panel-id (facts)
  "Return the execution id of FACTS."
  (plist-get facts :execution-id))

(defun mevedel-execution-panel-short-id (facts)
  "Return the Id cell of FACTS: the id's sequence number, the full id as its help.
Every row of a panel shares the rest (the session's part), which
the inspector (\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-inspect]) shows whole."
  (let ((id (or (plist-get facts :execution-id) "")))
    (propertize (if (string-match "-\\([0-9]+\\)\\'" id) (match-string 1 id) id)
                'help-echo id)))

(defun mevedel-execution-panel-facts (id)
  "Return the facts of the execution ID shown in this panel, live or finished."
  (or (cl-find id mevedel-execution-panel-live-rows
               :key #'mevedel-execution-panel-id :test #'equal)
      (cl-find id mevedel-execution-panel-finished-rows
               :key #'mevedel-execution-panel-id :test #'equal)))

(defun mevedel-execution-panel-live-p (id)
  "Return non-nil if ID is one of this panel's live rows."
  (cl-find id mevedel-execution-panel-live-rows
           :key #'mevedel-execution-panel-id :test #'equal))

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
           mevedel-execution-panel-live-rows
           (not mevedel-execution-panel-closed)
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
      (if (and (mevedel-execution-panel--visible-p) mevedel-execution-panel-live-rows)
          ;; Not while the person types in the minibuffer about a row,
          ;; or searches the panel.
          (unless (or (active-minibuffer-window) (bound-and-true-p isearch-mode))
            (mevedel-execution-panel--draw-growth (not mevedel-execution-panel--stale)))
        (mevedel-execution-panel--stop-timer)))))

;; Redisplay calls a buffer's own window change functions with the
;; selected window's buffer current, not the buffer of the window they
;; are about: a panel shown in another window is made current here.

(defun mevedel-execution-panel--on-shown (window)
  "Size the columns and start the clock when the panel comes on screen in WINDOW.
Its rows on screen show their growth since at once."
  (with-current-buffer (window-buffer window)
    (when (derived-mode-p 'mevedel-execution-panel-mode)
      (mevedel-execution-panel--update-timer)
      (if (eql mevedel-execution-panel--width (mevedel-execution-panel-window-width))
          (mevedel-execution-panel--draw-growth (not mevedel-execution-panel--stale))
        (mevedel-execution-panel-redraw)))))

(defun mevedel-execution-panel--on-resize (window)
  "Size the columns again when WINDOW, showing the panel, changed width."
  (with-current-buffer (window-buffer window)
    (when (and (derived-mode-p 'mevedel-execution-panel-mode)
               (not (eql mevedel-execution-panel--width
                         (mevedel-execution-panel-window-width))))
      (mevedel-execution-panel-redraw))))

(defun mevedel-execution-panel--hidden-check (_frame)
  "Stop the clock of panels that are in no window any more."
  (dolist (buffer (buffer-list))
    (when (buffer-local-value 'mevedel-execution-panel--timer buffer)
      (with-current-buffer buffer
        (mevedel-execution-panel--update-timer)))))

(add-hook 'window-buffer-change-functions #'mevedel-execution-panel--hidden-check)

;;;; Drawing, keeping point

(defun mevedel-execution-panel-row-start (id)
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
        (let ((start (mevedel-execution-panel-row-start id)))
          (list id
                (if start (count-lines start (line-beginning-position)) 0)
                (current-column)))))))

(defun mevedel-execution-panel--place (spot order)
  "Return the position of SPOT after a redraw.
ORDER is the list of ids before the redraw; when SPOT's execution
is gone, the row that followed it takes its place."
  (pcase-let ((`(,id ,line ,column) spot))
    (let* ((start (and id (mevedel-execution-panel-row-start id)))
           (next (and id (not start)
                      (cl-some #'mevedel-execution-panel-row-start
                               (cdr (member id order)))))
           (prev (and id (not start) (not next)
                      (cl-some #'mevedel-execution-panel-row-start
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

(defun mevedel-execution-panel-redraw (&optional clock)
  "Print the panel again, keeping point and every window's point on its row.
The columns are sized to the narrowest window showing the panel.
CLOCK non-nil says only time passed: the mode line keeps the time
of the helper's last report."
  (setq mevedel-execution-panel--stale nil)
  (mevedel-execution-panel--cancel-later)
  (let* ((order (mapcar #'car tabulated-list-entries))
         (here (mevedel-execution-panel--spot (point)))
         (windows (mapcar (lambda (w) (cons w (mevedel-execution-panel--spot (window-point w))))
                          (get-buffer-window-list (current-buffer) nil t)))
         (width (mevedel-execution-panel-window-width)))
    (unless (eql width mevedel-execution-panel--width)
      (setq mevedel-execution-panel--width width)
      (setq tabulated-list-format (mevedel-execution-panel-format width))
      (tabulated-list-init-header))
    (setq tabulated-list-entries
          (mapcar #'mevedel-execution-panel-entry
                  (append mevedel-execution-panel-live-rows mevedel-execution-panel-finished-rows)))
    (tabulated-list-print)
    (let ((note
           (cond
            (mevedel-execution-panel-closed
             (concat
              (format " Session %s is closed: nothing runs here any more.\n"
                      mevedel-execution-panel-session-id)
              " M-x mevedel-execution-open-session opens a session again.\n"))
            (mevedel-execution-panel-gone
             (concat
              (format " The mevedel-exec helper exited (status %s): nothing is followed here.\n"
                      mevedel-execution-panel-gone)
              (substitute-command-keys
               " \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-refresh] starts it again and shows what is live.\n")))
            ((null tabulated-list-entries)
             (concat " No background work.\n"
                     (substitute-command-keys
                      " \\<mevedel-execution-panel-mode-map>\\[mevedel-execution-shell-command] runs a command.\n")))
            ((and mevedel-execution-panel-finished-rows (null mevedel-execution-panel-live-rows))
             " Nothing runs now.\n"))))
      (when note
        (let ((inhibit-read-only t))
          (save-excursion
            (goto-char (point-max))
            (insert (propertize note 'face 'shadow)))
          (set-buffer-modified-p nil))))
    (unless clock
      (mevedel-execution-panel--mode-line))
    (goto-char (if here (mevedel-execution-panel--place here order) (point-min)))
    (dolist (w windows)
      (when (cdr w)
        (set-window-point (car w) (mevedel-execution-panel--place (cdr w) order))))
    (mevedel-execution-panel--update-timer)
    (mevedel-execution-panel-ensure-tails)))

(defun mevedel-execution-panel--mode-line ()
  "Say the session, its rows and the time of the helper's last report."
  (setq mode-line-process
        (format " %s: %d live%s, as of %s"
                (string-replace "%" "%%" mevedel-execution-panel-session-id)
                (length mevedel-execution-panel-live-rows)
                (if mevedel-execution-panel-finished-rows
                    (format ", %d finished" (length mevedel-execution-panel-finished-rows))
                  "")
                (format-time-string "%T"))))

(defun mevedel-execution-panel-show (live &optional gone)
  "Show LIVE, the facts of the session's live executions.
GONE non-nil, the helper's exit status, says its helper exited.
A row that starts waiting for input is also said in the echo area
\(through `mevedel-execution-event-functions')."
  (setq live (mevedel-execution-panel--unfinished live))
  (setq mevedel-execution-panel-live-rows live)
  (setq mevedel-execution-panel-gone gone)
  (dolist (f live)
    (puthash (mevedel-execution-panel-id f) t mevedel-execution-panel--seen))
  (let ((ids (mapcar #'mevedel-execution-panel-id
                     (append live mevedel-execution-panel-finished-rows))))
    (setq mevedel-execution-panel-expanded
          (cl-remove-if-not (lambda (id) (member id ids)) mevedel-execution-panel-expanded))
    (setq mevedel-execution-panel-marked
          (cl-remove-if-not (lambda (id) (member id ids)) mevedel-execution-panel-marked))
    (maphash (lambda (id _) (unless (member id ids) (remhash id mevedel-execution-panel-tails)))
             mevedel-execution-panel-tails))
  (mevedel-execution-panel-redraw))

(defun mevedel-execution-panel-note-facts (facts)
  "Show FACTS in place of the panel's facts of that execution, if fresher."
  (let* ((id (mevedel-execution-panel-id facts))
         (old (and id (mevedel-execution-panel-live-p id))))
    (when (and old (> (or (plist-get facts :version) 0) (or (plist-get old :version) 0)))
      (setq mevedel-execution-panel-live-rows
            (mapcar (lambda (f) (if (eq f old) facts f)) mevedel-execution-panel-live-rows))
      (mevedel-execution-panel-redraw))))

(defun mevedel-execution-panel--watching-p (session-id execution-id)
  "Return non-nil if EXECUTION-ID of SESSION-ID is live in a panel on screen.
For `mevedel-execution-watching-functions'."
  (cl-some (lambda (buffer)
             (with-current-buffer buffer
               (and (derived-mode-p 'mevedel-execution-panel-mode)
                    (equal mevedel-execution-panel-session-id session-id)
                    (get-buffer-window buffer t)
                    (or (gethash execution-id mevedel-execution-panel--seen)
                        (mevedel-execution-panel-live-p execution-id))
                    t)))
           (buffer-list)))

(add-hook 'mevedel-execution-watching-functions #'mevedel-execution-panel--watching-p)

(defun mevedel-execution-panel--after-restart ()
  "Show what is live in each open panel after the helper restarted."
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (when (and (derived-mode-p 'mevedel-execution-panel-mode)
                 (not mevedel-execution-panel-closed))
        (ignore-errors (mevedel-execution-panel-refresh))))))

(add-hook 'mevedel-execution-restart-hook #'mevedel-execution-panel--after-restart)

(defun mevedel-execution-panel-live-session ()
  "Return this panel's session, or the open session with its id."
  (when mevedel-execution-panel-closed
    (user-error "Session %s is closed; M-x mevedel-execution-open-session opens one"
                mevedel-execution-panel-session-id))
  (let ((session (mevedel-execution-resolve-session
                  mevedel-execution-panel-session mevedel-execution-panel-session-id)))
    (setq mevedel-execution-panel-session session)))

(defun mevedel-execution-panel--buffer (session)
  "Return the panel buffer of SESSION, creating it if needed."
  (let ((id (mevedel-execution-session-id session)))
    (or (cl-find-if (lambda (b)
                      (with-current-buffer b
                        (and (derived-mode-p 'mevedel-execution-panel-mode)
                             (equal mevedel-execution-panel-session-id id))))
                    (buffer-list))
        (let ((plain (get-buffer mevedel-execution-panel-buffer-name)))
          (get-buffer-create
           (if (and plain (buffer-local-value 'mevedel-execution-panel-session-id plain))
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
      (setq mevedel-execution-panel-session session)
      (setq mevedel-execution-buffer-session session)
      (setq mevedel-execution-panel-session-id (mevedel-execution-session-id session))
      (setq mevedel-execution-panel-closed nil)
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
  (let* ((session (mevedel-execution-panel-live-session))
         (sid (mevedel-execution-session-id session))
         ;; Events that came while it was answered may be newer.
         (live (mapcar (lambda (facts)
                         (let ((held (mevedel-execution-live-facts
                                      sid (mevedel-execution-panel-id facts))))
                           (if (and held (>= (or (plist-get held :version) 0)
                                             (or (plist-get facts :version) 0)))
                               held
                             facts)))
                       (mevedel-execution-list-user session))))
    (mevedel-execution-panel--adopt-finished (mevedel-execution-panel--history session))
    (mevedel-execution-panel-show live)))

(defconst mevedel-execution-panel--history-records 400
  "How many of the journal's latest records a panel reads for its history.
An execution leaves three or four, so the finished limit's worth.")

(defvar mevedel-execution-panel-dismissed-ids (make-hash-table :test #'equal)
  "Per session id, the ids of the finished rows a person dismissed here.
The journal still holds them: the history read again must not bring
them back.")

(defun mevedel-execution-panel--history-keep-p (facts)
  "Return non-nil if FACTS, final facts from the journal, make a row.
What a person ran and what ran in the background, as the panel keeps
them live; not what a person stopped, nor what was dismissed here."
  (let ((id (mevedel-execution-panel-id facts)))
    (and (not (member id (gethash mevedel-execution-panel-session-id
                                  mevedel-execution-panel-dismissed-ids)))
         (not (mevedel-execution-stopped-by-person-p mevedel-execution-panel-session-id facts))
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
  (let* ((all mevedel-execution-panel-finished-rows))
    (dolist (facts (append (mevedel-execution-finished-work mevedel-execution-panel-session-id)
                           history))
      (unless (cl-find (mevedel-execution-panel-id facts) all
                       :key #'mevedel-execution-panel-id :test #'equal)
        (push facts all)))
    (setq mevedel-execution-panel-finished-rows
          (seq-take (mevedel-execution-panel-sort-finished all)
                    mevedel-execution-panel-finished-limit))))

(defun mevedel-execution-panel--on-finished-work (session-id facts)
  "Show FACTS, a person's command of SESSION-ID that ended, in its open panels.
Those the panel kept as it settled are there already."
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (when (and (derived-mode-p 'mevedel-execution-panel-mode)
                 (equal mevedel-execution-panel-session-id session-id)
                 (not mevedel-execution-panel-closed)
                 (not (mevedel-execution-panel-facts (mevedel-execution-panel-id facts))))
        (mevedel-execution-panel--adopt-finished)
        (mevedel-execution-panel-show mevedel-execution-panel-live-rows
                                       mevedel-execution-panel-gone)))))

(add-hook 'mevedel-execution-finished-work-functions #'mevedel-execution-panel--on-finished-work)

(defun mevedel-execution-panel--revert (&rest _)
  "The `revert-buffer-function' of the panel: refresh it."
  (mevedel-execution-panel-refresh))

(provide 'mevedel-execution-panel)
;;; mevedel-execution-panel.el ends here

;;; mevedel-execution-panel-view.el --- The rows and the inspector of the mevedel-exec panel  -*- lexical-binding: t; -*-

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

;; How the panel draws a row: its columns, sized to the window, and
;; the local inspector that RET expands under it (its facts and the
;; last lines of its output, read by offset from the end of its log).
;; The panel's state and its drawing are in mevedel-execution-panel.el.

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

;; The panel's state and drawing, in mevedel-execution-panel.el, which
;; requires this file: they exist whenever these functions run.
(defvar mevedel-execution-panel-tails)
(defvar mevedel-execution-panel-expanded)
(defvar mevedel-execution-panel-marked)
(defvar mevedel-execution-panel-live-rows)
(declare-function mevedel-execution-panel-facts "mevedel-execution-panel" (id))
(declare-function mevedel-execution-panel-id "mevedel-execution-panel" (facts))
(declare-function mevedel-execution-panel-short-id "mevedel-execution-panel" (facts))
(declare-function mevedel-execution-panel-redraw "mevedel-execution-panel" (&optional clock))
(declare-function mevedel-execution-panel-live-session "mevedel-execution-panel" ())

(defcustom mevedel-execution-panel-inspector-lines 10
  "How many of the last output lines the inspector shows."
  :type 'natnum
  :group 'mevedel-execution)

(defcustom mevedel-execution-panel-inspector-bytes 4096
  "How many bytes from the end of a log the inspector reads at most."
  :type 'natnum
  :group 'mevedel-execution)

;;;; Columns

(defun mevedel-execution-panel--local-time (stamp)
  "Return the RFC 3339 STAMP as local date and time, or \"-\"."
  (let ((time (and (stringp stamp) (ignore-errors (parse-iso8601-time-string stamp)))))
    (if time (format-time-string "%F %T" time) "-")))

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

(defun mevedel-execution-panel-label (facts)
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
    (< (or (funcall key (mevedel-execution-panel-facts (car a))) -1)
       (or (funcall key (mevedel-execution-panel-facts (car b))) -1))))

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

(defun mevedel-execution-panel-window-width ()
  "Return the width of the narrowest window showing this panel, or 80."
  (let ((widths (mapcar #'window-body-width
                        (get-buffer-window-list (current-buffer) nil t))))
    (if widths (apply #'min widths) 80)))

(defun mevedel-execution-panel-format (width)
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
                                       #'mevedel-execution-runtime-seconds))
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

(defun mevedel-execution-panel-entry (facts)
  "Return the `tabulated-list-entries' element of FACTS."
  (let* ((finished (equal (plist-get facts :state) "settled"))
         (dim (lambda (text) (if finished
                                 (propertize text 'face 'mevedel-execution-panel-finished)
                               text)))
         (prompt (and (plist-get facts :waiting-for-input)
                      (mevedel-execution-transcript-one-line (or (plist-get facts :prompt) ""))))
         (label (mevedel-execution-panel-label facts)))
    (list (mevedel-execution-panel-id facts)
          (vector (funcall dim (mevedel-execution-panel-short-id facts))
                  (funcall dim (mevedel-execution-panel--kind facts))
                  (funcall dim (or (plist-get facts :owner) mevedel-execution-root-owner))
                  (if (and prompt (not (string-empty-p prompt)))
                      (concat label " "
                              (propertize prompt 'face 'mevedel-execution-panel-waiting))
                    (funcall dim label))
                  (mevedel-execution-panel--state facts)
                  (funcall dim (mevedel-execution-duration
                                (mevedel-execution-runtime-seconds facts)))
                  (funcall dim (mevedel-execution-panel--size (plist-get facts :output-bytes)))))))

(defun mevedel-execution-panel-sort-finished (facts-list)
  "Return FACTS-LIST, finished rows, newest end first.
Of two that ended in the same millisecond, the one started later is
first, then the later id, whatever order FACTS-LIST has."
  (cl-flet ((key (facts) (mapconcat (lambda (k) (or (plist-get facts k) ""))
                                    '(:ended-at :started-at :execution-id) " ")))
    (sort facts-list (lambda (a b) (string> (key a) (key b))))))

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
  (let* ((facts (mevedel-execution-panel-facts id))
         (bytes (or (plist-get facts :output-bytes) 0))
         (offset (max 0 (- bytes mevedel-execution-panel-inspector-bytes)))
         (old (gethash id mevedel-execution-panel-tails))
         (buffer (current-buffer)))
    (puthash id (plist-put (copy-sequence old) :pending t) mevedel-execution-panel-tails)
    ;; This runs from the helper's events too: report, never throw.
    (condition-case err
        (mevedel-execution-panel--read-tail
         (mevedel-execution-panel-live-session) buffer id facts offset)
      (error
       (puthash id (list :bytes bytes :error (error-message-string err))
                mevedel-execution-panel-tails)))))

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
                        mevedel-execution-panel-tails)
               (mevedel-execution-panel-redraw))))))
     :on-error
     (lambda (err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (puthash id (list :bytes (or (plist-get facts :output-bytes) 0)
                             :error (plist-get err :message))
                    mevedel-execution-panel-tails)
           (mevedel-execution-panel-redraw))))
     :timeout 30)))

(defun mevedel-execution-panel-ensure-tails ()
  "Start reading the tail of each open inspector whose log has grown."
  (dolist (id mevedel-execution-panel-expanded)
    (let ((tail (gethash id mevedel-execution-panel-tails))
          (bytes (or (plist-get (mevedel-execution-panel-facts id) :output-bytes) 0)))
      (unless (or (plist-get tail :pending)
                  (and tail (>= (or (plist-get tail :bytes) 0) bytes)))
        (mevedel-execution-panel--fetch-tail id)))))

(defun mevedel-execution-panel--inspector-text (facts)
  "Return the inspector lines of FACTS, ending with a newline."
  (let* ((id (mevedel-execution-panel-id facts))
         (tail (gethash id mevedel-execution-panel-tails))
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
                    (concat "runtime " (mevedel-execution-duration
                                        (mevedel-execution-runtime-seconds facts)))
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
                        (mapconcat #'mevedel-execution-panel-listener-text
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

(defun mevedel-execution-panel-listener-text (listening)
  "Return the LISTENING plist (:address :port :pid) as ADDRESS:PORT (pid N)."
  (let ((address (or (plist-get listening :address) "?"))
        (pid (plist-get listening :pid)))
    (format "%s:%s%s"
            (if (string-match-p ":" address) (format "[%s]" address) address)
            (plist-get listening :port)
            (if pid (format " (pid %s)" pid) ""))))

;;;; Growth, cell by cell

(defvar-local mevedel-execution-panel--cell-facts nil
  "The live rows' facts by id, for `mevedel-execution-panel-update-cells'.")

(defun mevedel-execution-panel-update-cells ()
  "Rewrite the Runtime and Output cells that changed, of live rows on screen.
With hundreds of rows, a second's growth and time cost the rows a
person sees, each cell rewritten in place, not a new listing; a
row scrolled into view is brought up to date by the next tick."
  (let ((facts (or mevedel-execution-panel--cell-facts
                   (setq mevedel-execution-panel--cell-facts (make-hash-table :test #'equal)))))
    ;; Filled anew each second, allocated once: the rows may have
    ;; changed, and the table keeps its size.
    (clrhash facts)
    (dolist (f mevedel-execution-panel-live-rows)
      (puthash (mevedel-execution-panel-id f) f facts))
    (with-silent-modifications
      (save-excursion
        (dolist (w (get-buffer-window-list (current-buffer) nil t))
          (goto-char (window-start w))
          (dotimes (_ (window-body-height w))
            (let* ((f (and (not (get-text-property (point) 'mevedel-execution-panel-inspector))
                           (gethash (get-text-property (point) 'tabulated-list-id) facts)))
                   (entry (and f (get-text-property (point) 'tabulated-list-entry))))
              (when entry
                (mevedel-execution-panel--set-cell
                 entry 5 (mevedel-execution-duration
                          (mevedel-execution-runtime-seconds f)))
                (mevedel-execution-panel--set-cell
                 entry 6 (mevedel-execution-panel--size (plist-get f :output-bytes)))))
            (forward-line 1)))))
    (clrhash facts)))

(defun mevedel-execution-panel--set-cell (entry column text)
  "Show TEXT in COLUMN of the row at point, whose cells are ENTRY, if it differs.
The Runtime and Output cells of the rows on screen change each
second: a TEXT as wide as the one shown takes its place and its
properties, its padding and alignment staying, instead of the cell
being printed anew (several times the allocation, for hundreds of
rows a minute)."
  (let ((old (aref entry column)))
    (unless (equal old text)
      (let* ((name (car (aref tabulated-list-format column)))
             (start (and (stringp old) (= (string-width old) (string-width text))
                         (mevedel-execution-panel--label-start name old)))
             (inhibit-read-only t))
        (if (not start)
            (tabulated-list-set-col column text t)
          (save-excursion
            (goto-char start)
            (insert text)
            (set-text-properties start (point) (text-properties-at (point)))
            (put-text-property start (point) 'help-echo (concat name ": " text))
            (delete-region (point) (+ (point) (length old))))
          (aset entry column text))))))

(defun mevedel-execution-panel--label-start (name label)
  "Return the start of LABEL, the text of column NAME, in the row at point.
Nil unless it is there as `tabulated-list-print-col' put it."
  (let ((pos (line-beginning-position))
        (eol (line-end-position))
        (found nil))
    (while (and (not found) (< pos eol))
      (let ((help (get-text-property pos 'help-echo)))
        (if (and help (equal (get-text-property pos 'tabulated-list-column-name) name))
            (setq found (and (stringp help) (string-suffix-p label help)
                             (= (next-single-property-change pos 'help-echo nil eol)
                                (+ pos (length label)))
                             pos)
                  pos eol)
          (setq pos (next-property-change pos nil eol)))))
    found))

;; A full draw of 200 rows (the panel opening, a row coming or going)
;; made about 2 MB of garbage, two or three collections, most of it the
;; cells of `tabulated-list-print-col', which copies each cell's text and
;; makes its padding's strings and display spec anew.  The rows are
;; printed alike, cell for cell and property for property (a test
;; compares the two), from shared padding specs and without the copies:
;; a quarter less.  The rest is mostly the text properties themselves.

(defvar tabulated-list--near-rows)       ; bound by `tabulated-list-print'

(defvar mevedel-execution-panel--align-specs (make-vector 256 nil)
  "The display specs (space :align-to N), by N, shared by every cell.")

(defun mevedel-execution-panel--align-to (n)
  "Return the display spec (space :align-to N)."
  (if (< -1 n (length mevedel-execution-panel--align-specs))
      (or (aref mevedel-execution-panel--align-specs n)
          (aset mevedel-execution-panel--align-specs n `(space :align-to ,n)))
    `(space :align-to ,n)))

(defun mevedel-execution-panel--print-cell (n label x)
  "Insert LABEL as column N at column X, as `tabulated-list-print-col' does.
Return the column after it."
  (let* ((format (aref tabulated-list-format n))
         (name (car format))
         (width (nth 1 format))
         (props (nthcdr 3 format))
         (pad-right (or (plist-get props :pad-right) 1))
         (right-align (plist-get props :right-align))
         (label-width (string-width label))
         (help-echo (concat name ": " label))
         (opoint (point))
         (not-last (< (1+ n) (length tabulated-list-format)))
         (available (and not-last (if right-align
                                      width
                                    (tabulated-list--available-space width n)))))
    (when (and not-last (> label-width available))
      (setq label (truncate-string-to-width label available nil nil t t)
            label-width available))
    (setq label (bidi-string-mark-left-to-right label))
    (when (and right-align (> width label-width))
      (let ((shift (- width label-width)))
        (insert-char ?\s shift)
        (put-text-property (- (point) shift) (point)
                           'display (mevedel-execution-panel--align-to (+ x shift)))
        (setq width (- width shift)
              x (+ x shift))))
    (let ((start (point)))
      (insert label)
      (unless (get-text-property 0 'help-echo label)
        (put-text-property start (point) 'help-echo help-echo)))
    (let ((next-x (+ x pad-right width)))
      (when not-last
        (when (> pad-right 0) (insert-char ?\s pad-right))
        (let ((start (point)))
          (insert-char ?\s (- width (min width label-width)))
          (put-text-property start (point)
                             'display (mevedel-execution-panel--align-to next-x))))
      (put-text-property opoint (point) 'tabulated-list-column-name name)
      next-x)))

(defun mevedel-execution-panel--print-row (id cols)
  "Insert the row ID with COLS, as `tabulated-list-print-entry' does.
An Emacs whose `tabulated-list' lays cells out otherwise prints them."
  (if (not (fboundp 'tabulated-list--available-space))
      (tabulated-list-print-entry id cols)
    (mevedel-execution-panel--print-cells id cols)))

(defun mevedel-execution-panel--print-cells (id cols)
  "Insert the row ID with COLS, cell by cell."
  (let ((beg (point))
        (x (max tabulated-list-padding 0))
        (inhibit-read-only t))
    (when (> tabulated-list-padding 0)
      (insert-char ?\s x))
    (let ((tabulated-list--near-rows
           (or (bound-and-true-p tabulated-list--near-rows)
               (list (or (tabulated-list-get-entry (line-beginning-position 0)) cols) cols))))
      (dotimes (n (length tabulated-list-format))
        (let ((col (aref cols n)))
          (setq x (if (stringp col)
                      (mevedel-execution-panel--print-cell n col x)
                    (tabulated-list-print-col n col x))))))
    (insert ?\n)
    (add-text-properties beg (point) (list 'tabulated-list-id id 'tabulated-list-entry cols))))

(defun mevedel-execution-panel-print-entry (id cols)
  "Insert the row ID with COLS, and its inspector when it is open.
A marked row starts with a star."
  (let ((start (point)))
    (mevedel-execution-panel--print-row id cols)
    (when (member id mevedel-execution-panel-marked)
      (save-excursion
        (goto-char start)
        (delete-char 1)
        (insert (propertize "*" 'tabulated-list-id id 'face 'bold)))))
  (when (member id mevedel-execution-panel-expanded)
    (let ((facts (mevedel-execution-panel-facts id)))
      (when facts
        (insert (propertize (mevedel-execution-panel--inspector-text facts)
                            'tabulated-list-id id
                            'mevedel-execution-panel-inspector id))))))

(provide 'mevedel-execution-panel-view)
;;; mevedel-execution-panel-view.el ends here

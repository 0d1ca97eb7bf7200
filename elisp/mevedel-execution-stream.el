;;; mevedel-execution-stream.el --- A followed execution's output as it comes  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; An execution followed with output (`exec/follow' or `exec/start'
;; with `:output' / `:follow') has its new output sent by the helper in
;; `exec/output': LENGTH bytes of its log from OFFSET, as TEXT.  An
;; output buffer appends it without a `spool/read' round trip.  The
;; notification is handled inside the process filter, so the
;; redisplay that follows the helper's output draws it.
;;
;; Chunks are an optimization, never the only way: each says where in
;; the log it starts, so a view takes a chunk only where it goes on
;; from its end, and reads the log (as the facts' output size says)
;; when a chunk is missing, too large or came first to nobody.

;;; Code:

(require 'compile)
(require 'mevedel-execution-connection)

(defvar mevedel-execution-stream--sinks (make-hash-table :test #'equal)
  "Per (SESSION-ID . EXECUTION-ID), the functions given its output chunks.")

(defvar mevedel-execution-stream--early (make-hash-table :test #'equal)
  "Per (SESSION-ID . EXECUTION-ID), output that came before any sink.
As (OFFSET LENGTH TEXT): the start of a command can be answered and
print before its buffer exists.")

(defconst mevedel-execution-stream--early-limit 16
  "How many executions' early output is kept at most.")

(defconst mevedel-execution-stream--early-bytes (* 256 1024)
  "The most early output kept per execution.")

(defun mevedel-execution-follow-output (session-id execution-id function &optional remove)
  "Call FUNCTION with each output chunk of EXECUTION-ID in SESSION-ID.
FUNCTION gets OFFSET, LENGTH and TEXT: LENGTH bytes of the log from
byte OFFSET.  It runs inside the helper's process filter, so it may
not wait for the helper.  With REMOVE, stop.  The execution must be
followed with output (`exec/follow' with `:output') for chunks to
come."
  (let* ((key (cons session-id execution-id))
         (fns (delq function (gethash key mevedel-execution-stream--sinks))))
    (unless remove (push function fns))
    (if fns
        (puthash key fns mevedel-execution-stream--sinks)
      (remhash key mevedel-execution-stream--sinks))))

(defun mevedel-execution-follow-facts-and-output (follower &optional remove)
  "Give FOLLOWER's functions an execution's facts and output; REMOVE: stop.
FOLLOWER is (SESSION-ID EXECUTION-ID FACTS-FN OUTPUT-FN), for
`mevedel-execution-follow-facts' and `mevedel-execution-follow-output'."
  (pcase-let ((`(,sid ,id ,facts-fn ,output-fn) follower))
    (mevedel-execution-follow-facts sid id facts-fn remove)
    (mevedel-execution-follow-output sid id output-fn remove)))

(defun mevedel-execution-take-early-output (session-id execution-id)
  "Return and forget what EXECUTION-ID of SESSION-ID printed before any sink.
As (OFFSET LENGTH TEXT), or nil."
  (let* ((key (cons session-id execution-id))
         (early (gethash key mevedel-execution-stream--early)))
    (remhash key mevedel-execution-stream--early)
    early))

(defun mevedel-execution-stream--keep-early (key offset length text)
  "Keep the chunk of KEY, LENGTH bytes from OFFSET as TEXT, for a later sink."
  (pcase-let ((`(,o ,l ,tx) (gethash key mevedel-execution-stream--early)))
    (when (and (null o) (>= (hash-table-count mevedel-execution-stream--early)
                            mevedel-execution-stream--early-limit))
      (clrhash mevedel-execution-stream--early))
    (cond
     ((and o (= (+ o l) offset)
           (<= (+ l length) mevedel-execution-stream--early-bytes))
      (puthash key (list o (+ l length) (concat tx text)) mevedel-execution-stream--early))
     ((<= length mevedel-execution-stream--early-bytes)
      (puthash key (list offset length text) mevedel-execution-stream--early)))))

(defun mevedel-execution-stream--receive (_conn params)
  "Hand the `exec/output' PARAMS (wire keys) to the sinks of its execution."
  (let ((sid (plist-get params :sessionId))
        (id (plist-get params :executionId))
        (offset (plist-get params :offset))
        (length (plist-get params :length))
        (text (plist-get params :text)))
    (when (and (stringp sid) (stringp id) (natnump offset) (natnump length) (stringp text))
      (let* ((key (cons sid id))
             (fns (gethash key mevedel-execution-stream--sinks)))
        (if (null fns)
            (mevedel-execution-stream--keep-early key offset length text)
          (dolist (fn fns)
            (condition-case-unless-debug err
                (funcall fn offset length text)
              (error (message "mevedel-exec: error in an output sink: %s"
                              (error-message-string err))))))))))

(setf (alist-get 'exec/output mevedel-execution-at-once-notifications)
      #'mevedel-execution-stream--receive)

(cl-defmethod mevedel-execution-handle-notification (conn (_method (eql 'exec/output)) params)
  "Hand the output chunk PARAMS from CONN to its sinks.
It is handled inside the process filter as it comes, not here."
  (mevedel-execution-stream--receive conn params))

(defun mevedel-execution-drop-bytes (text n)
  "Return TEXT without its first N bytes of UTF-8, or nil.
Nil when those bytes do not end at a character of TEXT, or when TEXT
shows invalid bytes (U+FFFD), whose length in the log is unknown."
  (cond
   ((= (length text) (string-bytes text)) (substring text n))
   ((string-search "\ufffd" text) nil)
   (t (let ((bytes (encode-coding-string text 'utf-8 t)))
        (when (or (= n (length bytes))
                  (/= (logand (aref bytes n) #xC0) #x80))
          (decode-coding-string (substring bytes n) 'utf-8 t))))))

(defun mevedel-execution-whole-output-p (output facts)
  "Return non-nil if OUTPUT is its execution's log from byte 0, byte for byte.
OUTPUT is the first observation's, FACTS the facts it came with.
Nothing may be omitted, and no U+FFFD may stand for an invalid byte:
its length in the log would not be its length here."
  (and (stringp output)
       (eql (or (plist-get facts :omitted-bytes) 0) 0)
       (not (string-search "\ufffd" output))
       (<= (string-bytes output) (or (plist-get facts :output-bytes) 0))))

(defvar-local mevedel-execution-stream--parse-batch nil
  "Output held from error parsing: (TIME START . TIMER), or nil.
TIME is when parsing was last let through; START a marker at the
first text held since; TIMER lets it through.")

(defun mevedel-execution-stream-hold-parse (start)
  "Let the text from START be parsed for errors at most every 0.25 s.
Each parse of `compilation-mode' costs about as much for a line as for
a page, and redisplay would parse each chunk as it comes: text that
follows a parse within 0.25 s is marked fontified (its colours show
anyway) and handed back to jit-lock at the end of that time, in one."
  (let ((now (float-time))
        (batch mevedel-execution-stream--parse-batch))
    (cond
     ((null batch)
      (setq mevedel-execution-stream--parse-batch (list now)))
     ((cddr batch))                    ; held already, the timer is set
     ((>= (- now (car batch)) 0.25) (setcar batch now))
     (t
      (let ((buffer (current-buffer)))
        (setcdr batch
                (cons (copy-marker start)
                      (run-at-time
                       (- 0.25 (- now (car batch))) nil
                       (lambda ()
                         (when (buffer-live-p buffer)
                           (with-current-buffer buffer
                             (pcase-let ((`(,_ ,from . ,_) mevedel-execution-stream--parse-batch))
                               (setq mevedel-execution-stream--parse-batch (list (float-time)))
                               (with-silent-modifications
                                 (put-text-property (min from (point-max)) (point-max)
                                                    'fontified nil))
                               (set-marker from nil))))))))))))
  (when (cddr mevedel-execution-stream--parse-batch)
    (with-silent-modifications
      (put-text-property start (point-max) 'fontified t))))

;; With `omake' among the rules (as by default), `compilation-parse-errors'
;; makes each rule's regexp anew, two strings a rule, on every parse:
;; half of what a parse allocates, and fresh regexps miss Emacs's cache
;; of compiled ones.  Output buffers parse with the same rules made once
;; (each pattern as that parse would make it, `omake' itself anonymous so
;; the patterns are not made again): the same errors, found alike.
;;
;; Even made once, the sixty-odd rules do not fit that cache of twenty:
;; each parse compiled every one again, and the copies the cache keeps
;; were most of what a parse allocated.  So a parse first
;; looks for all of them at once, in one regexp that stays compiled;
;; where it finds none, only the rules it cannot hold are tried (a rule
;; with a back reference, whose group number the union would change).

(defvar mevedel-execution-stream--rules nil
  "The error rules last prepared: [RULES ALIST RULES* ALIST* ANY ALWAYS].
RULES and ALIST are the `compilation-error-regexp-alist' and
`compilation-error-regexp-alist-alist' they were prepared from,
RULES* and ALIST* what a parse uses instead.  ANY is one regexp that
matches wherever one of RULES* but those of ALWAYS does, or nil;
ALWAYS the rules it does not hold, which every parse tries.")

(defun mevedel-execution-stream--back-reference-p (regexp)
  "Return non-nil if REGEXP may hold a back reference (\\N).
A backslash and a digit inside brackets count too: a rule is only
ever kept out of the union for it."
  (let ((i 0) (n (length regexp)) found)
    (while (and (not found) (< (1+ i) n))
      (if (/= (aref regexp i) ?\\)
          (setq i (1+ i))
        (setq found (<= ?1 (aref regexp (1+ i)) ?9)
              i (+ i 2))))
    found))

(defun mevedel-execution-stream--union (rules alist)
  "Return (ANY . ALWAYS) for RULES, of ALIST.
See `mevedel-execution-stream--rules'."
  (let (patterns always)
    (dolist (rule rules)
      (let ((pat (car (if (symbolp rule) (cdr (assq rule alist)) rule))))
        (if (and (stringp pat) (not (mevedel-execution-stream--back-reference-p pat)))
            (push (concat "\\(?:" pat "\\)") patterns)
          (push rule always))))
    (let ((any (and patterns (mapconcat #'identity (nreverse patterns) "\\|"))))
      ;; One that Emacs cannot compile (too big) is no shortcut.
      (if (and any (condition-case nil (progn (string-match-p any "") t) (error nil)))
          (cons any (nreverse always))
        (cons nil rules)))))

(defun mevedel-execution-stream--prepared-rules ()
  "Return the error rules in force, prepared.
See `mevedel-execution-stream--rules'."
  (let ((rules compilation-error-regexp-alist)
        (alist compilation-error-regexp-alist-alist)
        (made mevedel-execution-stream--rules))
    (if (and made (eq (aref made 0) rules) (eq (aref made 1) alist))
        made
      (let* ((omake (memq 'omake rules))
             (pattern (lambda (item)
                        (let ((pat (car item)))
                          ;; As `compilation-parse-errors' makes it.
                          (if (and omake (not (string-match-p "\\`\\([^^]\\|\\^\\( \\*\\|\\[\\)\\)" pat)))
                              (cons (concat "^\\(?:      \\)?" (substring pat 1)) (cdr item))
                            item))))
             (alist* (mapcar (lambda (entry) (cons (car entry) (funcall pattern (cdr entry))))
                             alist))
             (rules* (mapcar (lambda (rule)
                               (cond ((eq rule 'omake) (funcall pattern (cdr (assq 'omake alist))))
                                     ((symbolp rule) rule)
                                     (t (funcall pattern rule))))
                             rules))
             (union (mevedel-execution-stream--union rules* alist*)))
        (setq mevedel-execution-stream--rules
              (vector rules alist rules* alist* (car union) (cdr union)))))))

(defun mevedel-execution-stream--any-error-p (any limit)
  "Return non-nil if ANY matches in the text a parse up to LIMIT would read.
That text is found as `compilation--ensure-parse' finds it: from the
line where the last parse ended, and the lines of a message it
began, to the line after LIMIT."
  (save-excursion
    (goto-char limit)
    (let ((end (line-beginning-position 2)))
      ;; Parsed that far already (text before the end refontified):
      ;; that parse reads nothing.
      (unless (and (markerp compilation--parsed) (>= compilation--parsed end))
        (goto-char (if (markerp compilation--parsed)
                       (max compilation--parsed (point-min))
                     (point-min)))
        (forward-line 0)
        (while (and (not (bobp)) (get-text-property (1- (point)) 'compilation-multiline))
          (forward-line -1))
        (let ((case-fold-search compilation-error-case-fold-search))
          (re-search-forward any end t))))))

(defun mevedel-execution-stream--ensure-parse (limit)
  "Parse the output for errors up to LIMIT, as `compilation-mode' would.
A font-lock keyword of output buffers, in place of
`compilation--ensure-parse': see `mevedel-execution-stream--rules'."
  (let* ((prepared (mevedel-execution-stream--prepared-rules))
         (any (aref prepared 4))
         (compilation-error-regexp-alist
          (if (and any (not (mevedel-execution-stream--any-error-p any limit)))
              (aref prepared 5)
            (aref prepared 2)))
         (compilation-error-regexp-alist-alist (aref prepared 3)))
    (compilation--ensure-parse limit)))

(defun mevedel-execution-stream-font-lock-keywords ()
  "Return the font-lock keywords of output buffers.
Those of `compilation-mode', parsing with prepared rules."
  (cons '(mevedel-execution-stream--ensure-parse)
        (remove '(compilation--ensure-parse) (compilation-mode-font-lock-keywords))))

(provide 'mevedel-execution-stream)
;;; mevedel-execution-stream.el ends here

;;; mevedel-execution-spool.el --- Read and search mevedel-exec output logs  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; Author: The mevedel-exec developers
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: processes, tools
;; URL: https://github.com/mevedel/mevedel-exec

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Every execution's whole output stays addressable as
;; artifact://executions/<id>.log, whether the helper keeps it raw or has
;; compressed it.  These functions read, search, list and describe those
;; logs through the helper's logical views, with the same authority as
;; executions: under an owner's authority only its own logs, with
;; `:as-user' all of them.  `mevedel-execution-spool-open-output' shows an
;; execution's full output in a read-only buffer, a page at a time.

;;; Code:

(require 'mevedel-execution)

(defgroup mevedel-execution-spool nil
  "Reading the output logs of mevedel-exec."
  :group 'mevedel-execution
  :prefix "mevedel-execution-spool-")

(defcustom mevedel-execution-spool-page-bytes (* 256 1024)
  "How many bytes of a log one page of an output buffer shows."
  :type 'natnum)

(defun mevedel-execution-spool--authority (owner as-user)
  "Authority parameters for OWNER, or the user's when AS-USER."
  (if as-user (list :as "user") (list :owner (or owner mevedel-execution-root-owner))))

(defun mevedel-execution-spool-address (execution-id)
  "Return the output address of EXECUTION-ID."
  (format "artifact://executions/%s.log" execution-id))

(cl-defun mevedel-execution-spool-read (session address &key owner as-user offset length line lines)
  "Read the log at ADDRESS in SESSION.
Either a byte range, OFFSET (default 0) and LENGTH (at most 1 MiB),
or with LINE (1-based) a range of LINES lines.  Return a plist
\(:text :offset :length :total-bytes :eof).  OWNER or AS-USER
choose the authority."
  (mevedel-execution-request
   session 'spool/read
   (append (list :address address :offset offset :length length :line line :lines lines)
           (mevedel-execution-spool--authority owner as-user))
   30))

(cl-defun mevedel-execution-spool-grep (session pattern &key owner as-user glob addresses max-matches context)
  "Search logs in SESSION for the RE2 PATTERN, line by line.
GLOB (default \"executions/*.log\") or ADDRESSES say which logs.
At most MAX-MATCHES matches (200 by default), with CONTEXT lines
around each.  Return a plist (:matches (...) :truncated BOOL); each
match is (:address :line :text), context lines add :context t."
  (mevedel-execution-request
   session 'spool/grep
   (append (list :pattern pattern :glob glob
                 :addresses (and addresses (vconcat addresses))
                 :max-matches max-matches :context context)
           (mevedel-execution-spool--authority owner as-user))
   120))

(cl-defun mevedel-execution-spool-glob (session &key pattern owner as-user)
  "Return the addresses of SESSION's logs matching PATTERN.
PATTERN is a logical glob, \"executions/*.log\" by default."
  (plist-get (mevedel-execution-request
              session 'spool/glob
              (append (list :pattern pattern)
                      (mevedel-execution-spool--authority owner as-user)))
             :addresses))

(cl-defun mevedel-execution-spool-stat (session address &key owner as-user)
  "Describe the log at ADDRESS in SESSION.
Return (:address :logical-bytes :physical :physical-bytes :retired)."
  (mevedel-execution-request
   session 'spool/stat
   (append (list :address address) (mevedel-execution-spool--authority owner as-user))))

;;;; Output buffers

(defvar-local mevedel-execution-spool--source nil
  "What the current output buffer shows: (SESSION ADDRESS OFFSET TOTAL).")

(defvar mevedel-execution-spool-output-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "n") #'mevedel-execution-spool-next-page)
    (define-key map (kbd "p") #'mevedel-execution-spool-previous-page)
    (define-key map (kbd "<") #'mevedel-execution-spool-first-page)
    (define-key map (kbd ">") #'mevedel-execution-spool-last-page)
    (define-key map (kbd "g") #'mevedel-execution-spool-revert)
    map)
  "Keys of `mevedel-execution-spool-output-mode'.")

(define-derived-mode mevedel-execution-spool-output-mode special-mode "Exec-Output"
  "Read-only view of an execution's output, one page at a time.
\\{mevedel-execution-spool-output-mode-map}"
  (setq-local truncate-lines nil))

(defun mevedel-execution-spool--show (session address offset)
  "Show the page of ADDRESS in SESSION that starts at byte OFFSET."
  (let* ((res (mevedel-execution-spool-read session address :as-user t
                                            :offset (max 0 offset)
                                            :length mevedel-execution-spool-page-bytes))
         (total (plist-get res :total-bytes))
         (start (plist-get res :offset))
         (inhibit-read-only t))
    (erase-buffer)
    (insert (plist-get res :text))
    (goto-char (point-min))
    (setq mevedel-execution-spool--source
          (list session address start total (plist-get res :length)))
    (setq header-line-format
          (format " %s  bytes %d-%d of %d  [n]ext [p]revious [<] first [>] last"
                  address start (+ start (plist-get res :length)) total))))

(defun mevedel-execution-spool--page (fn)
  "Move to the page FN computes from (OFFSET TOTAL LENGTH)."
  (pcase-let ((`(,session ,address ,offset ,total ,length) mevedel-execution-spool--source))
    (unless session (user-error "Not an output buffer"))
    (mevedel-execution-spool--show session address (funcall fn offset total length))))

(defun mevedel-execution-spool-next-page ()
  "Show the next page of the output."
  (interactive)
  (mevedel-execution-spool--page
   (lambda (offset total length)
     (if (>= (+ offset length) total) (user-error "Last page") (+ offset length)))))

(defun mevedel-execution-spool-previous-page ()
  "Show the previous page of the output."
  (interactive)
  (mevedel-execution-spool--page
   (lambda (offset _total _length)
     (if (<= offset 0) (user-error "First page")
       (max 0 (- offset mevedel-execution-spool-page-bytes))))))

(defun mevedel-execution-spool-first-page ()
  "Show the first page of the output."
  (interactive)
  (mevedel-execution-spool--page (lambda (&rest _) 0)))

(defun mevedel-execution-spool-last-page ()
  "Show the last page of the output."
  (interactive)
  (mevedel-execution-spool--page
   (lambda (_offset total _length) (max 0 (- total mevedel-execution-spool-page-bytes)))))

(defun mevedel-execution-spool-revert ()
  "Show the current page again, as it is now."
  (interactive)
  (mevedel-execution-spool--page (lambda (offset &rest _) offset)))

;;;###autoload
(defun mevedel-execution-spool-open-output (session execution-id &optional from-end)
  "Show the full output of EXECUTION-ID in SESSION in a read-only buffer.
The buffer holds one page (`mevedel-execution-spool-page-bytes') at a
time, never the whole log; FROM-END starts at the last page.  Return
the buffer."
  (interactive
   (let ((session (or (car (mevedel-execution-sessions)) (user-error "No open session"))))
     (list session
           (completing-read "Execution: "
                            (mapcar (lambda (a) (file-name-base a))
                                    (mevedel-execution-spool-glob session :as-user t)))
           current-prefix-arg)))
  (let* ((address (mevedel-execution-spool-address execution-id))
         (buffer (get-buffer-create (format "*mevedel-exec output %s*" execution-id))))
    (with-current-buffer buffer
      (mevedel-execution-spool-output-mode)
      (mevedel-execution-spool--show session address 0)
      (when from-end (mevedel-execution-spool-last-page)))
    (when (called-interactively-p 'interactive)
      (pop-to-buffer buffer))
    buffer))

(provide 'mevedel-execution-spool)
;;; mevedel-execution-spool.el ends here

;;; mevedel-execution-logs.el --- Read, search and list mevedel-exec output logs  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; The requests on execution logs (artifact://executions/<id>.log),
;; raw or compressed alike, through the helper's logical views and
;; with the authority of executions: under an owner's only its own
;; logs, with `:as-user' all of them.  `mevedel-execution-spool' shows
;; them in output buffers.

;;; Code:

(require 'mevedel-execution-session)

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
match is (:address :line :text), context lines add :context t.
OWNER or AS-USER choose the authority."
  (mevedel-execution-request
   session 'spool/grep
   (append (list :pattern pattern :glob glob
                 :addresses (and addresses (vconcat addresses))
                 :max-matches max-matches :context context)
           (mevedel-execution-spool--authority owner as-user))
   120))

(cl-defun mevedel-execution-spool-glob (session &key pattern owner as-user)
  "Return the addresses of SESSION's logs matching PATTERN.
PATTERN is a logical glob, \"executions/*.log\" by default.  OWNER
or AS-USER choose the authority."
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

(provide 'mevedel-execution-logs)
;;; mevedel-execution-logs.el ends here

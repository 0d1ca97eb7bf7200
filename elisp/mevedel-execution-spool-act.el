;;; mevedel-execution-spool-act.el --- Acting on the command an output buffer shows  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; The keys of `mevedel-execution-spool-output-mode' that act on the
;; command shown: stop it, interrupt it, type a line into it.

;;; Code:

(require 'mevedel-execution-spool)

(defun mevedel-execution-spool-act--session-and-id ()
  "Return (SESSION . ID) of this output buffer, or signal a `user-error'."
  (let ((session (car (mevedel-execution-spool-shown))))
    (unless session
      (user-error "Not an output buffer"))
    (unless (mevedel-execution-session-open-p session)
      (user-error "Session %s is closed" (mevedel-execution-session-id session)))
    (cons session (nth 1 (mevedel-execution-spool-shown)))))

(defun mevedel-execution-spool-act--facts ()
  "Return the latest known facts of this output buffer's execution."
  (nth 2 (mevedel-execution-spool-shown)))

(defun mevedel-execution-spool-stop ()
  "Stop the command whose output is in this buffer.
SIGTERM to its process group and every descendant, SIGKILL after the
grace period; the header line says when it ended.  A stop is not
announced: you know."
  (interactive)
  (pcase-let ((`(,session . ,id) (mevedel-execution-spool-act--session-and-id))
              (name (mevedel-execution-describe (mevedel-execution-spool-act--facts))))
    (mevedel-execution-note-person-stop (mevedel-execution-session-id session) id)
    (mevedel-execution-stop-user
     session id
     (lambda (obs)
       (let ((err (plist-get obs :error)))
         (message "mevedel-exec: %s"
                  (if err (format "stopping \"%s\": %s" name (plist-get err :message))
                    (format "\"%s\" %s" name
                            (or (plist-get (plist-get obs :facts) :status) "stopped")))))))
    (message "mevedel-exec: stopping \"%s\"..." name)))

(defun mevedel-execution-spool-interrupt ()
  "Send Ctrl-C to the command whose output is in this buffer.
On its terminal if it has one, else SIGINT to its process group; a
command that handles it goes on."
  (interactive)
  (pcase-let ((`(,session . ,id) (mevedel-execution-spool-act--session-and-id)))
    (mevedel-execution-request-async
     session 'exec/interrupt (list :as "user" :execution-id id)
     :on-error (lambda (err) (message "mevedel-exec: interrupting: %s" (plist-get err :message)))
     :timeout mevedel-execution-request-timeout)))

(defun mevedel-execution-spool-send-input (line)
  "Type LINE and a newline into the command shown (it needs a terminal).
Only a command started with a terminal takes input (\\[universal-argument] before
`mevedel-execution-shell-command'); one without has its input at
end of file, and only Ctrl-C reaches it."
  (interactive
   (progn
     (mevedel-execution-spool-act--session-and-id)
     (unless (plist-get (mevedel-execution-spool-act--facts) :tty)
       (user-error "This command has no terminal; only Ctrl-C reaches it"))
     (list (read-string (format "Input to \"%s\": "
                                (mevedel-execution-describe (mevedel-execution-spool-act--facts)))))))
  (pcase-let ((`(,session . ,id) (mevedel-execution-spool-act--session-and-id)))
    (mevedel-execution-write-user
     session id (concat line "\n")
     (lambda (obs)
       (let ((err (plist-get obs :error)))
         (when err (message "mevedel-exec: input not sent: %s" (plist-get err :message))))))))

(provide 'mevedel-execution-spool-act)
;;; mevedel-execution-spool-act.el ends here

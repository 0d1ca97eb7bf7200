;;; mevedel-execution-daemon.el --- The link to the mevedel-exec helper daemon  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; With `mevedel-execution-connection' set to `daemon', the helper is
;; the per-user daemon: work outlives Emacs.  This file checks the
;; daemon's version against this Emacs's helper, reconnects a lost
;; connection and reattaches the open sessions, and restarts the daemon
;; on request.

;;; Code:

(require 'jsonrpc)
(require 'mevedel-execution-session)

(defvar mevedel-execution--daemon-mismatch nil
  "(DAEMON-VERSION . PROGRAM-VERSION) when the daemon is not this Emacs's helper.")

(defun mevedel-execution-daemon-check-version (program info)
  "Say so when the daemon of INFO is another version than PROGRAM.
Interactively, offer to restart it when nothing runs in it."
  (let ((ours (mevedel-execution-program-version program))
        (theirs (plist-get info :server-version)))
    (setq mevedel-execution--daemon-mismatch
          (and ours theirs (not (equal ours theirs)) (cons theirs ours)))
    (when mevedel-execution--daemon-mismatch
      (message "mevedel-exec: the helper daemon runs version %s, this Emacs's helper is %s; M-x mevedel-execution-restart-daemon restarts it once nothing runs in it"
               theirs ours)
      (unless noninteractive
        (run-at-time 0 nil #'mevedel-execution--offer-daemon-restart)))))

(defun mevedel-execution-daemon-live-count (conn)
  "Return how many executions run in CONN's daemon, all sessions together."
  (let ((status (mevedel-execution-call conn 'daemon/status nil)))
    (apply #'+ 0 (mapcar (lambda (s) (or (plist-get s :live) 0))
                         (plist-get status :sessions)))))

(defun mevedel-execution--offer-daemon-restart ()
  "Offer to restart a daemon of another version while nothing is running in it."
  (let ((conn (mevedel-execution-current-connection)))
    (when (and mevedel-execution--daemon-mismatch conn (jsonrpc-running-p conn)
               (zerop (condition-case nil (mevedel-execution-daemon-live-count conn) (error 1)))
               (y-or-n-p (format "The helper daemon runs version %s, this Emacs's helper is %s; nothing runs in it.  Restart it? "
                                 (car mevedel-execution--daemon-mismatch)
                                 (cdr mevedel-execution--daemon-mismatch))))
      (mevedel-execution-restart-daemon))))

(defun mevedel-execution-restart-daemon ()
  "Restart the helper daemon once nothing is running in it, and reattach.
A daemon of another version than this Emacs's helper is replaced
by this one; every open session is opened again on the new one.
Refused while anything runs in the daemon, for any client."
  (interactive)
  (let ((conn (mevedel-execution-connect)))
    (unless (mevedel-execution-daemon-connection-p conn)
      (user-error "The helper is not the daemon (see `mevedel-execution-connection')"))
    (let ((live (mevedel-execution-daemon-live-count conn)))
      (when (> live 0)
        (user-error "%s still running in the helper daemon; restart it once nothing runs"
                    (mevedel-execution-plural live "command"))))
    (mevedel-execution-restart-helper)))

(defconst mevedel-execution--reconnect-tries 6
  "How many times a lost daemon connection is made again before giving up.
The waits between them double from half a second; after the last,
the next call tries again.")

(defun mevedel-execution-daemon-schedule-reconnect (try)
  "Reconnect to the daemon from a timer; TRY counts the attempts from 0."
  (when (< try mevedel-execution--reconnect-tries)
    (run-at-time (* 0.5 (expt 2 (max 0 (1- try)))) nil
                 #'mevedel-execution--reconnect try)))

(defun mevedel-execution--reconnect (try)
  "Connect to the daemon again and reattach every open session.
TRY counts the attempts; a failure schedules the next one."
  (when (and (mevedel-execution-sessions)
             (not (and (mevedel-execution-current-connection)
                       (jsonrpc-running-p (mevedel-execution-current-connection)))))
    (condition-case err
        (dolist (session (reverse (mevedel-execution-sessions)))
          (mevedel-execution-ensure-session session))
      (error
       (message "mevedel-exec: reconnecting to the helper daemon: %s"
                (error-message-string err))
       (mevedel-execution-daemon-schedule-reconnect (1+ try))))))

(provide 'mevedel-execution-daemon)
;;; mevedel-execution-daemon.el ends here

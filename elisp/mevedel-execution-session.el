;;; mevedel-execution-session.el --- Sessions of mevedel-exec and the person's commands  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A session is an agent conversation's executions, held in the helper:
;; opened with a state directory, reopened by itself on a new helper
;; after a crash, closed with its live work.  This file keeps the open
;; sessions, each session's live table (seeded by `exec/list', merged
;; from `exec/changed'), the request API the sister files use
;; (`mevedel-execution-request', `-request-async'), and the commands a
;; person runs on sessions and the helper (open, close, stop all,
;; restart).

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'subr-x)
(require 'mevedel-execution-connection)
(require 'mevedel-execution-live)

(declare-function jsonrpc--process "jsonrpc" (conn) t)
(declare-function project-root "project")
(declare-function mevedel-execution-forget-deliveries "mevedel-execution-mailbox" (&optional session-id))
(declare-function mevedel-execution-count-user "mevedel-execution-bash" (session))
(declare-function mevedel-execution-list-user "mevedel-execution-bash" (session))
(declare-function mevedel-execution-stop-all-user "mevedel-execution-bash" (session &optional callback))
(declare-function mevedel-execution-daemon-live-count "mevedel-execution-daemon" (conn))

(defvar mevedel-execution--sessions nil
  "Sessions opened and not torn down.")

;;;;; The public request API

;; The sister files (spool, transcript, person, panel) and anything
;; built on this package send their requests through these two
;; functions and never touch the connection; only the rooms that must
;; see an answer inside the process filter (jobs, the mailbox's acks)
;; call `mevedel-execution-call-async' on a connection themselves.

(defun mevedel-execution-session-params (session method params)
  "Return METHOD's wire object for SESSION: Lisp PARAMS and SESSION's id."
  (mevedel-execution-to-wire
   method (cons :session-id (cons (mevedel-execution-session-id session) params))))

(defun mevedel-execution-request (session method &optional params timeout meanwhile)
  "Send METHOD with PARAMS for SESSION, wait, and return the result.
PARAMS is a plist with Lisp keys (`:execution-id', ...), without
the session's id, which is added; keys with a nil value are left
out, and METHOD must take every key (`mevedel-execution-wire-params').
The result is a fresh plist with Lisp keys.  SESSION is reopened
first if its helper died.  Wait at most TIMEOUT seconds (default
`mevedel-execution-request-timeout'), calling MEANWHILE first if
given (see `mevedel-execution-call').  A helper error signals
`mevedel-execution-helper-error' with the error plist as data;
\\[keyboard-quit] while waiting cancels the request in the helper too.
Made from inside the helper's process filter, the call signals
`mevedel-execution-error': pass callbacks to
`mevedel-execution-request-async' there."
  (let ((conn (mevedel-execution-ensure-session session)))
    (mevedel-execution-call conn method
                             (mevedel-execution-session-params session method params)
                             timeout meanwhile)))

(cl-defun mevedel-execution-request-async (session method params &key on-result on-error on-lost timeout)
  "Send METHOD with PARAMS for SESSION; return a handle at once.
PARAMS is as for `mevedel-execution-request'.  ON-RESULT receives
the result plist, ON-ERROR the error plist (:code :kind :message)
when the helper refused or did not answer within TIMEOUT seconds
\(nil: no limit).  ON-LOST, called with a reason string, replaces
ON-ERROR when the helper died before answering.  The callbacks run
from a timer, in the buffer current now if it is still live, after
what the helper sent before the answer.  The handle is for
`mevedel-execution-abort'."
  (let ((conn (mevedel-execution-ensure-session session)))
    (mevedel-execution-call-async conn method
                              (mevedel-execution-session-params session method params)
                              :on-result on-result :on-error on-error
                              :on-lost on-lost :timeout timeout)))

(defun mevedel-execution-forget-live (generation)
  "Empty the live tables of the sessions open on helper GENERATION.
That helper exited: nothing it ran is live any more."
  (dolist (session mevedel-execution--sessions)
    (when (eql (mevedel-execution-session-generation session) generation)
      (mevedel-execution-live-forget (mevedel-execution-session-id session)))))

(defun mevedel-execution-live (session)
  "Return the facts of every live execution of SESSION, every owner's.
This asks the helper nothing: it is the table that `exec/changed'
keeps, as of the last event handled, in `exec/list' order."
  (mevedel-execution-live-list (mevedel-execution-session-id session)))

(defun mevedel-execution-session-on (conn session-id)
  "Return the open session SESSION-ID on CONN's helper, or nil."
  (let ((session (mevedel-execution-find-session session-id)))
    (and session conn
         (eql (mevedel-execution-session-generation session)
              (mevedel-execution-generation conn))
         session)))

;; The sink's memory outlives a helper.  A delivery pending when its
;; helper died is re-made by the next helper's open under the same id
;; (and never wakes); the sink that already made it durable gets no
;; second copy, and the new helper gets the durable ack again.  A sink
;; still holding one answers whichever helper the session is open on
;; by then, through `mevedel-execution-session-connection'.

(defun mevedel-execution-session-connection (session-id)
  "Return the running connection SESSION-ID is open on now, or nil."
  (let ((conn (mevedel-execution-current-connection)))
    (and conn (jsonrpc-running-p conn)
         (mevedel-execution-session-on conn session-id)
         conn)))

;;;; Sessions

(defvar mevedel-execution-teardown-functions nil
  "Functions called as executions are torn down, before they are stopped.
Each receives SESSION and OWNER: OWNER nil means every owner of
SESSION, SESSION nil every session.  `mevedel-execution-stop-owner',
`mevedel-execution-teardown-session' and
`mevedel-execution-teardown-all' run them.")


(cl-defstruct (mevedel-execution-session
               (:constructor mevedel-execution--make-session)
               (:copier nil))
  "An agent conversation's executions, held in the helper."
  (id nil :read-only t :documentation "The session id.")
  (state-dir nil :documentation "Where its spools live (its artifact directory).")
  (limits nil :read-only t :documentation "Wire plist of limits, or nil.")
  (target nil :read-only t
          :documentation "TRAMP name of the machine it works in; nil: this one.")
  (target-info nil :documentation "The helper's description of the target at the last open:
a plist of :name, :target-method, :support-tier, :remote-mode,
:incarnation, :lacks, :missing, and :replaced or :error when given.")
  (generation nil :documentation "The helper generation it is open on.")
  (id-prefix nil :documentation "Prefix of execution ids on that helper.")
  (recovered nil :documentation "Facts of the executions its last open marked lost.")
  (busy-owners nil :documentation "Owners last said busy; told again on a new helper.")
  (retiring nil :documentation "Begun retirements: (OWNER FRONTIER . GENERATION) each."))

(defconst mevedel-execution--target-seconds 15
  "How long the helper takes at most to describe a session's remote target.")

(defun mevedel-execution--open-on (conn session)
  "Open SESSION on CONN's helper."
  (let ((before (mevedel-execution-session-generation session))
        (info nil))
    ;; The session is CONN's already while it opens: the deliveries its
    ;; recovery re-makes may come before the answer, and they are
    ;; handled (and acknowledged) before the call returns.
    (setf (mevedel-execution-session-generation session)
          (mevedel-execution-generation conn))
    (condition-case err
        (setq info (mevedel-execution-call
                    conn 'session/open
                    (mevedel-execution-session-params
                     session 'session/open
                     (list :state-dir (mevedel-execution-session-state-dir session)
                           :limits (mevedel-execution-session-limits session)
                           :target (mevedel-execution-session-target session)))
                    ;; A remote target is reached and probed first.
                    (and (mevedel-execution-session-target session)
                         (+ mevedel-execution-request-timeout
                            mevedel-execution--target-seconds))))
      ((error quit)
       (setf (mevedel-execution-session-generation session) before)
       (signal (car err) (cdr err))))
    (setf (mevedel-execution-session-id-prefix session)
          (plist-get info :id-prefix))
    (mevedel-execution-seed-live
     conn (mevedel-execution-session-id session)
     (mevedel-execution-session-params session 'exec/list (list :as "user")))
    (setf (mevedel-execution-session-recovered session)
          (plist-get info :recovered))
    (setf (mevedel-execution-session-target-info session)
          (plist-get info :target))
    (mevedel-execution--report-target session)
    ;; A new helper thinks every owner idle: one that is busy would be
    ;; woken in the middle of its turn.
    (dolist (owner (mevedel-execution-session-busy-owners session))
      (mevedel-execution-call
       conn 'owner/state
       (mevedel-execution-session-params session 'owner/state
                                          (list :owner owner :state "busy"))))
    info))

(defun mevedel-execution-ensure-session (session)
  "Return a connection on which SESSION is open, reopening it if needed.
After the helper died, the session opens again on the new one."
  (unless (mevedel-execution-session-p session)
    (signal 'wrong-type-argument (list 'mevedel-execution-session-p session)))
  (unless (memq session mevedel-execution--sessions)
    (signal 'mevedel-execution-error
            (list (format "session %s was torn down" (mevedel-execution-session-id session)))))
  (let ((conn (mevedel-execution-connect)))
    (unless (eql (mevedel-execution-session-generation session)
                 (mevedel-execution-generation conn))
      (mevedel-execution--open-on conn session)
      ;; Whichever call reopened it says what the dead helper left.
      (mevedel-execution--report-recovered session))
    conn))

(defun mevedel-execution-describe (facts)
  "Return how a person names the execution of FACTS: its label or command.
The text is on one line and at most 60 characters long."
  (let* ((label (plist-get facts :label))
         (name (if (and (stringp label) (not (string-blank-p label)))
                   label
                 (or (plist-get facts :command) (plist-get facts :execution-id) "?")))
         (name (string-trim (replace-regexp-in-string "[ \t\n\r]+" " " name))))
    (truncate-string-to-width name 60 nil nil "…")))

(defun mevedel-execution--report-target (session)
  "Tell what SESSION's last open found wrong with its target, if anything."
  (let* ((info (mevedel-execution-session-target-info session))
         (name (or (plist-get info :name) (mevedel-execution-session-target session))))
    (cond
     ((plist-get info :error)
      (message "mevedel-exec: session %s: target %s: %s"
               (mevedel-execution-session-id session) name (plist-get info :error)))
     ((plist-get info :missing)
      (message "mevedel-exec: session %s: target %s lacks %s; commands cannot run there"
               (mevedel-execution-session-id session) name
               (mapconcat #'identity (plist-get info :missing) ", ")))
     ((plist-get info :replaced)
      (message "mevedel-exec: session %s: target %s was replaced (rebooted or made again) since its last open"
               (mevedel-execution-session-id session) name)))))

(defun mevedel-execution-session-target-lacks (session)
  "Return the programs SESSION's target lacks, as its last open found them.
A list of strings among \"bash\", \"setsid\", \"bwrap\" and \"rg\"."
  (append (plist-get (mevedel-execution-session-target-info session) :lacks) nil))

(defun mevedel-execution--report-recovered (session)
  "Tell which executions SESSION's last reopen marked lost, if any."
  (let ((lost (mevedel-execution-session-recovered session)))
    (when lost
      (message "mevedel-exec: the helper had ended without recording the end of %s; marked lost"
               (mapconcat (lambda (f) (format "%s (%s)" (plist-get f :execution-id)
                                              (mevedel-execution-describe f)))
                          lost ", ")))))

(defun mevedel-execution--read-open-session ()
  "Read the arguments of `mevedel-execution-open-session' from a person.
The defaults are the person's session of the current project and
its directory under `mevedel-execution-person-directory'."
  (let* ((default (mevedel-execution-person-session-id))
         (id (read-string (format-prompt "Open session" default) nil nil default))
         (dir (mevedel-execution--person-state-dir id)))
    (list id (read-directory-name "Keep its output in: " dir dir))))

(defun mevedel-execution-open-session (id state-dir &optional limits target)
  "Open the session ID, keeping its output under STATE-DIR.
Interactively, offers the person's session of the current project
\(see `mevedel-execution-person-session-id'); a session already
open is returned as it is.
STATE-DIR is created (mode 0700) when missing.  LIMITS is an
optional plist of wire limits, e.g. (:maxLive 16 :graceMs 500);
`:ackTimeoutMs' and `:retryMs' say how long the helper waits for
a delivery's ack before sending it again, and how long after a
failure.  Return the session object.  `mevedel-execution-session-recovered'
gives the facts of the executions that an earlier helper left
without an end and this open marked lost (termination \"lost\");
after the helper died, the session opens again by itself on the
next call, and the slot then says what that open recovered.
TARGET is the TRAMP name of the machine the session works in
\(\"/ssh:me@host:\", \"/podman:box:\"); nil means the remote part
of `default-directory', or this machine when it is local.
`mevedel-execution-session-target-info' gives the helper's
description of it: its incarnation, what it lacks, and whether it
was replaced since the last open of STATE-DIR."
  (interactive (mevedel-execution--read-open-session))
  (unless (and (stringp id) (not (string-empty-p id)))
    (signal 'wrong-type-argument (list 'stringp id)))
  (unless (stringp state-dir)
    (signal 'wrong-type-argument (list 'stringp state-dir)))
  (if (and (called-interactively-p 'any) (mevedel-execution-find-session id))
      (progn (message "mevedel-exec: session %s is open already" id)
             (mevedel-execution-find-session id))
    (let ((session (mevedel-execution--open-session
                    id state-dir limits
                    (or target (file-remote-p default-directory)))))
      (when (called-interactively-p 'any)
        (message "mevedel-exec: session %s open, output in %s"
                 id (abbreviate-file-name (mevedel-execution-session-state-dir session))))
      session)))

(defun mevedel-execution--open-session (id state-dir limits target)
  "Open the session ID in STATE-DIR with LIMITS on TARGET; return it."
  (let ((session (mevedel-execution--make-session
                  :id id :state-dir (expand-file-name state-dir) :limits limits
                  :target target)))
    ;; Open already while the helper opens it: deliveries an earlier
    ;; helper left pending in STATE-DIR may come before the answer.
    (push session mevedel-execution--sessions)
    (condition-case err
        (mevedel-execution--open-on (mevedel-execution-connect) session)
      ((error quit)
       (setq mevedel-execution--sessions (delq session mevedel-execution--sessions))
       (signal (car err) (cdr err))))
    session))

(defun mevedel-execution-sessions ()
  "Return the sessions open and not torn down, most recently opened first."
  (copy-sequence mevedel-execution--sessions))

(defun mevedel-execution-session-open-p (session)
  "Return non-nil if SESSION is open: opened and not torn down."
  (and (memq session mevedel-execution--sessions) t))

(defun mevedel-execution-find-session (id)
  "Return the open session whose id is ID, or nil."
  (and id (cl-find id mevedel-execution--sessions
                   :key #'mevedel-execution-session-id :test #'equal)))

(defun mevedel-execution-resolve-session (session &optional id)
  "Return SESSION if it is open, else the open session whose id is ID.
With neither SESSION nor ID, return the only open session.  Signal
a `user-error' when there is none of these."
  (let ((open mevedel-execution--sessions))
    (or (and session (memq session open) session)
        (mevedel-execution-find-session id)
        (and (null session) (null id) (= (length open) 1) (car open))
        (user-error "Session %s is not open"
                    (or id (and session (mevedel-execution-session-id session))
                        "of this command")))))

(defun mevedel-execution-teardown-session (session)
  "Close SESSION: its live executions are stopped; spools stay on disk."
  (when (memq session mevedel-execution--sessions)
    (run-hook-with-args 'mevedel-execution-teardown-functions session nil)
    (setq mevedel-execution--sessions (delq session mevedel-execution--sessions))
    ;; The helper drops the session's deliveries: none comes again.
    (mevedel-execution-forget-deliveries (mevedel-execution-session-id session))
    (mevedel-execution-live-forget (mevedel-execution-session-id session))
    (let ((conn (mevedel-execution-current-connection)))
      (when (and conn (jsonrpc-running-p conn)
                 (eql (mevedel-execution-session-generation session)
                      (mevedel-execution-generation conn)))
        (condition-case err
            (mevedel-execution-call
             conn 'session/close
             (mevedel-execution-session-params session 'session/close nil) 30)
          (mevedel-execution-error
           (message "mevedel-exec: closing %s: %s"
                    (mevedel-execution-session-id session) (error-message-string err))))))))

(defun mevedel-execution-close-session (session)
  "Close SESSION: stop what is running in it, forget it; its logs stay on disk.
Interactively, read the session (the current buffer's by default)
and ask first when commands still run in it.  Return the number
of commands that were running."
  (interactive (list (mevedel-execution-read-session "Close session")))
  (let ((live (if (mevedel-execution-session-connection (mevedel-execution-session-id session))
                  (condition-case nil (mevedel-execution-count-user session) (error 0))
                0)))
    (when (and (called-interactively-p 'any) (> live 0)
               (not (yes-or-no-p (format "Session %s has %s; stop and close? "
                                         (mevedel-execution-session-id session)
                                         (mevedel-execution-plural live "running command")))))
      (user-error "Not closed"))
    (mevedel-execution-teardown-session session)
    (when (called-interactively-p 'any)
      (message "mevedel-exec: closed session %s%s" (mevedel-execution-session-id session)
               (if (> live 0) (format ", %s stopped" (mevedel-execution-plural live "command")) "")))
    live))

(defun mevedel-execution-detach ()
  "Leave the helper daemon: close the connection, let its work go on.
The sessions stay open there; an Emacs that opens one again later
attaches to it.  This Emacs forgets them.  It runs from
`kill-emacs-hook' in `daemon' mode, in place of ending every
execution."
  (interactive)
  (let ((conn (mevedel-execution-current-connection)))
    (run-hook-with-args 'mevedel-execution-teardown-functions nil nil)
    (setq mevedel-execution--sessions nil)
    (mevedel-execution-live-forget)
    (when conn (mevedel-execution-kill-connection conn))
    (mevedel-execution-drain)))

(defun mevedel-execution-teardown-all (&optional exiting)
  "Close every session and shut the helper down.
Every execution ends, one-shots and helpers with their teardown
functions, and scratch directories are removed; it runs from
`kill-emacs-hook' (EXITING non-nil: the child helper is then left
to exit at the EOF Emacs's exit gives it).  With the helper daemon
it detaches instead \(`mevedel-execution-detach'): what runs goes
on there."
  (if (mevedel-execution-daemon-connection-p (mevedel-execution-current-connection))
      (mevedel-execution-detach)
    (mevedel-execution--teardown-child exiting)))

(defun mevedel-execution--kill-emacs ()
  "Tear everything down as Emacs exits, for `kill-emacs-hook'."
  (mevedel-execution-teardown-all t))

(defun mevedel-execution--teardown-child (&optional exiting)
  "Close every session and shut the child helper down.
EXITING says Emacs itself exits (see `mevedel-execution-shutdown')."
  (run-hook-with-args 'mevedel-execution-teardown-functions nil nil)
  (setq mevedel-execution--sessions nil)
  (mevedel-execution-forget-deliveries)
  (mevedel-execution-live-forget)
  (let ((conn (mevedel-execution-current-connection)))
    (when conn (mevedel-execution-shutdown conn exiting)))
  ;; The lost answers and the exit event the kill queued, in the
  ;; caller's extent (when it is not itself a queued handler).
  (mevedel-execution-drain))

(add-hook 'kill-emacs-hook #'mevedel-execution--kill-emacs)

;;;; What a person runs

;; The commands below are for a person at M-x, not for the agent: they
;; prompt, confirm before ending live work, and report in words.

(defvar-local mevedel-execution-buffer-session nil
  "The session the current buffer shows (a panel, an output buffer...).
Commands that prompt for a session offer it first.")

(defcustom mevedel-execution-person-directory
  (locate-user-emacs-file "mevedel-exec/sessions/")
  "Where the sessions a person opens keep their output, one directory each."
  :type 'directory
  :group 'mevedel-execution)

(defvar mevedel-execution-restart-hook nil
  "Hook run after `mevedel-execution-restart-helper' reopened the sessions.")

(defvar project-find-functions)

;; Finding a directory's project asks every VC backend in turn, about
;; 0.3 ms of each command's start, before its request can go.  What it
;; finds depends on which names exist in the directory and its
;; ancestors, so an answer is kept while none of their modification
;; times changed (adding or removing a name changes its directory's)
;; and `project-find-functions' is the same.
(defvar mevedel-execution--project-roots (make-hash-table :test #'equal)
  "Per local directory, (STAMP . ROOT): its project's root as last found.")

(defvar mevedel-execution--project-root-settle 2
  "Seconds a directory's modification time must be old for its answer to be kept.
A name added within the same tick of a coarse filesystem clock
would leave the time as it was.")

(defun mevedel-execution--directory-stamp (dir)
  "Return the stamp `mevedel-execution--project-roots' compares for DIR.
It is `project-find-functions' and the modification times of DIR
and of each of its ancestors, nil for one that cannot be read."
  (let ((times nil)
        (parent nil))
    (while (progn
             (push (file-attribute-modification-time (file-attributes dir)) times)
             (setq parent (file-name-directory (directory-file-name dir)))
             (and parent (not (equal parent dir))))
      (setq dir parent))
    (cons project-find-functions times)))

(defun mevedel-execution--project-root (dir)
  "Return the root of the local directory DIR's project, or DIR.
DIR is absolute and ends in a slash.  An answer is reused while
what it depends on is unchanged (`mevedel-execution--project-roots'),
and is kept only once every modification time it depends on is
older than `mevedel-execution--project-root-settle'."
  (if (not (require 'project nil t))
      dir
    (let ((stamp (mevedel-execution--directory-stamp dir))
          (known (gethash dir mevedel-execution--project-roots)))
      (if (and known (equal (car known) stamp))
          (cdr known)
        (let* ((project (ignore-errors (project-current nil dir)))
               (root (if project (expand-file-name (project-root project)) dir))
               (newest (cl-loop for time in (cdr stamp)
                                when time maximize (float-time time))))
          (if (and newest (< (- (float-time) newest) mevedel-execution--project-root-settle))
              (remhash dir mevedel-execution--project-roots)
            (when (> (hash-table-count mevedel-execution--project-roots) 256)
              (clrhash mevedel-execution--project-roots))
            (puthash dir (cons stamp root) mevedel-execution--project-roots))
          root)))))

(defun mevedel-execution-person-session-id (&optional directory)
  "Return the id of the person's session for DIRECTORY's project.
DIRECTORY defaults to `default-directory'.  A local directory's
project is what `project-current' finds, else the directory (found
again only when a name came or went in it or an ancestor: see
`mevedel-execution--project-roots'); a remote one (a TRAMP name)
counts by its host, so nothing is asked of the host to name it."
  (let* ((dir (file-name-as-directory (expand-file-name (or directory default-directory))))
         (remote (file-remote-p dir))
         (root (if remote remote (mevedel-execution--project-root dir)))
         (base (file-name-nondirectory
                (directory-file-name (or (and remote (file-remote-p dir 'host)) root)))))
    ;; The id names a directory on remote hosts too: a safe word.
    (format "person-%s-%s"
            (let ((word (replace-regexp-in-string "[^A-Za-z0-9._]+" "_" base)))
              (if (string-empty-p word) "root" (truncate-string-to-width word 24)))
            (substring (md5 root) 0 6))))

(defun mevedel-execution--person-state-dir (id)
  "Return the state directory of the person's session ID."
  (expand-file-name id mevedel-execution-person-directory))

(defun mevedel-execution-person-session (&optional directory)
  "Return the person's open session for DIRECTORY's project, opening it.
See `mevedel-execution-person-session-id'."
  (let (id failed)
    ;; A person's first command starts the helper: it starts and answers
    ;; its handshake while the project is found (the first lookup loads
    ;; the VC backends and asks each).
    (mevedel-execution-connect
     (lambda ()
       (condition-case err
           (setq id (mevedel-execution-person-session-id directory))
         (error (setq failed err)))))
    (when failed (signal (car failed) (cdr failed)))
    (or (mevedel-execution-find-session id)
        (mevedel-execution-open-session id (mevedel-execution--person-state-dir id)))))

(defun mevedel-execution-read-session (prompt)
  "Read an open session with PROMPT; return it.
The session of the current buffer, else the one opened last, is
the default."
  (let* ((open mevedel-execution--sessions)
         (here (and (memq mevedel-execution-buffer-session open)
                    mevedel-execution-buffer-session))
         (default (and open (mevedel-execution-session-id (or here (car open))))))
    (unless open (user-error "No mevedel-exec session is open"))
    (mevedel-execution-find-session
     (completing-read (format-prompt prompt default)
                      (mapcar #'mevedel-execution-session-id open)
                      nil t nil nil default))))

(defun mevedel-execution--running-sessions ()
  "Return the open sessions whose helper is running now."
  (cl-remove-if-not (lambda (s) (mevedel-execution-session-connection
                                 (mevedel-execution-session-id s)))
                    mevedel-execution--sessions))

(defun mevedel-execution--live-count (sessions)
  "Return how many executions are running in SESSIONS, by their helper's count.
A session whose helper does not answer counts for none."
  (let ((n 0))
    (dolist (s sessions n)
      (setq n (+ n (condition-case nil (mevedel-execution-count-user s)
                     (error 0)))))))

(defun mevedel-execution-plural (n word)
  "Return N and WORD, with an s unless N is 1."
  (format "%d %s%s" n word (if (eql n 1) "" "s")))

(defvar mevedel-execution--person-stops (make-hash-table :test #'equal)
  "Executions a person stopped, as (SESSION-ID . EXECUTION-ID) keys.
Views that keep finished work let these go once they settle: the
person knows how they ended.")

(defun mevedel-execution-note-person-stop (session-id execution-id)
  "Note that a person stopped EXECUTION-ID of SESSION-ID."
  (when (> (hash-table-count mevedel-execution--person-stops) 4096)
    (clrhash mevedel-execution--person-stops))
  (puthash (cons session-id execution-id) t mevedel-execution--person-stops))

(defun mevedel-execution-person-stopped-p (session-id execution-id)
  "Return non-nil if a person stopped EXECUTION-ID of SESSION-ID in this Emacs."
  (gethash (cons session-id execution-id) mevedel-execution--person-stops))

(defun mevedel-execution-stopped-by-person-p (session-id facts)
  "Return non-nil if a person stopped the execution of FACTS in SESSION-ID.
In this Emacs (`mevedel-execution-person-stopped-p'), or anywhere
else with user authority: at a shell (`mevedel-exec stop'), in
another Emacs; the helper's final facts then say `:stopped-by-user'."
  (or (mevedel-execution-person-stopped-p session-id (plist-get facts :execution-id))
      (and (plist-get facts :stopped-by-user) t)))

(defun mevedel-execution-stop-all (&optional sessions)
  "Stop every running command of every open session; return how many.
SESSIONS, a list, limits it to those.  Interactively, asks first,
saying how many commands run.  Each ends as a stop does (SIGTERM
to its group, SIGKILL after the grace period)."
  (interactive)
  (let* ((sessions (cl-intersection (or sessions mevedel-execution--sessions)
                                    (mevedel-execution--running-sessions)))
         (live (mapcar (lambda (s) (cons s (condition-case nil
                                               (mevedel-execution-list-user s)
                                             (error nil))))
                       sessions))
         (total (apply #'+ (mapcar (lambda (c) (length (cdr c))) live))))
    (cond
     ((zerop total)
      (when (called-interactively-p 'any) (message "mevedel-exec: nothing is running"))
      0)
     ((and (called-interactively-p 'any)
           (not (yes-or-no-p (format "Stop %s? " (mevedel-execution-plural total "running command")))))
      (user-error "Nothing stopped"))
     (t
      (pcase-dolist (`(,session . ,facts) live)
        (when facts
          (dolist (f facts)
            (mevedel-execution-note-person-stop (mevedel-execution-session-id session)
                                                (plist-get f :execution-id)))
          (let ((id (mevedel-execution-session-id session)))
            (mevedel-execution-stop-all-user
             session
             (lambda (r)
               (when (integerp r)
                 (message "mevedel-exec: stopped %s in %s"
                          (mevedel-execution-plural r "command") id)))))))
      (message "mevedel-exec: stopping %s..." (mevedel-execution-plural total "command"))
      total))))

(defun mevedel-execution-restart-helper ()
  "Shut the helper down, start a new one and reopen every session on it.
What ran ends (termination \"session-ended\"); interactively,
asks first when anything runs.  Output logs stay readable.  Return
the number of sessions reopened.  With the helper daemon it is the
daemon that restarts, and what runs in it for every client ends:
the question counts all of that."
  (interactive)
  (let* ((conn (mevedel-execution-current-connection))
         (running (and conn (jsonrpc-running-p conn)))
         (live (cond ((not running) 0)
                     ((mevedel-execution-daemon-connection-p conn)
                      (condition-case nil (mevedel-execution-daemon-live-count conn) (error 0)))
                     (t (mevedel-execution--live-count (mevedel-execution--running-sessions)))))
         (sessions (reverse mevedel-execution--sessions))
         (reopened 0))
    (when (and (called-interactively-p 'any) (> live 0)
               (not (yes-or-no-p (format "Restarting the helper stops %s; restart? "
                                         (mevedel-execution-plural live "running command")))))
      (user-error "Not restarted"))
    (when conn (mevedel-execution-shutdown conn))
    (mevedel-execution-drain)
    (mevedel-execution-connect)
    (dolist (session sessions)
      (condition-case err
          (progn (mevedel-execution-ensure-session session) (cl-incf reopened))
        (error (message "mevedel-exec: reopening %s: %s"
                        (mevedel-execution-session-id session) (error-message-string err)))))
    (run-hooks 'mevedel-execution-restart-hook)
    (message "mevedel-exec: the helper restarted; %s reopened"
             (mevedel-execution-plural reopened "session"))
    reopened))

(defun mevedel-execution--confirm-kill-emacs ()
  "Ask before Emacs exits while commands run; never in batch mode.
With the helper daemon nothing ends with Emacs, so nothing is asked.
For `kill-emacs-query-functions'."
  (or noninteractive
      (mevedel-execution-daemon-p)
      (let ((n (mevedel-execution--live-count (mevedel-execution--running-sessions))))
        (or (zerop n)
            (yes-or-no-p (format "%s still running under mevedel-exec; exiting stops %s.  Exit anyway? "
                                 (mevedel-execution-plural n "command")
                                 (if (= n 1) "it" "them")))))))

(add-hook 'kill-emacs-query-functions #'mevedel-execution--confirm-kill-emacs)

(defun mevedel-execution-request-either (session method params value callback)
  "Send METHOD with PARAMS for SESSION; VALUE maps the result.
Without CALLBACK, wait and return what VALUE makes of the result,
signalling `mevedel-execution-helper-error' on an error.  With
CALLBACK, return a request handle at once; CALLBACK later receives
what VALUE makes of the result, or (:error ERR) when the helper
refused or died."
  (if (not callback)
      (funcall value (mevedel-execution-request session method params))
    (mevedel-execution-request-async
     session method params
     :on-result (lambda (r) (funcall callback (funcall value r)))
     :on-error (lambda (err) (funcall callback (list :error err)))
     :on-lost (lambda (why)
                (funcall callback (list :error (list :code -1 :kind "lost" :message why))))
     :timeout mevedel-execution-request-timeout)))

(defun mevedel-execution-relocate-artifacts (session old-root new-root)
  "Note that SESSION's artifact directory moved from OLD-ROOT to NEW-ROOT.
SESSION's output logs, journal and scratch directories live in its
state directory.  When that directory is OLD-ROOT or lies under it,
the session moves with it: the helper closes the session (its live
executions end as \"session-ended\", its pending deliveries are
dropped), the directory is renamed to its place under NEW-ROOT
unless the caller moved it already, and the session opens again
there, so later reads (`mevedel-execution-spool-read', the
transcript) use the new root; earlier executions' logs stay
readable by their addresses.  When the state directory is
elsewhere, nothing in the helper changes.  Return SESSION's state
directory afterwards."
  (let* ((old (file-name-as-directory (expand-file-name old-root)))
         (new (file-name-as-directory (expand-file-name new-root)))
         (state (file-name-as-directory (mevedel-execution-session-state-dir session))))
    (when (string-prefix-p old state)
      (let ((moved (directory-file-name (concat new (substring state (length old))))))
        (mevedel-execution-teardown-session session)
        (when (and (file-directory-p state) (not (file-exists-p moved)))
          (make-directory (file-name-directory moved) t)
          (rename-file (directory-file-name state) moved))
        (setf (mevedel-execution-session-state-dir session) moved)
        (setf (mevedel-execution-session-generation session) nil)
        (push session mevedel-execution--sessions)
        (condition-case err
            (mevedel-execution--open-on (mevedel-execution-connect) session)
          ((error quit)
           (setq mevedel-execution--sessions (delq session mevedel-execution--sessions))
           (signal (car err) (cdr err))))))
    (mevedel-execution-session-state-dir session)))

(provide 'mevedel-execution-session)
;;; mevedel-execution-session.el ends here

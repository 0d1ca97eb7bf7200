;;; mevedel-execution-person.el --- Commands a person runs through mevedel-exec  -*- lexical-binding: t; -*-

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

;; The person beside the agent runs commands too, without writing Lisp:
;;
;; - M-x mevedel-execution-shell-command: the `async-shell-command' of
;;   this package.  The command runs in `default-directory' (a TRAMP
;;   /ssh: directory runs it on that host) in the person's session of
;;   the project, and its output buffer follows it live.
;; - M-x mevedel-execution-compile: the same as a build, in a buffer
;;   where `next-error' visits the errors; `g' or M-x
;;   mevedel-execution-recompile runs it again.
;; - M-x mevedel-execution-history: a session's transcript.
;;
;; And the person is told: one message when a command they started,
;; or one they watch (its output buffer or its panel on screen), ends,
;; and one when any command starts waiting for input.

;;; Code:

(require 'cl-lib)
(require 'compile)
(require 'seq)
(require 'subr-x)
(require 'mevedel-execution)
(require 'mevedel-execution-spool)
(require 'mevedel-execution-spool-act)
(require 'mevedel-execution-transcript)

(declare-function notifications-notify "notifications")

(defcustom mevedel-execution-notify-desktop nil
  "Non-nil: say when work ends or waits with `notifications-notify' too.
The echo area always has the message."
  :type 'boolean
  :group 'mevedel-execution)

(defconst mevedel-execution-person-owner "/person"
  "The owner of what a person starts: not the agent's, so nothing wakes it.")

(defvar mevedel-execution-shell-command-history nil
  "Commands given to `mevedel-execution-shell-command'.")

(defvar mevedel-execution-person--started (make-hash-table :test #'equal)
  "Executions a person started, as (SESSION-ID . EXECUTION-ID) keys.")

(defvar mevedel-execution-person--announced (make-hash-table :test #'equal)
  "Executions whose end was announced, as (SESSION-ID . EXECUTION-ID) keys.")

(defvar mevedel-execution-person--waiting (make-hash-table :test #'equal)
  "Per session id, the ids of its executions last seen waiting for input.")

(defvar mevedel-execution-watching-functions nil
  "Functions saying whether the person watches an execution.
Each is called with SESSION-ID and EXECUTION-ID and returns non-nil
if a view of it is on screen; the end of a watched execution is
announced.")

(defvar mevedel-execution-person--finished-work (make-hash-table :test #'equal)
  "Per session id, the final facts of what a person started, newest first.
A panel opened later shows them until dismissed.")

(defconst mevedel-execution-person--finished-work-limit 100
  "How many finished commands of a person each session remembers.")

(defun mevedel-execution-finished-work (session-id)
  "Return the final facts of the person's finished commands of SESSION-ID.
Newest first; what was dismissed is not among them."
  (copy-sequence (gethash session-id mevedel-execution-person--finished-work)))

(defun mevedel-execution-forget-finished (session-id &optional execution-ids)
  "Forget the finished commands EXECUTION-IDS of SESSION-ID (nil: all of them)."
  (if (null execution-ids)
      (remhash session-id mevedel-execution-person--finished-work)
    (puthash session-id
             (cl-remove-if (lambda (f) (member (plist-get f :execution-id) execution-ids))
                           (gethash session-id mevedel-execution-person--finished-work))
             mevedel-execution-person--finished-work)))

(defvar mevedel-execution-finished-work-functions nil
  "Functions called with SESSION-ID and FACTS when a person's command ended.
FACTS are its final facts, now among `mevedel-execution-finished-work'.
A command that ends within its own start may have settled before
it was known as the person's: an open panel learns it here.")

(defun mevedel-execution-remember-finished (session-id facts)
  "Remember FACTS, final facts of a person's command of SESSION-ID.
A panel opened later shows it until dismissed; a dismissal undone
in a panel remembers it again.  Run
`mevedel-execution-finished-work-functions'."
  (let* ((id (plist-get facts :execution-id))
         (old (cl-remove id (gethash session-id mevedel-execution-person--finished-work)
                         :key (lambda (f) (plist-get f :execution-id)) :test #'equal)))
    (puthash session-id
             (seq-take (cons facts old) mevedel-execution-person--finished-work-limit)
             mevedel-execution-person--finished-work)
    (run-hook-with-args 'mevedel-execution-finished-work-functions session-id facts)))

(defun mevedel-execution-person-started-p (session-id execution-id)
  "Return non-nil if a person started EXECUTION-ID of SESSION-ID here."
  (gethash (cons session-id execution-id) mevedel-execution-person--started))

;;;; Telling the person

(defun mevedel-execution-person--tell (text)
  "Show TEXT in the echo area, and on the desktop when asked to."
  (message "%s" text)
  (when (and mevedel-execution-notify-desktop (not noninteractive))
    (ignore-errors
      (require 'notifications)
      (notifications-notify :title "mevedel-exec" :body text))))

(defvar mevedel-execution-person--kinds (make-hash-table :test #'equal)
  "What a person ran, per (SESSION-ID . EXECUTION-ID): \"Command\" or \"Compile\".")

(defconst mevedel-execution-person--command-chars 200
  "The most characters of a command an announcement shows.")

(defconst mevedel-execution-person--label-chars 60
  "The most characters of a label an announcement shows.")

(defun mevedel-execution-person--what (facts)
  "Return what the execution of FACTS is and its command, in a person's words.
It is the execution's label, or else what the person ran it with
\(\"Command\", \"Compile\"), then the command as typed, in quotes
that need no escaping: Compile `make -k'."
  (let* ((label (mevedel-execution-transcript-clean
                 (or (plist-get facts :label) "") mevedel-execution-person--label-chars))
         (kind (gethash (cons (plist-get facts :session-id) (plist-get facts :execution-id))
                        mevedel-execution-person--kinds))
         (command (mevedel-execution-transcript-clean
                   (or (plist-get facts :command) "") mevedel-execution-person--command-chars)))
    (concat (cond ((not (string-empty-p label)) label)
                  (kind)
                  (t "Command"))
            (if (string-empty-p command) "" (format-message " `%s'" command)))))

(defun mevedel-execution-ending-text (facts)
  "Return the sentence telling how the execution of FACTS ended.
Compile `make -k' failed (exit code 2)."
  (concat (mevedel-execution-person--what facts) " "
          (mevedel-execution-transcript-ending-words
           (plist-get facts :status) (plist-get facts :exit-code) (plist-get facts :signal))))

(defun mevedel-execution-waiting-text (facts)
  "Return the sentence telling that the execution of FACTS waits for input.
Command `read -p Password: pw' is waiting for input: Password:"
  (let ((prompt (mevedel-execution-transcript-clean (or (plist-get facts :prompt) "") 80)))
    (concat (mevedel-execution-person--what facts)
            " is waiting for input"
            (if (string-empty-p prompt) "" (concat ": " prompt)))))

(defun mevedel-execution-person--watched-p (session-id execution-id)
  "Return non-nil if a view of EXECUTION-ID of SESSION-ID is on screen."
  (run-hook-with-args-until-success 'mevedel-execution-watching-functions
                                    session-id execution-id))

(defun mevedel-execution-person--output-watched-p (session-id execution-id)
  "Return non-nil if EXECUTION-ID's output buffer of SESSION-ID is on screen."
  (let ((buffer (mevedel-execution-spool-output-buffer session-id execution-id)))
    (and buffer (get-buffer-window buffer t) t)))

(add-hook 'mevedel-execution-watching-functions #'mevedel-execution-person--output-watched-p)

(defvar mevedel-execution-person--ended-early (make-hash-table :test #'equal)
  "Final facts of a person's executions that ended before they were known.
Per (SESSION-ID . EXECUTION-ID): a command can end before Emacs has
read its start's answer; its start takes them from here.")

(defun mevedel-execution-person--announce-end (session-id facts)
  "Say once how the execution of FACTS in SESSION-ID ended.
Only for what a person started or watches, and not for what a
person stopped: they know.  The end of a person's command not known
yet is kept for its start (`mevedel-execution-person--ended-early')."
  (let* ((id (plist-get facts :execution-id))
         (key (cons session-id id)))
    (when (and id (not (mevedel-execution-person-started-p session-id id))
               (not (gethash key mevedel-execution-person--announced))
               (equal (plist-get facts :owner) mevedel-execution-person-owner))
      (when (> (hash-table-count mevedel-execution-person--ended-early) 64)
        (clrhash mevedel-execution-person--ended-early))
      (puthash key facts mevedel-execution-person--ended-early))
    (when (and id (mevedel-execution-person-started-p session-id id)
               (not (mevedel-execution-stopped-by-person-p session-id facts)))
      (mevedel-execution-remember-finished session-id facts))
    (when (and id (not (gethash key mevedel-execution-person--announced))
               (or (mevedel-execution-person-started-p session-id id)
                   (mevedel-execution-person--watched-p session-id id)))
      (when (> (hash-table-count mevedel-execution-person--announced) 4096)
        (clrhash mevedel-execution-person--announced))
      (puthash key t mevedel-execution-person--announced)
      (remhash key mevedel-execution-person--started)
      (unless (mevedel-execution-stopped-by-person-p session-id facts)
        (mevedel-execution-person--tell (mevedel-execution-ending-text facts))))))

(defun mevedel-execution-person--note-waiting (session-id live)
  "Say which of LIVE, SESSION-ID's live facts, started waiting for input."
  (let* ((before (gethash session-id mevedel-execution-person--waiting))
         (now (cl-remove-if-not (lambda (f) (plist-get f :waiting-for-input)) live))
         (ids (mapcar (lambda (f) (plist-get f :execution-id)) now)))
    (dolist (f now)
      (unless (member (plist-get f :execution-id) before)
        (mevedel-execution-person--tell (mevedel-execution-waiting-text f))))
    (if ids
        (puthash session-id ids mevedel-execution-person--waiting)
      (remhash session-id mevedel-execution-person--waiting))))

(defun mevedel-execution-person--listener (type plist)
  "Tell the person about the event TYPE with PLIST when it concerns them."
  (pcase type
    ('changed (mevedel-execution-person--note-waiting (plist-get plist :session-id)
                                               (plist-get plist :live)))
    ('settled (mevedel-execution-person--announce-end (plist-get plist :session-id)
                                               (plist-get plist :facts)))))

;; Before the views: a panel drops a row as it settles, and whether it
;; was on screen is asked first.
(mevedel-execution-add-reader #'mevedel-execution-person--listener -90)

;;;; Running commands

(defun mevedel-execution-person--await-end (session id)
  "Wait on ID of SESSION as its owner, claiming its end; then announce it.
The end may have come already: the final facts are shown then, in
an output buffer that opened after the helper announced it."
  (mevedel-execution-observe
   session mevedel-execution-person-owner id
   (lambda (obs)
     (cond
      ((plist-get obs :error) nil)
      ((plist-get obs :final)
       (mevedel-execution-person--ended session (plist-get obs :facts)))
      ((mevedel-execution-session-open-p session)
       (mevedel-execution-person--await-end session id))))
   :wait-ms 3600000 :max-output-chars 1))

(defun mevedel-execution-person--ended (session facts)
  "Show the final FACTS of a person's command of SESSION, and say how it ended.
Its output buffer may have opened after the helper announced the
end: it learns it here."
  (let* ((sid (mevedel-execution-session-id session))
         (buffer (mevedel-execution-spool-output-buffer sid (plist-get facts :execution-id))))
    (when buffer
      (with-current-buffer buffer (mevedel-execution-spool-note-facts facts)))
    (mevedel-execution-person--announce-end sid facts)))

(defconst mevedel-execution-person--await-delay 0.1
  "Seconds after its start that a person's command gets its waiting observation.
Its end is never mailed (the start says `:deliver' false), so the
observation only brings the final facts: sent later, it is neither
in the way of the first output nor of its redisplay.")

(defconst mevedel-execution-person--start-output-chars 65536
  "The most output a person's start answer brings.
Started without waiting, a command has rarely printed more; when it
has, its buffer reads the last page instead.")

(defun mevedel-execution-person--run (command directory tty &optional label kind)
  "Run COMMAND in DIRECTORY for a person; return its output buffer.
TTY non-nil gives it a terminal.  LABEL names it.  KIND is what the
person ran it with, for announcements: \"Command\" (the default)
or \"Compile\"."
  (let* ((directory (file-name-as-directory (expand-file-name directory)))
         (session (mevedel-execution-person-session directory))
         (sid (mevedel-execution-session-id session))
         (fresh nil)
         (obs (condition-case err
                  (mevedel-execution-request
                   session 'exec/start
                   (list :owner mevedel-execution-person-owner
                         :command command
                         :cwd directory
                         :yield-ms 0
                         :tty (and tty t)
                         :label label
                         ;; What it printed already comes with the
                         ;; answer, and shows without another request;
                         ;; what it prints next comes as it does, for
                         ;; its output buffer.
                         :max-output-chars mevedel-execution-person--start-output-chars
                         :follow t
                         ;; Its end is the person's, seen in its buffer:
                         ;; never a delivery, however soon it ends.
                         :deliver :json-false)
                   ;; The first command on a host opens its connection.
                   60
                   ;; Its buffer is made while the helper starts it
                   ;; (a name without a leading space: font lock).
                   (lambda ()
                     (setq fresh (generate-new-buffer "*mevedel-exec starting*"))
                     (with-current-buffer fresh (mevedel-execution-spool-output-mode))))
                ;; A refusal (backgrounding, an unknown host key...) is
                ;; the person's to read, not a bug.
                (mevedel-execution-helper-error
                 (when fresh (kill-buffer fresh))
                 (user-error "mevedel-exec: %s" (plist-get (nth 2 err) :message)))
                ((quit error) (when fresh (kill-buffer fresh)) (signal (car err) (cdr err)))))
         (facts (plist-get obs :facts))
         (id (plist-get facts :execution-id)))
    (puthash (cons sid id) t mevedel-execution-person--started)
    (when (> (hash-table-count mevedel-execution-person--kinds) 4096)
      (clrhash mevedel-execution-person--kinds))
    (puthash (cons sid id) (or kind "Command") mevedel-execution-person--kinds)
    ;; What it printed so far came with the answer and shows at once;
    ;; more than that is shown from its last page, where it goes on,
    ;; as a terminal would.
    (let ((buffer (mevedel-execution-spool-open-started session id facts
                                                         (plist-get obs :output) t fresh))
          (early (gethash (cons sid id) mevedel-execution-person--ended-early)))
      (remhash (cons sid id) mevedel-execution-person--ended-early)
      (cond
       ((plist-get obs :final) (mevedel-execution-person--ended session facts))
       ;; Its end came with the answer, before it was known as ours.
       (early (mevedel-execution-person--ended session early))
       (t (run-at-time mevedel-execution-person--await-delay nil
                       (lambda ()
                         (when (mevedel-execution-session-open-p session)
                           (mevedel-execution-person--await-end session id))))))
      buffer)))

;;;###autoload
(defun mevedel-execution-shell-command (command &optional tty)
  "Run the shell COMMAND through mevedel-exec; show and return its output buffer.
It runs in `default-directory', on the host of a TRAMP /ssh: name
too, in the person's session of the project
\(`mevedel-execution-person-session').  With a prefix argument TTY,
it gets a terminal, so it can take input (`s' in its buffer or in
the panel).  The buffer follows the output as it comes, and a
message says how the command ended."
  (interactive
   (list (read-shell-command (if current-prefix-arg
                                 "Run on a terminal through mevedel-exec: "
                               "Run through mevedel-exec: ")
                             nil 'mevedel-execution-shell-command-history)
         current-prefix-arg))
  (when (string-blank-p command) (user-error "No command"))
  (let ((buffer (mevedel-execution-person--run command default-directory tty)))
    (display-buffer buffer)
    buffer))

;;;; Builds

(defcustom mevedel-execution-compilation-buffer-name "*mevedel-compilation*"
  "Name of the buffer of `mevedel-execution-compile'."
  :type 'string
  :group 'mevedel-execution)

(defvar mevedel-execution-person--last-compile nil
  "The last build: (COMMAND DIRECTORY TTY).")

;;;###autoload
(defun mevedel-execution-compile (command &optional tty)
  "Run the build COMMAND through mevedel-exec, as `compile' would.
The command is read as `compile' reads it (`compile-command', option
`compilation-read-command'); it runs in `default-directory' in the
person's session of the project, and its output buffer,
`mevedel-execution-compilation-buffer-name', is in a mode derived
from `compilation-mode': \\[next-error] visits its errors, and `g'
runs the build again (so does `mevedel-execution-recompile').  With
TTY, the build gets a terminal.  A build still running there is
stopped first, after asking.  Return the buffer."
  (interactive
   (list (let ((command (eval compile-command t)))
           (if (or compilation-read-command current-prefix-arg)
               (compilation-read-command command)
             command))
         nil))
  (when (string-blank-p command) (user-error "No command"))
  (unless (equal command (eval compile-command t))
    (setq compile-command command))
  (save-some-buffers (not compilation-ask-about-save) compilation-save-buffers-predicate)
  (mevedel-execution-person--compile command default-directory tty))

(defun mevedel-execution-person--compile (command directory tty)
  "Run the build COMMAND in DIRECTORY (TTY as for a start); return its buffer."
  (let ((old (get-buffer mevedel-execution-compilation-buffer-name)))
    (when old
      (with-current-buffer old
        (let ((facts (mevedel-execution-spool-running-facts)))
          (when facts
            (unless (yes-or-no-p (format "A build is running (%s); stop it? "
                                         (mevedel-execution-describe facts)))
              (user-error "The running build goes on"))
            (mevedel-execution-spool-stop))))
      (kill-buffer old)))
  (setq mevedel-execution-person--last-compile (list command directory tty))
  (let ((buffer (mevedel-execution-person--run command directory tty nil "Compile")))
    (with-current-buffer buffer
      (rename-buffer mevedel-execution-compilation-buffer-name t)
      (setq-local compile-command command)
      (setq mevedel-execution-spool-rerun-function
            (lambda () (mevedel-execution-person--compile command directory tty))))
    (setq next-error-last-buffer buffer)
    (display-buffer buffer)
    buffer))

;;;###autoload
(defun mevedel-execution-recompile ()
  "Run the last build of `mevedel-execution-compile' again, where it ran.
The same command, in the same directory, with a terminal if it had
one; a build still running in `mevedel-execution-compilation-buffer-name'
is stopped first, after asking."
  (interactive)
  (unless mevedel-execution-person--last-compile
    (user-error "No build has run yet; M-x mevedel-execution-compile"))
  (apply #'mevedel-execution-person--compile mevedel-execution-person--last-compile))

;;;; History

(defvar mevedel-execution-history-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "g") #'mevedel-execution-history-refresh)
    map)
  "Keys of `mevedel-execution-history-mode'.")

(define-derived-mode mevedel-execution-history-mode special-mode "Exec-History"
  "A session's transcript: one line per finished background command.
Each `[Show result]' button opens the command's whole output.
\\{mevedel-execution-history-mode-map}"
  (setq-local revert-buffer-function (lambda (&rest _) (mevedel-execution-history-refresh))))

;;;###autoload
(defun mevedel-execution-history (session)
  "Show the transcript of SESSION: its lines, each with its `[Show result]'.
Interactively, read the session (the current buffer's by default).
Return the buffer."
  (interactive (list (mevedel-execution-read-session "History of session")))
  (let ((buffer (get-buffer-create
                 (format "*mevedel history %s*" (mevedel-execution-session-id session)))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'mevedel-execution-history-mode)
        (mevedel-execution-history-mode))
      (setq mevedel-execution-buffer-session session)
      (mevedel-execution-history-refresh))
    (when (called-interactively-p 'interactive)
      (pop-to-buffer buffer))
    buffer))

(defun mevedel-execution-history-refresh ()
  "Read the session's journal again and show its lines.
The history buffer shows one line per finished background command,
each with its [Show result] button; this brings in what ended since
it was drawn."
  (interactive)
  (let ((session mevedel-execution-buffer-session)
        (records nil)
        (since nil)
        (inhibit-read-only t))
    (unless (and session (mevedel-execution-session-open-p session))
      (user-error "The session of this history is closed"))
    (cl-loop for page = (mevedel-execution-transcript-records session since)
             while (car page)
             do (setq records (append records (car page))
                      since (cdr page)))
    (erase-buffer)
    (when (zerop (mevedel-execution-transcript-insert session records))
      (insert (propertize "No finished background work in this session yet.\n" 'face 'shadow)))
    (goto-char (point-min))))

(provide 'mevedel-execution-person)
;;; mevedel-execution-person.el ends here

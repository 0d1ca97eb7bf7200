;;; mevedel-execution.el --- Run shell commands through the mevedel-exec helper  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; Author: The mevedel-exec developers
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: processes, tools
;; URL: https://github.com/mevedel/mevedel-exec

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.


;;; Commentary:

;; The Emacs side of mevedel-exec, the execution backend of the mevedel
;; agent.  Every child process, pipe and spool file lives in the helper
;; program `mevedel-exec', which this package starts and talks to over
;; JSON-RPC (the built-in `jsonrpc.el').  Emacs only sends requests and
;; renders the immutable fact plists that come back, so a long build or a
;; chatty test run never costs the editor's one thread more than a message.
;;
;; Entry points: `mevedel-execution-open-session', then
;; `mevedel-execution-start-bash' with a callback.  A command waits up to
;; its yield time; if it is still running then, the callback receives the
;; output so far and an execution id to poll (`mevedel-execution-observe'),
;; stop (`mevedel-execution-stop') or type into.  Callbacks receive
;; Observation plists:
;;
;;   (:output "..." :final t :facts (:execution-id "exec-..." :state "settled"
;;    :termination "exited" :exit-code 0 :status "completed" ...))
;;
;; or, when the helper refused the request, (:error (:code C :kind K
;; :message M)).  If the helper dies, every pending callback receives an
;; Observation whose facts say :termination "lost", and the next call
;; starts a fresh helper.
;;
;; A yielded command that ends while nobody waits on it comes back as
;; a delivery to `mevedel-execution-mailbox-delivery-function', which
;; acknowledges it once the record is kept; until then the helper
;; sends it again.  An owner that is idle (see
;; `mevedel-execution-set-owner-state') and owes attention to such
;; results is woken through `mevedel-execution-wake-functions', again
;; at each turn's end until `mevedel-execution-attend' says the model
;; read them; `mevedel-execution-retire-owner' (or its two phases,
;; `mevedel-execution-retire-begin' then `-retire-commit' or
;; `-retire-abort') forgets what it owes.
;;
;; Nothing of the caller's runs inside the helper's process filter.
;; Event and wake functions, the mailbox sink and the callbacks of
;; asynchronous calls are queued as their messages are read and run
;; from a timer, one at a time in the order the helper sent them, so
;; any of them may call a synchronous function of this package.  A
;; synchronous call made outside them also runs what its wait queued
;; before it returns.
;;
;; This file is the entry point: (require 'mevedel-execution) loads the
;; rooms below, in the order each needs the one before, and autoloads
;; the person's commands of the sister files.  Each room's private
;; (`--') names are used only inside it.
;;
;;   -wire.el        the customization group, errors, the protocol's names
;;   -install.el     where the helper is, its version, building it
;;   -connection.el  the helper process, the handler queue, requests
;;   -session.el     sessions, their live tables, the request API,
;;                   the person's session commands
;;   -mailbox.el     events, deliveries, wakes and owners' attention
;;   -daemon.el      the helper daemon: version, reconnection, restart
;;   -bash.el        managed Bash (the client API), confinement, monitors
;;   -job.el         one-shots, helpers and batch Eval
;;
;; and, loaded on first use: -spool.el (output buffers), -transcript.el,
;; -person.el (M-x commands, announcements) and -panel.el.

;;; Code:

(require 'mevedel-execution-wire)
(require 'mevedel-execution-install)
(require 'mevedel-execution-connection)
(require 'mevedel-execution-stream)
(require 'mevedel-execution-session)
(require 'mevedel-execution-mailbox)
(require 'mevedel-execution-daemon)
(require 'mevedel-execution-bash)
(require 'mevedel-execution-job)

;;;; M-x

;; After a command typed in full at M-x, Emacs looks for a shorter
;; abbreviation to suggest (`extended-command-suggest-shorter'), in a
;; timer that runs before the next redisplay.  For names as long as
;; this package's (`mevedel-execution-shell-command') that search costs
;; 1.5 to 3 s of CPU, during which Emacs reads no process output and
;; redraws nothing: a command's first output stayed off screen that
;; long after every M-x.  It is skipped for this package's commands.

(defun mevedel-execution--suggest-shorter-p (name _typed)
  "Return nil for NAME of this package: Emacs then suggests nothing.
For `execute-extended-command--shorter', whose search costs seconds
for names this long."
  (not (string-prefix-p "mevedel-execution" name)))

(advice-add 'execute-extended-command--shorter :before-while
            #'mevedel-execution--suggest-shorter-p)

;;;; The sister files' entry points

;; Reachable after (require 'mevedel-execution) alone: the other files
;; load when one of these is first called.
(autoload 'mevedel-execution-panel "mevedel-execution-panel"
  "Show the background work of a session in a panel." t)
(autoload 'mevedel-execution-spool-open-output "mevedel-execution-spool"
  "Show the whole output of an execution." t)
(autoload 'mevedel-execution-shell-command "mevedel-execution-person"
  "Run a shell command through the helper and show its output." t)
(autoload 'mevedel-execution-compile "mevedel-execution-person"
  "Run a build through the helper in a compilation buffer." t)
(autoload 'mevedel-execution-recompile "mevedel-execution-person"
  "Run the build of this compilation buffer again." t)
(autoload 'mevedel-execution-history "mevedel-execution-person"
  "Show the transcript of a session." t)

(provide 'mevedel-execution)
;;; mevedel-execution.el ends here

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

;; Over 600 lines on purpose: the connection, the queue of handlers,
;; requests, sessions and the mailbox share private state that no other
;; file may touch; the sister files use only its public functions.
;;
;; The Emacs side of mevedel-exec, the execution backend of the mevedel
;; agent.  Every child process, pipe and spool file lives in the helper
;; program `mevedel-exec', which this file starts and talks to over
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
;; any of them may call a synchronous function of this file.  A
;; synchronous call made outside them also runs what its wait queued
;; before it returns.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'subr-x)

(declare-function jsonrpc--async-request-1 "jsonrpc")
(declare-function jsonrpc--process "jsonrpc")
(declare-function project-root "project")

;;;; Customization

(defgroup mevedel-execution nil
  "Run shell commands through the mevedel-exec helper."
  :group 'tools
  :prefix "mevedel-execution-")

(defcustom mevedel-execution-program "mevedel-exec"
  "The mevedel-exec helper: a file name, or a command on `exec-path'.
When it cannot be found, the helper installed by
`mevedel-execution-install-helper' is used."
  :type 'string)

(defcustom mevedel-execution-program-arguments '("serve")
  "Arguments that make the helper speak its protocol on stdio."
  :type '(repeat string))

(defcustom mevedel-execution-connection 'child
  "How Emacs reaches the helper.
`child': the helper is a child process of this Emacs, and what runs
in it ends when Emacs exits (Emacs asks first).  `daemon': the
per-user helper daemon (`mevedel-exec daemon'), started detached
when none runs.  What runs in it outlives Emacs: on exit Emacs only
detaches, and an Emacs that opens the session again later attaches
to it, with its live executions and the results that came
meanwhile.  A lost connection is made again and the open sessions
reattached; a person at a shell sees the same executions with
`mevedel-exec ps', `logs', `stop', `grep', `attach' and `wait'."
  :type '(choice (const :tag "A child of this Emacs" child)
                 (const :tag "The per-user daemon" daemon)))

(defcustom mevedel-execution-install-directory
  (locate-user-emacs-file "mevedel-exec/")
  "Where `mevedel-execution-install-helper' puts the helper it builds."
  :type 'directory)

(defcustom mevedel-execution-sandbox-mode 'best-effort
  "How much confinement a start with confinement arguments asks for.
`best-effort' confines the command with the helper's backend
\(bubblewrap) when it works and otherwise runs it unconfined, saying
so in its facts; `required' refuses the start when no backend works;
`off' never confines.  It applies to the starts that pass
WRITABLE-ROOTS, READ-PATHS, ADDITIONAL-PERMISSIONS or
SANDBOX-PERMISSIONS; a start with none of them gets the session's
default.  Without a working backend, `off' and `best-effort' are no
sandbox at all."
  :type '(choice (const :tag "Confine when possible" best-effort)
                 (const :tag "Confine or refuse" required)
                 (const :tag "Never confine" off)))

(defcustom mevedel-execution-request-timeout 10
  "Seconds a short synchronous call waits for the helper."
  :type 'number)

(defcustom mevedel-execution-events-buffer-size 0
  "Size of the JSON-RPC events log buffer; 0 turns logging off.
Logging every message costs several times the notification
throughput, so it is off unless you are debugging the protocol.
nil means no limit."
  :type '(choice (const :tag "Off" 0)
                 (const :tag "No limit" nil)
                 (integer :tag "Characters")))

(defvar mevedel-execution-event-functions nil
  "Functions called with each passive event of the helper.
Each function receives two arguments: TYPE, one of the symbols
`progress', `changed', `settled', `wake' or `delivered', and PLIST,
the event's payload with keyword keys (for example `:facts' for
`settled'; `:changed', what the helper said changed, and `:live',
the whole live set after it, for `changed').  `delivered' follows each
durable acknowledgement of a delivery, whoever made it: PLIST has
`:session-id', `:delivery-id', `:execution-id' and `:owner'.  TYPE
`exit' says the helper exited, which
ends every view of its live executions: PLIST has `:generation',
`:status', and `:unexpected' t unless Emacs shut it down.  Every
function gets its own copy, so it may keep or modify it.  These
events acknowledge nothing; an error in one function is reported
and does not stop the others.

The functions run from a timer, never inside the process filter,
in the order the helper sent the events (and after the callbacks
of answers read before them), so they may call the synchronous
functions of this file.  Until one returns, nothing after it runs.")

(defvar mevedel-execution-mailbox-delivery-function nil
  "Function receiving completion deliveries, the acknowledged sink.
It is called with two arguments: RECORD, the delivery plist
\(`:delivery-id', `:session-id', `:owner', `:kind', `:attrs',
`:attempt', and `:observation', `:lines' or `:text'), and ACK, a
function to call exactly once, now or later: with no argument once
the record is durable on the Emacs side, or with an error message
string when it could not be kept, so the helper sends it again
later.  Only that call sends `mailbox/ack'; later calls are
ignored.  If the function signals an error before calling ACK,
that counts as a failure with the error's message.

A delivery is handed to this function once: while it holds one
whose ACK has not been called, a resend of the same `:delivery-id'
is dropped, and once it acknowledged one as durable, a resend is
acknowledged again without calling it.  That holds across helpers
too: after a helper died, the session's next helper re-makes each
delivery that was pending under its first id, and one already
made durable here is only acknowledged again; an ACK called after
its helper died answers the helper the session is open on then.
This memory lasts while the session is open (see
`mevedel-execution-remembered-deliveries').  Only a delivery it
reported as failed is handed to it again.  When this variable is
nil, deliveries are acknowledged as failed and stay pending in
the helper.  Like `mevedel-execution-event-functions', it runs from
a timer, in the order of the helper's messages.")

(defvar mevedel-execution-wake-functions nil
  "Functions called when the helper wakes an idle owner.
Each receives SESSION (the session object), OWNER (a string such
as `mevedel-execution-root-owner') and DELIVERY-IDS, the ids of
every durable delivery the owner still owes attention to, oldest
first; several owed results come as one wake.  Only results that
ended on their own are owed, never a stopped one.  They stay owed,
and come again with the next wake each time the owner turns idle,
until `mevedel-execution-attend' says the model read them or a
retirement (`mevedel-execution-retire-owner') forgets them.  The
helper wakes only an owner that is idle, see
`mevedel-execution-set-owner-state'.  An
error in one function is reported and does not stop the others.  Like
`mevedel-execution-event-functions', they run from a timer, in the
order of the helper's messages, and may make synchronous calls.")

;;;; Errors

(define-error 'mevedel-execution-error "mevedel-exec error")
(define-error 'mevedel-execution-helper-missing
  "The mevedel-exec helper is not installed" 'mevedel-execution-error)
(define-error 'mevedel-execution-helper-error
  "The mevedel-exec helper answered with an error" 'mevedel-execution-error)

;; The protocol's names are written once per language: the root owner
;; here as in Go's `execution.RootOwner', and each method's parameters
;; in `mevedel-execution-wire-params'.  test/golden/wire.json, which the
;; Go tests write, lets the ERT suite check both against the helper.

(defconst mevedel-execution-protocol-version 1
  "The version of the helper's wire protocol this file speaks.")

(defconst mevedel-execution-root-owner "/root"
  "The agent's top-level owner: the owner of a request that names none.")

(defconst mevedel-execution--source-file
  (or load-file-name (bound-and-true-p byte-compile-current-file) buffer-file-name)
  "Where this file was loaded from; the helper's sources are above it.")

;;;; Wire values

(defconst mevedel-execution-wire-params
  '((initialize :client-name :client-version :protocol-version)
    (shutdown)
    ($/cancelRequest :id)
    (session/open :session-id :state-dir :limits :role)
    (session/close :session-id)
    (session/unknownOutcome :session-id)
    (session/acknowledgeUnknown :session-id)
    (exec/start :session-id :owner :command :argv :stdin :cwd :yield-ms
                :timeout-ms :tty :lane :read-only :scratch :kind :env :label
                :tool-use-id :max-output-chars :ready-pattern :ready-port
                :sandbox :resources)
    (exec/observe :session-id :owner :as :execution-id :chars :wait-ms
                  :max-output-chars)
    (exec/stop :session-id :owner :as :execution-id)
    (exec/interrupt :session-id :as :execution-id)
    (exec/list :session-id :owner :as :all)
    (exec/stopAll :session-id :owner :as)
    (exec/forward :session-id :execution-id :port)
    (exec/follow :session-id :owner :as :execution-id :follow)
    (spool/read :session-id :owner :as :address :offset :length :line :lines)
    (spool/grep :session-id :owner :as :pattern :glob :addresses :max-matches
                :context)
    (spool/glob :session-id :owner :as :pattern)
    (spool/stat :session-id :owner :as :address)
    (monitor/start :session-id :owner :command :cwd :label :filter :persistent
                   :timeout-ms :env)
    (monitor/stop :session-id :owner :monitor-id)
    (monitor/list :session-id :owner)
    (owner/state :session-id :owner :state)
    (owner/retire :session-id :owner :phase :frontier)
    (owner/attend :session-id :owner :delivery-ids)
    (mailbox/ack :session-id :delivery-id :durable :error)
    (transcript/records :session-id :since :limit)
    (transcript/checkpoint :session-id)
    (daemon/status))
  "Each method this file sends, with the Lisp keys of its parameters.
A request names its parameters with these keys; each becomes its
wire key through `mevedel-execution-wire-key' (`:execution-id' is
sent as `executionId').  A key not listed for its method is an
error, so this table is all the facade sends.")

(defvar mevedel-execution--keys (make-hash-table :test #'eq)
  "Cache of wire keys (`:executionId') to Lisp keys (`:execution-id').")

(defvar mevedel-execution--wire-keys (make-hash-table :test #'eq)
  "Cache of Lisp keys (`:execution-id') to wire keys (`:executionId').")

(defun mevedel-execution-lisp-key (key)
  "Return the Lisp keyword for the wire keyword KEY.
`:executionId' gives `:execution-id'."
  (or (gethash key mevedel-execution--keys)
      (puthash key
               (let ((case-fold-search nil))
                 (intern (downcase
                          (replace-regexp-in-string
                           "\\([a-z0-9]\\)\\([A-Z]\\)" "\\1-\\2"
                           (symbol-name key)))))
               mevedel-execution--keys)))

(defun mevedel-execution-wire-key (key)
  "Return the wire keyword for the Lisp keyword KEY.
`:execution-id' gives `:executionId': it undoes
`mevedel-execution-lisp-key'."
  (or (gethash key mevedel-execution--wire-keys)
      (puthash key
               (let ((case-fold-search nil))
                 (intern (replace-regexp-in-string
                          "-\\([a-z0-9]\\)" (lambda (m) (upcase (substring m 1)))
                          (symbol-name key) t t)))
               mevedel-execution--wire-keys)))

(defun mevedel-execution--normalize (value)
  "Return VALUE from the wire as fresh Lisp data.
Objects become plists with kebab-case keyword keys, arrays become
lists, and JSON false and null become nil: once, here, so no caller
ever sees `:json-false'."
  (cond
   ((memq value '(:json-false :null)) nil)
   ((vectorp value) (mapcar #'mevedel-execution--normalize value))
   ((and (consp value) (keywordp (car value)))
    (let (out)
      (while value
        (push (mevedel-execution-lisp-key (car value)) out)
        (push (mevedel-execution--normalize (cadr value)) out)
        (setq value (cddr value)))
      (nreverse out)))
   ((consp value) (mapcar #'mevedel-execution--normalize value))
   (t value)))

(defun mevedel-execution--wire-params (method plist)
  "Return PLIST, METHOD's parameters with Lisp keys, ready for the wire.
Keys become wire keys and nil values are left out; values are sent
as they are.  A key `mevedel-execution-wire-params' does not list
for METHOD signals an error."
  (let ((known (or (assq method mevedel-execution-wire-params)
                   (error "mevedel-exec: %s is not in `mevedel-execution-wire-params'" method)))
        (out nil))
    (while plist
      (let ((key (car plist)))
        (unless (memq key (cdr known))
          (error "mevedel-exec: %s takes no %s" method key))
        (when (cadr plist)
          (push (mevedel-execution-wire-key key) out)
          (push (cadr plist) out)))
      (setq plist (cddr plist)))
    (nreverse out)))

(defun mevedel-execution--error-plist (error)
  "Return the Lisp error plist for a JSON-RPC ERROR object."
  (let* ((err (mevedel-execution--normalize error))
         (data (plist-get err :data)))
    (list :code (plist-get err :code)
          :kind (or (plist-get data :kind) "internal")
          :message (or (plist-get err :message) "unknown error"))))

;;;; The connection

(defclass mevedel-execution-rpc-connection (jsonrpc-process-connection)
  ((generation
    :initarg :generation
    :documentation "Which helper this is; sessions reopen on a new one.")
   (closing
    :initform nil
    :documentation "Non-nil once Emacs itself is shutting the helper down.")
   (daemon
    :initarg :daemon
    :initform nil
    :documentation "Non-nil for a connection to the helper daemon's socket."))
  :documentation "A JSON-RPC connection to one mevedel-exec helper.")

;;;; Handing messages to Lisp

;; jsonrpc calls its dispatchers and a request's continuations from
;; inside the process filter (on Emacs 28, with the process buffer
;; narrowed to the message being read).  Lisp that waits there for
;; more output runs the filter again inside itself, and the outer
;; filter then drops or repeats what the inner one read.  So the
;; filter only queues: what callers gave us runs from a timer.

(defvar mevedel-execution--in-filter nil
  "Non-nil while a helper connection's process filter runs.")

(defvar mevedel-execution--queue nil
  "Handlers waiting to run, oldest first, as (FUNCTION . ARGS).")

(defvar mevedel-execution--queue-last nil
  "The last cons of `mevedel-execution--queue', or nil.")

(defvar mevedel-execution--drain-timer nil
  "The timer that runs the queue, or nil.")

(defvar mevedel-execution--draining nil
  "Non-nil while queued handlers run.")

(defun mevedel-execution--schedule-drain ()
  "Arrange for the queued handlers to run, unless they already do."
  (when (and mevedel-execution--queue
             (not mevedel-execution--draining)
             (not mevedel-execution--drain-timer))
    (setq mevedel-execution--drain-timer
          (run-at-time 0 nil #'mevedel-execution--drain))))

(defun mevedel-execution--defer (function &rest args)
  "Queue FUNCTION with ARGS, to run after everything queued before it."
  (let ((cell (list (cons function args))))
    (if mevedel-execution--queue
        (setcdr mevedel-execution--queue-last cell)
      (setq mevedel-execution--queue cell))
    (setq mevedel-execution--queue-last cell))
  (mevedel-execution--schedule-drain))

(defun mevedel-execution--drain ()
  "Run the queued handlers, oldest first, until none is left.
Inside a handler this does nothing: the handler's caller goes on
with the queue once it returns.  Inside the process filter it does
nothing either; the filter schedules the queue as it leaves."
  (when mevedel-execution--drain-timer
    (cancel-timer mevedel-execution--drain-timer)
    (setq mevedel-execution--drain-timer nil))
  (unless (or mevedel-execution--draining mevedel-execution--in-filter)
    (unwind-protect
        (let ((mevedel-execution--draining t))
          (while mevedel-execution--queue
            (let ((job (car mevedel-execution--queue)))
              (setq mevedel-execution--queue (cdr mevedel-execution--queue))
              (unless mevedel-execution--queue
                (setq mevedel-execution--queue-last nil))
              ;; A handler may run inside a caller's synchronous call:
              ;; it must not change that caller's buffer or match data.
              (save-current-buffer
                (save-match-data
                  (apply (car job) (cdr job)))))))
      ;; A quit or a throw out of a handler leaves the rest for later.
      (mevedel-execution--schedule-drain))))

(defconst mevedel-execution-stderr-buffer " *mevedel-exec stderr*"
  "The buffer holding what the running helper writes to stderr.
Its name starts with a space, so it is hidden from buffer lists;
`mevedel-execution-show-stderr' shows it.  A new helper starts it
afresh.")

(defvar mevedel-execution--daemon-log nil
  "The log file of the helper daemon last connected to, or nil.")

(defun mevedel-execution-show-stderr ()
  "Display what the helper wrote to stderr: its log.
With the helper daemon, its log file."
  (interactive)
  (let ((buffer (if (eq mevedel-execution-connection 'daemon)
                    (and mevedel-execution--daemon-log
                         (file-readable-p mevedel-execution--daemon-log)
                         (with-current-buffer (find-file-noselect mevedel-execution--daemon-log)
                           (revert-buffer t t t)
                           (read-only-mode 1)
                           (current-buffer)))
                  (get-buffer mevedel-execution-stderr-buffer))))
    (unless buffer (user-error "No helper has run in this Emacs yet"))
    (display-buffer buffer)))

(cl-defmethod initialize-instance :after ((conn mevedel-execution-rpc-connection) &optional _slots)
  "Note in `mevedel-execution--in-filter' when CONN's process filter runs.
Without event logging nothing of CONN reaches a visible events
buffer, and jsonrpc's own exit banner stays out of the echo area
\(and out of a batch Emacs's output): deaths are reported here."
  (let* ((proc (jsonrpc--process conn))
         (filter (process-filter proc))
         (sentinel (process-sentinel proc)))
    (set-process-filter
     proc
     (lambda (proc string)
       (unwind-protect
           (let ((mevedel-execution--in-filter t))
             (funcall filter proc string))
         (mevedel-execution--schedule-drain))))
    (set-process-sentinel
     proc
     (lambda (proc change)
       (cl-letf (((symbol-function 'jsonrpc--message) #'ignore))
         (funcall sentinel proc change))))
    (unless (and (integerp mevedel-execution-events-buffer-size)
                 (> mevedel-execution-events-buffer-size 0))
      (when (eql mevedel-execution-events-buffer-size 0)
        ;; jsonrpc copies every stderr line into the events buffer
        ;; and writes a banner there at exit, logging or not.
        (let ((stderr (process-get proc 'jsonrpc-stderr)))
          (when (buffer-live-p stderr)
            (with-current-buffer stderr
              (kill-local-variable 'after-change-functions))))
        (setf (slot-value conn '-events-buffer)
              (get-buffer-create " *mevedel-exec events*"))))))

(defun mevedel-execution--generation (conn)
  "Return the generation of CONN's helper."
  (oref conn generation))

(defun mevedel-execution--closing (conn)
  "Return non-nil if Emacs is shutting CONN's helper down."
  (oref conn closing))

(defun mevedel-execution--set-closing (conn)
  "Note that CONN's helper is being shut down on purpose."
  (oset conn closing t))

(defvar mevedel-execution--current nil
  "The connection to the running helper, or nil.")

(defvar mevedel-execution--generation 0
  "Generation of the most recently started helper.")

(defvar mevedel-execution--sessions nil
  "Sessions opened and not torn down.")

(defvar mevedel-execution--deliveries (make-hash-table :test #'equal)
  "What the mailbox sink was handed, by (SESSION-ID . DELIVERY-ID).
The value is a fresh cons (STATE . GENERATION): STATE is `pending'
until the sink acknowledges, then `durable'; GENERATION is that of
the helper that sent it.  A failed delivery is removed, so its
resend reaches the sink again.  Entries outlive their helper: the
next helper re-makes a delivery that was pending when its
predecessor died under the same id, and one the sink already made
durable must then be acknowledged again, not handed over twice.  A
session's entries go when it is torn down, and each session keeps
at most `mevedel-execution-remembered-deliveries' durable ones.")

(defcustom mevedel-execution-remembered-deliveries 1024
  "How many durable delivery ids each session remembers, newest kept.
The helper resends a delivery only until it has our durable ack
on record, a few seconds at most, so only the latest few matter."
  :type 'natnum
  :group 'mevedel-execution)

(defvar mevedel-execution--durable-ids (make-hash-table :test #'equal)
  "Per session id, (COUNT . IDS): its durable delivery ids, newest first.
It bounds what `mevedel-execution--deliveries' keeps of a session.")

(defun mevedel-execution--note-durable (session-id delivery-id)
  "Note that DELIVERY-ID of SESSION-ID is durable; forget the oldest ones.
Beyond twice `mevedel-execution-remembered-deliveries' durable ids,
the session's oldest are dropped down to that number."
  (let* ((cell (or (gethash session-id mevedel-execution--durable-ids)
                   (puthash session-id (cons 0 nil) mevedel-execution--durable-ids)))
         (keep mevedel-execution-remembered-deliveries))
    (setcar cell (1+ (car cell)))
    (push delivery-id (cdr cell))
    (when (> (car cell) (* 2 keep))
      (let ((last (nthcdr (1- keep) (cdr cell))))
        (dolist (old (cdr last))
          (let ((key (cons session-id old)))
            (when (eq (car-safe (gethash key mevedel-execution--deliveries)) 'durable)
              (remhash key mevedel-execution--deliveries))))
        (setcdr last nil)
        (setcar cell keep)))))

(defun mevedel-execution--forget-session-deliveries (session-id)
  "Forget every delivery of SESSION-ID: the helper dropped them."
  (remhash session-id mevedel-execution--durable-ids)
  (let (doomed)
    (maphash (lambda (key _value)
               (when (equal (car key) session-id) (push key doomed)))
             mevedel-execution--deliveries)
    (dolist (key doomed)
      (remhash key mevedel-execution--deliveries))))

(defun mevedel-execution--source-directory ()
  "Return the helper's source tree (the directory holding go.mod), or nil."
  (when mevedel-execution--source-file
    (let ((dir (locate-dominating-file mevedel-execution--source-file "go.mod")))
      (and dir (expand-file-name dir)))))

(defun mevedel-execution--installed-program ()
  "Return the helper built by `mevedel-execution-install-helper'."
  (expand-file-name "mevedel-exec" mevedel-execution-install-directory))

(defun mevedel-execution--program ()
  "Return the helper's executable, or signal that it is missing."
  (let ((program mevedel-execution-program))
    (or (and (file-name-absolute-p program) (file-executable-p program) program)
        (and (not (file-name-absolute-p program)) (executable-find program))
        (let ((installed (mevedel-execution--installed-program)))
          (and (file-executable-p installed) installed))
        (signal 'mevedel-execution-helper-missing
                (list (format "%s is not on exec-path; M-x mevedel-execution-install-helper builds it"
                              program))))))

(defun mevedel-execution--connection ()
  "Return a connection to a running helper, starting one if needed."
  (let ((conn mevedel-execution--current))
    (if (and conn (jsonrpc-running-p conn))
        conn
      (mevedel-execution--start-helper))))

(defun mevedel-execution--daemon-socket (program)
  "Start PROGRAM's daemon unless it runs; return its socket's file name."
  (with-temp-buffer
    (let ((status (call-process program nil t nil "daemon")))
      (goto-char (point-max))
      (skip-chars-backward " \t\n")
      (let ((last (buffer-substring-no-properties (line-beginning-position) (point))))
        (unless (and (eql status 0) (file-name-absolute-p last))
          (signal 'mevedel-execution-error
                  (list (format "the helper daemon did not start: %s"
                                (string-trim (buffer-string))))))
        last))))

(defun mevedel-execution--program-version (program)
  "Return the version PROGRAM says it is, or nil."
  (with-temp-buffer
    (when (eql 0 (ignore-errors (call-process program nil t nil "--version")))
      (goto-char (point-min))
      (and (looking-at "mevedel-exec \\([^ \n]+\\)") (match-string 1)))))

(defvar mevedel-execution--daemon-mismatch nil
  "(DAEMON-VERSION . PROGRAM-VERSION) when the daemon is not this Emacs's helper.")

(defun mevedel-execution--check-daemon-version (program info)
  "Say so when the daemon of INFO is another version than PROGRAM.
Interactively, offer to restart it when nothing runs in it."
  (let ((ours (mevedel-execution--program-version program))
        (theirs (plist-get info :server-version)))
    (setq mevedel-execution--daemon-mismatch
          (and ours theirs (not (equal ours theirs)) (cons theirs ours)))
    (when mevedel-execution--daemon-mismatch
      (message "mevedel-exec: the helper daemon runs version %s, this Emacs's helper is %s; M-x mevedel-execution-restart-daemon restarts it once nothing runs in it"
               theirs ours)
      (unless noninteractive
        (run-at-time 0 nil #'mevedel-execution--offer-daemon-restart)))))

(defun mevedel-execution--daemon-live (conn)
  "Return how many executions run in CONN's daemon, all sessions together."
  (let ((status (mevedel-execution--call conn 'daemon/status nil)))
    (apply #'+ 0 (mapcar (lambda (s) (or (plist-get s :live) 0))
                         (plist-get status :sessions)))))

(defun mevedel-execution--offer-daemon-restart ()
  "Offer to restart a daemon of another version, if nothing runs in it."
  (let ((conn mevedel-execution--current))
    (when (and mevedel-execution--daemon-mismatch conn (jsonrpc-running-p conn)
               (zerop (condition-case nil (mevedel-execution--daemon-live conn) (error 1)))
               (y-or-n-p (format "The helper daemon runs version %s, this Emacs's helper is %s; nothing runs in it.  Restart it? "
                                 (car mevedel-execution--daemon-mismatch)
                                 (cdr mevedel-execution--daemon-mismatch))))
      (mevedel-execution-restart-daemon))))

(defun mevedel-execution-restart-daemon ()
  "Restart the helper daemon once nothing runs in it, and reattach.
A daemon of another version than this Emacs's helper is replaced
by this one; every open session is opened again on the new one.
Refused while anything runs in the daemon, for any client."
  (interactive)
  (let ((conn (mevedel-execution--connection)))
    (unless (mevedel-execution--daemon-conn-p conn)
      (user-error "The helper is not the daemon (see `mevedel-execution-connection')"))
    (let ((live (mevedel-execution--daemon-live conn)))
      (when (> live 0)
        (user-error "%s still running in the helper daemon; restart it once nothing runs"
                    (mevedel-execution--plural live "command"))))
    (mevedel-execution-restart-helper)))

(defun mevedel-execution--daemon-conn-p (conn)
  "Return non-nil if CONN is a connection to the helper daemon."
  (and conn (oref conn daemon)))

(defun mevedel-execution--daemon-p ()
  "Return non-nil if work outlives this Emacs: the helper is the daemon."
  (let ((conn mevedel-execution--current))
    (if (and conn (jsonrpc-running-p conn))
        (mevedel-execution--daemon-conn-p conn)
      (eq mevedel-execution-connection 'daemon))))

(defun mevedel-execution--start-helper ()
  "Start the helper, shake hands with it, and return the connection.
In `daemon' mode (`mevedel-execution-connection') it connects to
the helper daemon, starting it first when none runs."
  (let* ((program (mevedel-execution--program))
         ;; The helper runs locally, whatever buffer we are called from.
         (default-directory (expand-file-name "~/"))
         (socket (and (eq mevedel-execution-connection 'daemon)
                      (mevedel-execution--daemon-socket program)))
         (_ (when socket
              (setq mevedel-execution--daemon-log
                    (expand-file-name "daemon.log" (file-name-directory socket)))))
         (generation (cl-incf mevedel-execution--generation))
         (conn (make-instance
                'mevedel-execution-rpc-connection
                :name "mevedel-exec"
                :daemon (and socket t)
                :generation generation
                :events-buffer-scrollback-size mevedel-execution-events-buffer-size
                :notification-dispatcher #'mevedel-execution--dispatch-notification
                :request-dispatcher #'mevedel-execution--dispatch-request
                :on-shutdown #'mevedel-execution--on-shutdown
                :process
                (lambda ()
                  (if socket
                      (make-network-process
                       :name "mevedel-exec"
                       :family 'local
                       :service socket
                       :coding 'utf-8-emacs-unix
                       :noquery t)
                    (make-process
                     :name "mevedel-exec"
                     :command (cons program mevedel-execution-program-arguments)
                     :connection-type 'pipe
                     :coding 'utf-8-emacs-unix
                     :noquery t
                     :stderr (get-buffer-create "*mevedel-exec stderr*")))))))
    (setq mevedel-execution--current conn)
    (let ((info (condition-case err
                    (mevedel-execution--call
                     conn 'initialize
                     (mevedel-execution--wire-params
                      'initialize
                      (list :client-name "mevedel-execution.el"
                            :client-version "0.1.0"
                            :protocol-version mevedel-execution-protocol-version)))
                  (error
                   (mevedel-execution--kill conn)
                   (signal (car err) (cdr err))))))
      (unless (eql (plist-get info :protocol-version)
                   mevedel-execution-protocol-version)
        (mevedel-execution--kill conn)
        (signal 'mevedel-execution-error
                (list (format "helper %s speaks protocol %s, this file speaks %s"
                              program (plist-get info :protocol-version)
                              mevedel-execution-protocol-version))))
      (when socket
        (mevedel-execution--check-daemon-version program info)))
    conn))

(defconst mevedel-execution--reconnect-tries 6
  "How many times a lost daemon connection is made again before giving up.
The waits between them double from half a second; after the last,
the next call tries again.")

(defun mevedel-execution--schedule-reconnect (try)
  "Reconnect to the daemon from a timer, for the TRY-th time (0 first)."
  (when (< try mevedel-execution--reconnect-tries)
    (run-at-time (* 0.5 (expt 2 (max 0 (1- try)))) nil
                 #'mevedel-execution--reconnect try)))

(defun mevedel-execution--reconnect (try)
  "Connect to the daemon again and reattach every open session.
TRY counts the attempts; a failure schedules the next one."
  (when (and mevedel-execution--sessions
             (not (and mevedel-execution--current
                       (jsonrpc-running-p mevedel-execution--current))))
    (condition-case err
        (dolist (session (reverse mevedel-execution--sessions))
          (mevedel-execution--ensure session))
      (error
       (message "mevedel-exec: reconnecting to the helper daemon: %s"
                (error-message-string err))
       (mevedel-execution--schedule-reconnect (1+ try))))))

(defun mevedel-execution--kill (conn)
  "Stop CONN's helper process without ceremony."
  (mevedel-execution--set-closing conn)
  (when (eq conn mevedel-execution--current)
    (setq mevedel-execution--current nil))
  (let ((proc (jsonrpc--process conn)))
    (when (process-live-p proc)
      (delete-process proc))))

(defun mevedel-execution--on-shutdown (conn)
  "Forget CONN, whose helper exited; report an unexpected death once.
Listeners of `mevedel-execution-event-functions' get an `exit' event."
  (when (eq conn mevedel-execution--current)
    (setq mevedel-execution--current nil))
  (let ((status (process-exit-status (jsonrpc--process conn)))
        (unexpected (not (mevedel-execution--closing conn)))
        (generation (mevedel-execution--generation conn)))
    ;; What the sink was handed is kept: the session's next helper
    ;; re-makes what was pending here under the same ids.
    (when unexpected
      (mevedel-execution--set-closing conn)
      (if (mevedel-execution--daemon-conn-p conn)
          (progn
            (message "mevedel-exec: the connection to the helper daemon was lost; reconnecting (what runs there goes on)")
            (mevedel-execution--schedule-reconnect 0))
        (message "mevedel-exec: the helper exited unexpectedly (status %s); pending requests were answered as lost, and the next call starts a new helper"
                 status)))
    ;; After the events and the lost answers read before it.
    (mevedel-execution--defer #'mevedel-execution--forget-live generation)
    (mevedel-execution--defer
     #'mevedel-execution--run-event
     'exit (list :generation generation :status status :unexpected unexpected))))

;;;; Requests

(defun mevedel-execution--run-callback (buffer callback value)
  "Call CALLBACK with VALUE, in BUFFER when it is still live.
An error in CALLBACK is reported, never thrown at the queue."
  (condition-case-unless-debug err
      (if (buffer-live-p buffer)
          (with-current-buffer buffer (funcall callback value))
        (with-temp-buffer (funcall callback value)))
    (error (message "mevedel-exec: error in callback: %s" (error-message-string err)))))

(defun mevedel-execution--send-or-lost (conn lost &rest args)
  "Send a request on CONN with ARGS for `jsonrpc--async-request-1'.
A connection that died before Emacs read its end fails the write
itself (the daemon was killed, say): that is a lost answer, so LOST
is called and (nil) returned, as if the helper had died after the
send.  Any other error is signalled."
  (condition-case err
      (apply #'jsonrpc--async-request-1 conn args)
    (error
     (if (process-live-p (jsonrpc--process conn))
         (signal (car err) (cdr err))
       (funcall lost)
       (list nil)))))

(cl-defun mevedel-execution--async (conn method params &key on-result on-error on-lost timeout now)
  "Send METHOD with PARAMS on CONN; return a handle for `mevedel-execution-abort'.
PARAMS is the wire object (see `mevedel-execution--wire-params').
ON-RESULT receives the normalized result, ON-ERROR the error plist.
ON-LOST, called with a reason string, replaces ON-ERROR when the
helper died before answering.  TIMEOUT is in seconds; nil waits
as long as it takes.  The callbacks run in the buffer current now
if it is still live, queued after what the helper sent before (see
`mevedel-execution--defer'); NOW non-nil calls them at once, inside
the process filter, which only this file's bookkeeping may ask."
  (let* ((buffer (current-buffer))
         (hand (lambda (callback value)
                 (if now
                     (mevedel-execution--run-callback buffer callback value)
                   (mevedel-execution--defer
                    #'mevedel-execution--run-callback buffer callback value))))
         (lost-why (lambda ()
                     (if (mevedel-execution--daemon-conn-p conn)
                         "the connection to the helper daemon was lost before it answered; if the daemon still runs, the command goes on there and its result comes through the mailbox"
                       "the helper died before it answered")))
         (id-and-timer
          (mevedel-execution--send-or-lost
           conn (lambda ()
                  (let ((why (funcall lost-why)))
                    (cond (on-lost (funcall hand on-lost why))
                          (on-error (funcall hand on-error
                                             (list :code -1 :kind "lost" :message why))))))
           method params
           :success-fn
           (lambda (result)
             (when on-result
               (funcall hand on-result (mevedel-execution--normalize result))))
           :error-fn
           (lambda (error)
             (let ((err (mevedel-execution--error-plist error)))
               (if (and on-lost (eql (plist-get err :code) -1))
                   (funcall hand on-lost (funcall lost-why))
                 (when on-error
                   (funcall hand on-error err)))))
           :timeout-fn
           (lambda ()
             (when on-error
               (funcall hand on-error
                        (list :code -32005 :kind "timeout"
                              :message (format "%s: no answer within %s s" method timeout)))))
           :timeout timeout)))
    ;; The helper's generation, not the connection: a handle is
    ;; printed where a person evaluates a start, and it stays short.
    (cons (mevedel-execution--generation conn) (car id-and-timer))))

(defun mevedel-execution-abort (handle)
  "Abort the request HANDLE, as returned by an asynchronous call.
The helper is sent `$/cancelRequest': a start that has not yielded
yet is aborted (its callback receives the final observation, with
termination \"aborted\"); a waiting observation answers at once.
HANDLE is (GENERATION . ID): a request of a helper that has exited
since is not sent anywhere."
  (pcase-let* ((`(,generation . ,id) handle)
               (conn mevedel-execution--current))
    (when (and conn id (eql generation (mevedel-execution--generation conn))
               (jsonrpc-running-p conn))
      (jsonrpc-notify conn '$/cancelRequest
                      (mevedel-execution--wire-params '$/cancelRequest (list :id id))))))

(defun mevedel-execution--call (conn method params &optional timeout)
  "Send METHOD with PARAMS on CONN and wait for the result.
PARAMS is the wire object (see `mevedel-execution--wire-params').
Wait at most TIMEOUT seconds (default `mevedel-execution-request-timeout').
A helper error signals `mevedel-execution-helper-error' with the
error plist as data.  \\[keyboard-quit] while waiting cancels the
request in the helper too.

Before returning, the handlers queued for what the helper sent
before the answer have run, unless this call is made from one of
them: they then run once it returns.  Called inside the helper's
process filter, where waiting would corrupt the stream, it signals
`mevedel-execution-error' instead."
  (when mevedel-execution--in-filter
    (signal 'mevedel-execution-error
            (list (format "%s: a synchronous call cannot wait inside the helper's process filter; use the form with a callback"
                          method))))
  ;; The answer is noted, never thrown: a throw would leave the process
  ;; filter in the middle of its input, and messages read in the same
  ;; chunk (a delivery, say) would wait there until the helper next
  ;; wrote something.
  (let* ((timeout (or timeout mevedel-execution-request-timeout))
         (proc (jsonrpc--process conn))
         ;; jsonrpc's timer answers at TIMEOUT; this is only a backstop.
         (deadline (+ (float-time) timeout 1))
         (outcome nil)
         (handle
          (mevedel-execution--async
           conn method params
           :on-result (lambda (r) (setq outcome (list 'ok r)))
           :on-error (lambda (e) (setq outcome (list 'error e)))
           :on-lost (lambda (why)
                      (setq outcome (list 'error (list :code -1 :kind "lost" :message why))))
           :timeout timeout
           :now t)))
    (condition-case nil
        (while (not outcome)
          (if (> (float-time) deadline)
              (setq outcome
                    (list 'error (list :code -32005 :kind "timeout"
                                       :message (format "no answer within %s s" timeout))))
            ;; Returns as soon as the helper wrote; the bound lets a
            ;; timer's answer (the timeout) end the wait.
            (accept-process-output (and (process-live-p proc) proc) 0.1)))
      (quit
       (mevedel-execution-abort handle)
       (signal 'quit nil)))
    ;; What came before the answer is handled before the call returns:
    ;; a wake decided before an `owner/state' reply, say.
    (mevedel-execution--drain)
    (pcase outcome
      (`(ok ,result) result)
      (`(error ,err)
       (signal 'mevedel-execution-helper-error
               (list (format "%s: %s" method (plist-get err :message)) err))))))

;;;;; The public request API

;; The sister files (spool, transcript, panel) and anything built on
;; this file send their requests through these two functions and never
;; touch the connection.

(defun mevedel-execution--session-params (session method params)
  "Return METHOD's wire object for SESSION: Lisp PARAMS and SESSION's id."
  (mevedel-execution--wire-params
   method (cons :session-id (cons (mevedel-execution-session-id session) params))))

(defun mevedel-execution-request (session method &optional params timeout)
  "Send METHOD with PARAMS for SESSION, wait, and return the result.
PARAMS is a plist with Lisp keys (`:execution-id', ...), without
the session's id, which is added; keys with a nil value are left
out, and METHOD must take every key (`mevedel-execution-wire-params').
The result is a fresh plist with Lisp keys.  SESSION is reopened
first if its helper died.  Wait at most TIMEOUT seconds (default
`mevedel-execution-request-timeout').  A helper error signals
`mevedel-execution-helper-error' with the error plist as data;
\\[keyboard-quit] while waiting cancels the request in the helper too.
Made from inside the helper's process filter, the call signals
`mevedel-execution-error': pass callbacks to
`mevedel-execution-request-async' there."
  (let ((conn (mevedel-execution--ensure session)))
    (mevedel-execution--call conn method
                             (mevedel-execution--session-params session method params)
                             timeout)))

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
  (let ((conn (mevedel-execution--ensure session)))
    (mevedel-execution--async conn method
                              (mevedel-execution--session-params session method params)
                              :on-result on-result :on-error on-error
                              :on-lost on-lost :timeout timeout)))

(defun mevedel-execution--dispatch-request (_conn method _params)
  "Answer a request from the helper; it sends none today."
  (jsonrpc-error :code -32601 :message (format "method not found: %s" method)))

(defun mevedel-execution--dispatch-notification (conn method params)
  "Queue the notification METHOD with PARAMS from CONN's helper.
It is routed after everything queued before it; see
`mevedel-execution--defer'."
  (mevedel-execution--defer #'mevedel-execution--route-notification
                            conn method params))

(defun mevedel-execution--route-notification (conn method params)
  "Route the notification METHOD with PARAMS from CONN's helper.
Listeners and sinks run in a temporary buffer, not the caller's.  No
error leaves this function: the queue goes on after it."
  (condition-case err
      (mevedel-execution-handle-notification conn method params)
    (error (message "mevedel-exec: handling %s: %s" method (error-message-string err)))))

(cl-defgeneric mevedel-execution-handle-notification (conn method params)
  "Handle the notification METHOD (a symbol) with PARAMS from CONN's helper.
PARAMS is the wire object, not yet normalized.  There is a method
for each notification the helper sends; the default warns once
about a notification nobody handles.  It runs from a timer, never
inside the process filter.")

(defvar mevedel-execution--unknown-notifications nil
  "Notification methods already warned about: each is reported once.")

(cl-defmethod mevedel-execution-handle-notification (_conn method _params)
  "Warn, once per METHOD, that the helper sent a notification unknown here.
A helper newer than this file may send one; it is ignored."
  (unless (memq method mevedel-execution--unknown-notifications)
    (push method mevedel-execution--unknown-notifications)
    (display-warning 'mevedel-execution
                     (format "the helper sent the notification %s, which this Emacs does not handle; ignored"
                             method))))

(defun mevedel-execution--event (type params)
  "Hand the event TYPE with wire PARAMS to the listeners, if there are any.
Most notifications are events, often with nobody listening: they
cost nothing then."
  (when (default-value 'mevedel-execution-event-functions)
    (with-temp-buffer
      (mevedel-execution--run-event type params))))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'exec/progress)) params)
  "Hand the `progress' event PARAMS to `mevedel-execution-event-functions'."
  (mevedel-execution--event 'progress params))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'exec/changed)) params)
  "Merge the executions that changed, PARAMS, into their session's live table.
Then hand listeners the `changed' event: `:session-id', `:changed'
\=(the facts the helper sent) and `:live' (every live execution of
the session, in `exec/list' order)."
  (let* ((plist (mevedel-execution--normalize params))
         (session-id (plist-get plist :session-id))
         (changed (plist-get plist :changed)))
    (mevedel-execution--live-merge session-id changed)
    (when (default-value 'mevedel-execution-event-functions)
      (with-temp-buffer
        (mevedel-execution--emit
         'changed (list :session-id session-id :changed changed
                        :live (mevedel-execution--live-list session-id)))))))

;;;;; The live table

;; `exec/changed' carries only the executions that changed, a settled
;; one once with its final facts.  The table of each session is seeded
;; by an `exec/list' sent when it opens (whose answer the helper places
;; in the stream of notifications, so merging from there on stays true)
;; and then merged from every `exec/changed'.

(defvar mevedel-execution--live (make-hash-table :test #'equal)
  "The live executions of each session, as its helper last said.
Key: a session id; value: a hash table from execution id to facts.")

(defun mevedel-execution--live-table (session-id)
  "Return the live table of SESSION-ID, made empty if it has none."
  (or (gethash session-id mevedel-execution--live)
      (puthash session-id (make-hash-table :test #'equal) mevedel-execution--live)))

(defun mevedel-execution--live-merge (session-id facts-list)
  "Merge FACTS-LIST into the live table of SESSION-ID.
A settled execution leaves it; any other is added or replaced."
  (let ((table (mevedel-execution--live-table session-id)))
    (dolist (facts facts-list)
      (let ((id (plist-get facts :execution-id)))
        (if (equal (plist-get facts :state) "settled")
            (remhash id table)
          ;; A copy: listeners may change what they are handed.
          (puthash id (copy-tree facts) table))))))

(defun mevedel-execution--live-seed (session-id executions)
  "Make EXECUTIONS, an `exec/list' answer, the live table of SESSION-ID."
  (clrhash (mevedel-execution--live-table session-id))
  (mevedel-execution--live-merge session-id executions))

(defun mevedel-execution--live-before-p (a b)
  "Return non-nil if facts A come before B in `exec/list' order.
Started ones by start, then the others; ties by id (arrival)."
  (let ((sa (plist-get a :started-at))
        (sb (plist-get b :started-at)))
    (cond ((and sa (not sb)) t)
          ((and sb (not sa)) nil)
          ((and sa (not (equal sa sb))) (string< sa sb))
          (t (string< (plist-get a :execution-id) (plist-get b :execution-id))))))

(defun mevedel-execution--live-list (session-id)
  "Return fresh facts of the live executions of SESSION-ID, in list order."
  (let ((table (gethash session-id mevedel-execution--live))
        (out nil))
    (when table
      (maphash (lambda (_id facts) (push (copy-tree facts) out)) table))
    (sort out #'mevedel-execution--live-before-p)))

(defun mevedel-execution--forget-live (generation)
  "Empty the live tables of the sessions open on helper GENERATION.
That helper exited: nothing it ran is live any more."
  (dolist (session mevedel-execution--sessions)
    (when (eql (mevedel-execution-session-generation session) generation)
      (remhash (mevedel-execution-session-id session) mevedel-execution--live))))

(defun mevedel-execution-live (session)
  "Return the facts of every live execution of SESSION, every owner's.
This asks the helper nothing: it is the table that `exec/changed'
keeps, as of the last event handled, in `exec/list' order."
  (mevedel-execution--live-list (mevedel-execution-session-id session)))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'exec/settled)) params)
  "Hand the `settled' event PARAMS to `mevedel-execution-event-functions'."
  (mevedel-execution--event 'settled params))

(cl-defmethod mevedel-execution-handle-notification (_conn (_method (eql 'mailbox/delivered)) params)
  "Hand the `delivered' event PARAMS to `mevedel-execution-event-functions'."
  (mevedel-execution--event 'delivered params))

(cl-defmethod mevedel-execution-handle-notification (conn (_method (eql 'session/wake)) params)
  "Hand the wake PARAMS from CONN to the listeners, then the wake functions."
  (with-temp-buffer
    (let* ((wake (mevedel-execution--normalize params))
           (session-id (plist-get wake :session-id))
           (owner (plist-get wake :owner))
           (ids (copy-sequence (plist-get wake :delivery-ids))))
      ;; A listener may change WAKE: what the wake needs is read first.
      (mevedel-execution--emit 'wake wake)
      (mevedel-execution--wake conn session-id owner ids))))

(cl-defmethod mevedel-execution-handle-notification (conn (_method (eql 'mailbox/deliver)) params)
  "Hand the delivery PARAMS from CONN to the mailbox sink."
  (with-temp-buffer (mevedel-execution--deliver conn params)))

(defun mevedel-execution--run-event (type params)
  "Give each of `mevedel-execution-event-functions' its copy of PARAMS.
TYPE names the event."
  (when mevedel-execution-event-functions
    (mevedel-execution--emit type (mevedel-execution--normalize params))))

(defun mevedel-execution--emit (type plist)
  "Give each of `mevedel-execution-event-functions' its copy of PLIST.
TYPE names the event.  PLIST is fresh and nobody else's: the last
listener gets it, each other one a copy taken before any ran."
  (let ((fns nil))
    (run-hook-wrapped 'mevedel-execution-event-functions
                      (lambda (fn) (push fn fns) nil))
    (setq fns (nreverse fns))
    (while fns
      (let ((fn (pop fns))
            (arg (if fns (copy-tree plist) plist)))
        (condition-case-unless-debug err
            (funcall fn type arg)
          (error (message "mevedel-exec: error in %s listener: %s"
                          type (error-message-string err))))))))

(defun mevedel-execution--session-on (conn session-id)
  "Return the open session SESSION-ID on CONN's helper, or nil."
  (let ((session (mevedel-execution-find-session session-id)))
    (and session conn
         (eql (mevedel-execution-session-generation session)
              (mevedel-execution--generation conn))
         session)))

(defun mevedel-execution--wake (conn session-id owner ids)
  "Run `mevedel-execution-wake-functions' for a wake from CONN.
It is for OWNER of SESSION-ID, about the deliveries IDS.  A wake
for a session that is not open on CONN's helper is dropped."
  (let ((session (mevedel-execution--session-on conn session-id)))
    (when session
      (run-hook-wrapped
       'mevedel-execution-wake-functions
       (lambda (fn)
         (condition-case err
             (funcall fn session owner (copy-sequence ids))
           (error (message "mevedel-exec: error in a wake function: %s"
                           (error-message-string err))))
         nil)))))

;; The sink's memory outlives a helper.  A delivery pending when its
;; helper died is re-made by the next helper's open under the same id
;; (and never wakes); the sink that already made it durable gets no
;; second copy, and the new helper gets the durable ack again.  A sink
;; still holding one answers whichever helper the session is open on
;; by then, through `mevedel-execution--session-connection'.

(defun mevedel-execution--session-connection (session-id)
  "Return the running connection SESSION-ID is open on now, or nil."
  (let ((conn mevedel-execution--current))
    (and conn (jsonrpc-running-p conn)
         (mevedel-execution--session-on conn session-id)
         conn)))

(defun mevedel-execution--send-ack (conn session-id delivery-id error)
  "Answer the delivery DELIVERY-ID of SESSION-ID on CONN.
ERROR nil says durable, a string says why it was not kept.  CONN
nil or dead is not asked: the session's next helper re-makes what
was pending, and the answer is repeated then."
  (when (and conn (jsonrpc-running-p conn))
    (mevedel-execution--async
     conn 'mailbox/ack
     (mevedel-execution--wire-params
      'mailbox/ack (list :session-id session-id
                         :delivery-id delivery-id
                         :durable (unless error t)
                         :error error))
     ;; A lost ack costs nothing: the helper sends the delivery again,
     ;; and the answer is repeated from `mevedel-execution--deliveries'.
     :timeout mevedel-execution-request-timeout)))

(defun mevedel-execution--deliver (conn params)
  "Hand the delivery PARAMS from CONN's helper to the mailbox sink.
The sink gets it with an ack function that sends `mailbox/ack'
once; see `mevedel-execution-mailbox-delivery-function'."
  (let* ((record (mevedel-execution--normalize params))
         (delivery-id (plist-get record :delivery-id))
         (session-id (plist-get record :session-id))
         (key (cons session-id delivery-id))
         (state (car-safe (gethash key mevedel-execution--deliveries)))
         (sink mevedel-execution-mailbox-delivery-function))
    (cond
     ;; A session torn down was closed in the helper, which dropped its
     ;; deliveries: one still in the pipe has nobody to answer.
     ((not (mevedel-execution--session-on conn session-id)) nil)
     ;; Our durable ack was lost or came late, or this helper re-made
     ;; what an earlier one had sent: say it again.
     ((eq state 'durable)
      (mevedel-execution--send-ack conn session-id delivery-id nil))
     ;; The sink holds it and will answer through its ack.
     ((eq state 'pending) nil)
     ((not (functionp sink))
      (mevedel-execution--send-ack conn session-id delivery-id
                                   "no mailbox sink in this Emacs"))
     (t
      (let* ((handed (cons 'pending (mevedel-execution--generation conn)))
             (done nil)
             (ack (lambda (&optional error)
                    (unless done
                      (setq done t)
                      (let ((error (and error (format "%s" error))))
                        ;; The helper takes an empty error for no error.
                        (when (equal error "")
                          (setq error "the mailbox sink failed"))
                        ;; Unless the session was torn down since, which
                        ;; dropped the delivery: then nobody waits for the
                        ;; answer, and nothing is kept.
                        (when (eq (gethash key mevedel-execution--deliveries) handed)
                          (if error
                              (remhash key mevedel-execution--deliveries)
                            (puthash key (cons 'durable (cdr handed))
                                     mevedel-execution--deliveries)
                            (mevedel-execution--note-durable session-id delivery-id))
                          ;; To the helper the session is open on now,
                          ;; which may not be the one that sent it.
                          (mevedel-execution--send-ack
                           (mevedel-execution--session-connection session-id)
                           session-id delivery-id error))))
                    nil)))
        (puthash key handed mevedel-execution--deliveries)
        ;; Not `condition-case-unless-debug': under `debug-on-error' the
        ;; delivery would stay pending here forever, never to be resent.
        (condition-case err
            (funcall sink record ack)
          (error
           (if done
               (message "mevedel-exec: error in the mailbox sink after its ack: %s"
                        (error-message-string err))
             (funcall ack (format "the mailbox sink failed: %s"
                                  (error-message-string err)))))))))))

;;;; Sessions

(cl-defstruct (mevedel-execution-session
               (:constructor mevedel-execution--make-session)
               (:copier nil))
  "An agent conversation's executions, held in the helper."
  (id nil :read-only t :documentation "The session id.")
  (state-dir nil :documentation "Where its spools live (its artifact directory).")
  (limits nil :read-only t :documentation "Wire plist of limits, or nil.")
  (generation nil :documentation "The helper generation it is open on.")
  (id-prefix nil :documentation "Prefix of execution ids on that helper.")
  (recovered nil :documentation "Facts of the executions its last open marked lost.")
  (busy-owners nil :documentation "Owners last said busy; told again on a new helper.")
  (retiring nil :documentation "Begun retirements: (OWNER FRONTIER . GENERATION) each."))

(defun mevedel-execution--open-on (conn session)
  "Open SESSION on CONN's helper."
  (let ((before (mevedel-execution-session-generation session))
        (info nil))
    ;; The session is CONN's already while it opens: the deliveries its
    ;; recovery re-makes may come before the answer, and they are
    ;; handled (and acknowledged) before the call returns.
    (setf (mevedel-execution-session-generation session)
          (mevedel-execution--generation conn))
    (condition-case err
        (setq info (mevedel-execution--call
                    conn 'session/open
                    (mevedel-execution--session-params
                     session 'session/open
                     (list :state-dir (mevedel-execution-session-state-dir session)
                           :limits (mevedel-execution-session-limits session)))))
      ((error quit)
       (setf (mevedel-execution-session-generation session) before)
       (signal (car err) (cdr err))))
    (setf (mevedel-execution-session-id-prefix session)
          (plist-get info :id-prefix))
    (mevedel-execution--seed-live conn session)
    (setf (mevedel-execution-session-recovered session)
          (plist-get info :recovered))
    ;; A new helper thinks every owner idle: one that is busy would be
    ;; woken in the middle of its turn.
    (dolist (owner (mevedel-execution-session-busy-owners session))
      (mevedel-execution--call
       conn 'owner/state
       (mevedel-execution--session-params session 'owner/state
                                          (list :owner owner :state "busy"))))
    info))

(defun mevedel-execution--seed-live (conn session)
  "Seed SESSION's live table on CONN's helper from an `exec/list'.
Its answer is handled in the order the helper sent it among the
`exec/changed' events, which then merge into what it listed."
  (let ((session-id (mevedel-execution-session-id session)))
    (clrhash (mevedel-execution--live-table session-id))
    (mevedel-execution--async
     conn 'exec/list
     (mevedel-execution--session-params session 'exec/list (list :as "user"))
     :on-result (lambda (result)
                  (mevedel-execution--live-seed session-id (plist-get result :executions)))
     :on-error (lambda (err)
                 (message "mevedel-exec: listing %s: %s" session-id (plist-get err :message))))))

(defun mevedel-execution--ensure (session)
  "Return a connection on which SESSION is open, reopening it if needed.
After the helper died, the session opens again on the new one."
  (unless (mevedel-execution-session-p session)
    (signal 'wrong-type-argument (list 'mevedel-execution-session-p session)))
  (unless (memq session mevedel-execution--sessions)
    (signal 'mevedel-execution-error
            (list (format "session %s was torn down" (mevedel-execution-session-id session)))))
  (let ((conn (mevedel-execution--connection)))
    (unless (eql (mevedel-execution-session-generation session)
                 (mevedel-execution--generation conn))
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

(defun mevedel-execution-open-session (id state-dir &optional limits)
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
next call, and the slot then says what that open recovered."
  (interactive (mevedel-execution--read-open-session))
  (unless (and (stringp id) (not (string-empty-p id)))
    (signal 'wrong-type-argument (list 'stringp id)))
  (unless (stringp state-dir)
    (signal 'wrong-type-argument (list 'stringp state-dir)))
  (if (and (called-interactively-p 'any) (mevedel-execution-find-session id))
      (progn (message "mevedel-exec: session %s is open already" id)
             (mevedel-execution-find-session id))
    (let ((session (mevedel-execution--open-session id state-dir limits)))
      (when (called-interactively-p 'any)
        (message "mevedel-exec: session %s open, output in %s"
                 id (abbreviate-file-name (mevedel-execution-session-state-dir session))))
      session)))

(defun mevedel-execution--open-session (id state-dir limits)
  "Open the session ID in STATE-DIR with LIMITS; return it."
  (let ((session (mevedel-execution--make-session
                  :id id :state-dir (expand-file-name state-dir) :limits limits)))
    ;; Open already while the helper opens it: deliveries an earlier
    ;; helper left pending in STATE-DIR may come before the answer.
    (push session mevedel-execution--sessions)
    (condition-case err
        (mevedel-execution--open-on (mevedel-execution--connection) session)
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
    (mevedel-execution--forget-session-deliveries
     (mevedel-execution-session-id session))
    (remhash (mevedel-execution-session-id session) mevedel-execution--live)
    (let ((conn mevedel-execution--current))
      (when (and conn (jsonrpc-running-p conn)
                 (eql (mevedel-execution-session-generation session)
                      (mevedel-execution--generation conn)))
        (condition-case err
            (mevedel-execution--call
             conn 'session/close
             (mevedel-execution--session-params session 'session/close nil) 30)
          (mevedel-execution-error
           (message "mevedel-exec: closing %s: %s"
                    (mevedel-execution-session-id session) (error-message-string err))))))))

(defun mevedel-execution-close-session (session)
  "Close SESSION: stop what runs in it and forget it; its logs stay on disk.
Interactively, read the session (the current buffer's by default)
and ask first when commands still run in it.  Return the number
of commands that were running."
  (interactive (list (mevedel-execution-read-session "Close session")))
  (let ((live (if (mevedel-execution--session-connection (mevedel-execution-session-id session))
                  (condition-case nil (mevedel-execution-count-user session) (error 0))
                0)))
    (when (and (called-interactively-p 'any) (> live 0)
               (not (yes-or-no-p (format "Session %s has %s; stop and close? "
                                         (mevedel-execution-session-id session)
                                         (mevedel-execution--plural live "running command")))))
      (user-error "Not closed"))
    (mevedel-execution-teardown-session session)
    (when (called-interactively-p 'any)
      (message "mevedel-exec: closed session %s%s" (mevedel-execution-session-id session)
               (if (> live 0) (format ", %s stopped" (mevedel-execution--plural live "command")) "")))
    live))

(defun mevedel-execution-detach ()
  "Leave the helper daemon: close the connection, let its work go on.
The sessions stay open there; an Emacs that opens one again later
attaches to it.  This Emacs forgets them.  It runs from
`kill-emacs-hook' in `daemon' mode, in place of ending every
execution."
  (interactive)
  (let ((conn mevedel-execution--current))
    (run-hook-with-args 'mevedel-execution-teardown-functions nil nil)
    (setq mevedel-execution--sessions nil)
    (clrhash mevedel-execution--live)
    (when conn (mevedel-execution--kill conn))
    (mevedel-execution--drain)))

(defun mevedel-execution-teardown-all ()
  "Close every session and shut the helper down.
Every execution ends, one-shots and helpers with their teardown
functions, and scratch directories are removed; it runs from
`kill-emacs-hook'.  With the helper daemon it detaches instead
\(`mevedel-execution-detach'): what runs goes on there."
  (if (mevedel-execution--daemon-conn-p mevedel-execution--current)
      (mevedel-execution-detach)
    (mevedel-execution--teardown-child)))

(defun mevedel-execution--teardown-child ()
  "Close every session and shut the child helper down."
  (run-hook-with-args 'mevedel-execution-teardown-functions nil nil)
  (setq mevedel-execution--sessions nil)
  (clrhash mevedel-execution--deliveries)
  (clrhash mevedel-execution--durable-ids)
  (clrhash mevedel-execution--live)
  (let ((conn mevedel-execution--current))
    (when conn (mevedel-execution--shutdown conn)))
  ;; The lost answers and the exit event the kill queued, in the
  ;; caller's extent (when it is not itself a queued handler).
  (mevedel-execution--drain))

(defun mevedel-execution--shutdown (conn)
  "Shut CONN's helper down: it ends every execution, then exits."
  (mevedel-execution--set-closing conn)
  (let ((proc (jsonrpc--process conn))
        (deadline (+ (float-time) 5)))
    ;; Inside the process filter nothing may wait: the kill will do.
    (when (and (jsonrpc-running-p conn) (not mevedel-execution--in-filter))
      ;; The helper ends every execution, then exits at EOF.
      (ignore-errors (mevedel-execution--call conn 'shutdown nil 30))
      (ignore-errors (process-send-eof proc))
      (while (and (process-live-p proc) (< (float-time) deadline))
        (accept-process-output proc 0.05))))
  (mevedel-execution--kill conn))

(add-hook 'kill-emacs-hook #'mevedel-execution-teardown-all)

;;;; What a person runs

;; The commands below are for a person at M-x, not for the agent: they
;; prompt, confirm before ending live work, and report in words.

(defvar-local mevedel-execution-buffer-session nil
  "The session the current buffer shows (a panel, an output buffer...).
Commands that prompt for a session offer it first.")

(defcustom mevedel-execution-person-directory
  (locate-user-emacs-file "mevedel-exec/sessions/")
  "Where the sessions a person opens keep their output, one directory each."
  :type 'directory)

(defvar mevedel-execution-restart-hook nil
  "Hook run after `mevedel-execution-restart-helper' reopened the sessions.")

(defun mevedel-execution-person-session-id (&optional directory)
  "Return the id of the person's session for DIRECTORY's project.
DIRECTORY defaults to `default-directory'.  A local directory's
project is what `project-current' finds, else the directory; a
remote one (a TRAMP name) counts by its host, so nothing is asked
of the host to name it."
  (let* ((dir (file-name-as-directory (expand-file-name (or directory default-directory))))
         (remote (file-remote-p dir))
         (root (cond (remote remote)
                     ((require 'project nil t)
                      (let ((project (ignore-errors (project-current nil dir))))
                        (if project (expand-file-name (project-root project)) dir)))
                     (t dir)))
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
  (let ((id (mevedel-execution-person-session-id directory)))
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
  (cl-remove-if-not (lambda (s) (mevedel-execution--session-connection
                                 (mevedel-execution-session-id s)))
                    mevedel-execution--sessions))

(defun mevedel-execution--live-count (sessions)
  "Return how many executions run in SESSIONS, as their helper says.
A session whose helper does not answer counts for none."
  (let ((n 0))
    (dolist (s sessions n)
      (setq n (+ n (condition-case nil (mevedel-execution-count-user s)
                     (error 0)))))))

(defun mevedel-execution--plural (n word)
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
  "Return non-nil if a person stopped EXECUTION-ID of SESSION-ID."
  (gethash (cons session-id execution-id) mevedel-execution--person-stops))

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
           (not (yes-or-no-p (format "Stop %s? " (mevedel-execution--plural total "running command")))))
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
                          (mevedel-execution--plural r "command") id)))))))
      (message "mevedel-exec: stopping %s..." (mevedel-execution--plural total "command"))
      total))))

(defun mevedel-execution-restart-helper ()
  "Shut the helper down, start a new one and reopen every session on it.
What ran ends (termination \"session-ended\"); interactively,
asks first when anything runs.  Output logs stay readable.  Return
the number of sessions reopened.  With the helper daemon it is the
daemon that restarts, and what runs in it for every client ends:
the question counts all of that."
  (interactive)
  (let* ((conn mevedel-execution--current)
         (running (and conn (jsonrpc-running-p conn)))
         (live (cond ((not running) 0)
                     ((mevedel-execution--daemon-conn-p conn)
                      (condition-case nil (mevedel-execution--daemon-live conn) (error 0)))
                     (t (mevedel-execution--live-count (mevedel-execution--running-sessions)))))
         (sessions (reverse mevedel-execution--sessions))
         (reopened 0))
    (when (and (called-interactively-p 'any) (> live 0)
               (not (yes-or-no-p (format "Restarting the helper stops %s; restart? "
                                         (mevedel-execution--plural live "running command")))))
      (user-error "Not restarted"))
    (when conn (mevedel-execution--shutdown conn))
    (mevedel-execution--drain)
    (mevedel-execution--connection)
    (dolist (session sessions)
      (condition-case err
          (progn (mevedel-execution--ensure session) (cl-incf reopened))
        (error (message "mevedel-exec: reopening %s: %s"
                        (mevedel-execution-session-id session) (error-message-string err)))))
    (run-hooks 'mevedel-execution-restart-hook)
    (message "mevedel-exec: the helper restarted; %s reopened"
             (mevedel-execution--plural reopened "session"))
    reopened))

(defun mevedel-execution--confirm-kill-emacs ()
  "Ask before Emacs exits while commands run; never in batch mode.
With the helper daemon nothing ends with Emacs, so nothing is asked.
For `kill-emacs-query-functions'."
  (or noninteractive
      (mevedel-execution--daemon-p)
      (let ((n (mevedel-execution--live-count (mevedel-execution--running-sessions))))
        (or (zerop n)
            (yes-or-no-p (format "%s still running under mevedel-exec; exiting stops %s.  Exit anyway? "
                                 (mevedel-execution--plural n "command")
                                 (if (= n 1) "it" "them")))))))

(add-hook 'kill-emacs-query-functions #'mevedel-execution--confirm-kill-emacs)

;;;; Executions

(defun mevedel-execution--lost-observation (session owner execution-id reason)
  "Return the Observation for a request whose answer was lost.
SESSION, OWNER and EXECUTION-ID say what it was about, REASON why."
  (list :output ""
        :final t
        :facts (list :execution-id execution-id
                     :session-id (mevedel-execution-session-id session)
                     :owner (or owner mevedel-execution-root-owner)
                     :state "settled"
                     :termination "lost"
                     :outcome "failure"
                     :status "lost"
                     :reason reason)))

(defun mevedel-execution--observation-request (session owner execution-id method params callback timeout)
  "Send METHOD with PARAMS for SESSION; CALLBACK receives an Observation.
OWNER and EXECUTION-ID label a lost answer.  TIMEOUT as in
`mevedel-execution-request-async'.  Return the request handle."
  (unless (functionp callback)
    (signal 'wrong-type-argument (list 'functionp callback)))
  (mevedel-execution-request-async
   session method params
   :on-result callback
   :on-error (lambda (err) (funcall callback (list :error err)))
   :on-lost (lambda (why)
              (funcall callback (mevedel-execution--lost-observation
                                 session owner execution-id why)))
   :timeout timeout))

(defun mevedel-execution--request-either (session method params value callback)
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

(defun mevedel-execution--wait-timeout (ms)
  "Return a request timeout that outlasts a wait of MS milliseconds.
The margin covers a command that ends as the wait does and whose
descendants need their grace period.  nil MS means no timeout: the
helper answers once the command has ended."
  (and ms (+ (/ ms 1000.0) 60)))

(defun mevedel-execution--env-plist (env)
  "Return ENV, an alist of (NAME . VALUE) strings, as a wire object."
  (let (out)
    (dolist (kv env)
      (unless (and (stringp (car kv)) (stringp (cdr kv)))
        (signal 'wrong-type-argument (list 'stringp kv)))
      (push (intern (concat ":" (car kv))) out)
      (push (cdr kv) out))
    (nreverse out)))

;;;; Confinement

(defun mevedel-execution--paths (paths)
  "Return PATHS, a list of file names, expanded, as a wire array."
  (vconcat (mapcar (lambda (p)
                     (unless (stringp p)
                       (signal 'wrong-type-argument (list 'stringp p)))
                     (expand-file-name p))
                   paths)))

(defun mevedel-execution--sandbox (writable-roots additional-permissions
                                                  sandbox-permissions
                                                  &optional read-paths)
  "Return the wire sandbox object for a start's confinement arguments.
WRITABLE-ROOTS and READ-PATHS are lists of directories made writable
and read-only.  SANDBOX-PERMISSIONS, a string or symbol, is
`use_default' (or nil), `with_additional_permissions' or
`require_escalated' (unconfined: mode off).  ADDITIONAL-PERMISSIONS
is a profile plist: `:network' non-nil allows the network (present
and nil denies it), `:file-system' lists (:path P :access A) with A
`write', `read' or `none'.  The mode is `mevedel-execution-sandbox-mode'.
Return nil when every argument is nil: the session's default applies."
  (when (or writable-roots additional-permissions sandbox-permissions read-paths)
    (let* ((perm (and sandbox-permissions (format "%s" sandbox-permissions)))
           (mode (pcase perm
                   ((or 'nil "use_default" "with_additional_permissions")
                    (symbol-name mevedel-execution-sandbox-mode))
                   ("require_escalated" "off")
                   (_ (signal 'wrong-type-argument
                              (list 'mevedel-execution-sandbox-permissions perm)))))
           (write (copy-sequence writable-roots))
           (read (copy-sequence read-paths))
           (hidden nil)
           (network nil))
      (when additional-permissions
        (when (plist-member additional-permissions :network)
          (setq network (if (plist-get additional-permissions :network) "allow" "deny")))
        (dolist (entry (plist-get additional-permissions :file-system))
          (let ((path (plist-get entry :path)))
            (pcase (format "%s" (plist-get entry :access))
              ("write" (push path write))
              ("read" (push path read))
              ((or "none" "deny") (push path hidden))
              (access (signal 'wrong-type-argument
                              (list 'mevedel-execution-file-access access)))))))
      (append (list :mode mode)
              (and write (list :writableRoots (mevedel-execution--paths write)))
              (and read (list :readOnlyPaths (mevedel-execution--paths read)))
              (and hidden (list :inaccessiblePaths (mevedel-execution--paths hidden)))
              (and network (list :network network))))))

(cl-defun mevedel-execution-start-bash (callback &key session data-buffer owner owner-context
                                                 request command workdir writable-roots
                                                 additional-permissions sandbox-permissions
                                                 artifact-directory outcome-function
                                                 (read-only-p nil read-only-given)
                                                 tool-args tool-use-id tty
                                                 (yield-time-ms 10000)
                                                 label env max-output-chars
                                                 ready-pattern ready-port)
  "Run COMMAND with bash in SESSION; CALLBACK receives the first Observation.
OWNER defaults to `mevedel-execution-root-owner'.  WORKDIR is the
working directory \(default `default-directory').  The command runs
in the foreground YIELD-TIME-MS milliseconds at most (10000 by
default), then the callback gets the output so far and an execution
id while it keeps running; YIELD-TIME-MS nil waits for the end.  TTY
gives the command a terminal (and writable input).  LABEL names it
for people, TOOL-USE-ID (sent) ties the execution to its transcript
row and its progress events to the tool call.  READ-ONLY-P, when
given, is the caller's lane decision and wins over the helper's
analysis: non-nil the shared read lane (sent as readOnly true), nil
or `exclusive' the exclusive one (readOnly false); when not given
the helper decides from the command.  ENV is an alist of extra
variables.  MAX-OUTPUT-CHARS bounds the output shown (2000 by
default).

READY-PATTERN (an RE2 regexp, matched against each output line) and
READY-PORT (a TCP port) make the first Observation come as soon as
the command is ready to use, before YIELD-TIME-MS: a line matches,
or the command's processes listen on the port.  Its facts then say
`:ready' t with `:ready-line' or `:ready-port'.  A command that ends
first gives its final Observation as usual.

DATA-BUFFER, when a live buffer, is where CALLBACK runs (otherwise
the buffer current at the call).  WRITABLE-ROOTS,
ADDITIONAL-PERMISSIONS and SANDBOX-PERMISSIONS describe the
confinement (see `mevedel-execution--sandbox' and
`mevedel-execution-sandbox-mode'); the working directory is writable
only when listed.  These are accepted for the client's sake and
ignored: OWNER-CONTEXT, REQUEST and TOOL-ARGS \(the agent's own
records), ARTIFACT-DIRECTORY (the output lives in SESSION's state directory; see
`mevedel-execution-relocate-artifacts') and OUTCOME-FUNCTION (a
yielded command's end comes through
`mevedel-execution-mailbox-delivery-function').  Return a handle for
`mevedel-execution-abort'."
  (ignore owner-context request tool-args artifact-directory outcome-function)
  (unless (and (stringp command) (not (string-blank-p command)))
    (signal 'wrong-type-argument (list 'stringp command)))
  (unless (or (null yield-time-ms) (natnump yield-time-ms))
    (signal 'wrong-type-argument (list 'natnump yield-time-ms)))
  (unless (or (null ready-pattern) (stringp ready-pattern))
    (signal 'wrong-type-argument (list 'stringp ready-pattern)))
  (unless (or (null ready-port) (and (natnump ready-port) (<= 1 ready-port 65535)))
    (signal 'args-out-of-range (list ready-port 1 65535)))
  (with-current-buffer (if (buffer-live-p data-buffer) data-buffer (current-buffer))
    (mevedel-execution--observation-request
     session owner nil 'exec/start
     (list :owner owner
           :command command
           :cwd (expand-file-name (or workdir default-directory))
           :yield-ms yield-time-ms
           :tty (and tty t)
           :read-only (and read-only-given
                           (if (and read-only-p (not (eq read-only-p 'exclusive)))
                               t
                             :json-false))
           :env (mevedel-execution--env-plist env)
           :label label
           :tool-use-id tool-use-id
           :max-output-chars max-output-chars
           :ready-pattern ready-pattern
           :ready-port ready-port
           :sandbox (mevedel-execution--sandbox writable-roots additional-permissions
                                                sandbox-permissions))
     callback
     (mevedel-execution--wait-timeout yield-time-ms))))

(cl-defun mevedel-execution-observe (session owner execution-id callback &key chars wait-ms max-output-chars)
  "Poll EXECUTION-ID of OWNER in SESSION; CALLBACK receives an Observation.
CHARS, when given, is input written first.  With WAIT-MS, wait up
to that long for the end.  Return a request handle."
  (mevedel-execution--observation-request
   session owner execution-id 'exec/observe
   (list :owner owner :execution-id execution-id :chars chars
         :wait-ms wait-ms :max-output-chars max-output-chars)
   callback
   (mevedel-execution--wait-timeout (or wait-ms 0))))

(defun mevedel-execution-stop (session owner execution-id callback)
  "Stop EXECUTION-ID of OWNER in SESSION.
CALLBACK receives the final Observation once it has settled."
  (mevedel-execution--observation-request
   session owner execution-id 'exec/stop
   (list :owner (or owner mevedel-execution-root-owner) :execution-id execution-id)
   callback nil))

(defun mevedel-execution-list (session owner)
  "Return the facts of OWNER's yielded live executions in SESSION."
  (plist-get (mevedel-execution-request
              session 'exec/list (list :owner (or owner mevedel-execution-root-owner)))
             :executions))

(defun mevedel-execution-list-user (session)
  "Return the facts of every live execution in SESSION (user authority)."
  (plist-get (mevedel-execution-request session 'exec/list (list :as "user"))
             :executions))

(defun mevedel-execution--ignore (_value)
  "Drop VALUE: the default callback of user-authority commands."
  nil)

(defun mevedel-execution-stop-user (session id &optional callback)
  "Stop execution ID in SESSION, whoever owns it.
CALLBACK, if given, receives the final Observation."
  (mevedel-execution--observation-request
   session nil id 'exec/stop
   (list :as "user" :execution-id id)
   (or callback #'mevedel-execution--ignore) nil))

(defun mevedel-execution-stop-all-user (session &optional callback)
  "Stop every live execution in SESSION; return how many were selected.
The count is of the executions live when the stop is sent (asked
just before it, so nothing can start in between from this Emacs).
Return without waiting for them to end; CALLBACK, if given,
receives the helper's count once all of them settled, (:error ERR)
when it refused, or nil when it died."
  (let ((callback (or callback #'mevedel-execution--ignore))
        (count (mevedel-execution-count-user session)))
    (mevedel-execution-request-async
     session 'exec/stopAll (list :as "user")
     :on-result (lambda (r) (funcall callback (plist-get r :stopped)))
     :on-error (lambda (err) (funcall callback (list :error err)))
     :on-lost (lambda (_why) (funcall callback nil)))
    count))

(defun mevedel-execution-interrupt-user (session id)
  "Send Ctrl-C to execution ID in SESSION; return its facts."
  (mevedel-execution-request session 'exec/interrupt (list :as "user" :execution-id id)))

(defun mevedel-execution-write-user (session id chars &optional callback)
  "Type CHARS into execution ID in SESSION (it needs a terminal).
A lone Ctrl-C (\"\\C-c\") interrupts any execution.  CALLBACK, if
given, receives the Observation that follows the input."
  (unless (and (stringp chars) (not (string-empty-p chars)))
    (signal 'wrong-type-argument (list 'stringp chars)))
  (mevedel-execution--observation-request
   session nil id 'exec/observe
   (list :as "user" :execution-id id :chars chars)
   (or callback #'mevedel-execution--ignore)
   mevedel-execution-request-timeout))

;;;; Owners and sessions

(defvar mevedel-execution-teardown-functions nil
  "Functions called as executions are torn down, before they are stopped.
Each receives SESSION and OWNER: OWNER nil means every owner of
SESSION, SESSION nil every session.  `mevedel-execution-stop-owner',
`mevedel-execution-teardown-session' and
`mevedel-execution-teardown-all' run them.")

(defun mevedel-execution-count-user (session)
  "Return the number of live executions in SESSION, every owner's."
  (if (mevedel-execution-session-open-p session)
      (length (mevedel-execution-list-user session))
    0))

(defun mevedel-execution-owner-live-p (session owner)
  "Return non-nil while OWNER has an unsettled execution in SESSION.
Yielded or not, one-shots and helpers included; OWNER nil means
`mevedel-execution-root-owner'.  Asks the helper (synchronously)."
  (let ((owner (or owner mevedel-execution-root-owner)))
    (and (mevedel-execution-session-open-p session)
         (cl-find owner (mevedel-execution-list-user session)
                  :key (lambda (facts) (plist-get facts :owner)) :test #'equal)
         t)))

(defun mevedel-execution-session-live-p (session)
  "Return non-nil while SESSION has any unsettled execution."
  (> (mevedel-execution-count-user session) 0))

(defun mevedel-execution-stop-owner (session owner &optional callback)
  "End every execution of OWNER in SESSION (its turn or agent was torn down).
OWNER nil means `mevedel-execution-root-owner'.  The helper stops
them under OWNER's own authority (termination \"owner-stopped\");
a one-shot or helper of OWNER in flight runs its teardown function
instead of its callback.  Without CALLBACK, wait until they all
settled and return how many there were; with CALLBACK, return at
once and give it that count, or (:error ERR)."
  (let ((owner (or owner mevedel-execution-root-owner)))
    (run-hook-with-args 'mevedel-execution-teardown-functions session owner)
    (if (mevedel-execution-session-open-p session)
        (mevedel-execution--request-either
         session 'exec/stopAll (list :owner owner)
         (lambda (result) (or (plist-get result :stopped) 0))
         callback)
      (if callback (progn (funcall callback 0) nil) 0))))

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
            (mevedel-execution--open-on (mevedel-execution--connection) session)
          ((error quit)
           (setq mevedel-execution--sessions (delq session mevedel-execution--sessions))
           (signal (car err) (cdr err))))))
    (mevedel-execution-session-state-dir session)))

;;;; Unknown outcomes

(defun mevedel-execution-unknown-outcome (session)
  "Return the facts of SESSION's unproven remote outcome, or nil.
That is the latest execution on an SSH host whose transport was lost
before its exit status arrived, not yet acknowledged
\(`mevedel-execution-acknowledge-unknown')."
  (plist-get (mevedel-execution-request session 'session/unknownOutcome nil) :facts))

(defun mevedel-execution-mutation-blocked-p (session)
  "Return non-nil while an unproven outcome blocks mutating executions in SESSION.
The helper then refuses every execution outside the read lane."
  (and (mevedel-execution-unknown-outcome session) t))

(defun mevedel-execution-unsettled-mutation-p (session)
  "Return non-nil while a mutating execution of SESSION is live or unproven.
Mutating means in the exclusive lane (every owner's); unproven, an
unknown outcome not acknowledged yet."
  (or (and (cl-find "exclusive" (mevedel-execution-list-user session)
                    :key (lambda (facts) (plist-get facts :lane)) :test #'equal)
           t)
      (mevedel-execution-mutation-blocked-p session)))

(defun mevedel-execution-acknowledge-unknown (session)
  "Say the person has looked at SESSION's unknown outcomes; return how many.
Mutating executions may start again."
  (or (plist-get (mevedel-execution-request session 'session/acknowledgeUnknown nil)
                 :acknowledged)
      0))

;;;; One-shots, helpers and batch Eval

;; A one-shot runs to its end (the helper never yields it); the start
;; request's answer is its final observation.  Its terminal facts are
;; made from that answer and, when the answer was bounded, from the
;; log, read in the filter as the answers come: only this file's
;; bookkeeping runs there, and the caller's callback or teardown
;; function is queued like every other callback.

(defconst mevedel-execution--one-shot-output-chars 1048576
  "Bound asked for on a one-shot's final observation.
Output beyond it is read from the log with spool/read.")

(defconst mevedel-execution--log-page-bytes 1048576
  "Bytes of a log one spool/read asks for (the helper's maximum).")

(cl-defstruct (mevedel-execution--job (:constructor mevedel-execution--make-job)
                                       (:copier nil))
  "A one-shot, helper or batch Eval in flight."
  session owner kind name extra deliver post handle torn done)

(defvar mevedel-execution--jobs nil
  "One-shots, helpers and evals whose terminal facts have not come yet.")

(defun mevedel-execution--tear-jobs (session owner)
  "Mark the jobs of OWNER in SESSION torn down (nil: every one)."
  (dolist (job mevedel-execution--jobs)
    (when (and (or (null session) (eq session (mevedel-execution--job-session job)))
               (or (null owner) (equal owner (mevedel-execution--job-owner job))))
      (setf (mevedel-execution--job-torn job) t))))

(add-hook 'mevedel-execution-teardown-functions #'mevedel-execution--tear-jobs)

(defun mevedel-execution--termination-error (facts)
  "Return the error descriptor of a job that ended as FACTS say, or nil.
Only a job that could not start or was ended from outside has one."
  (let ((termination (plist-get facts :termination)))
    (when (member termination '("spawn-failed" "spool-failed" "lost" "session-ended"
                                "owner-stopped" "aborted"))
      (list 'mevedel-execution-error
            (format "%s: %s" termination (or (plist-get facts :reason) termination))))))

(defun mevedel-execution--terminal-facts (job output facts error)
  "Return JOB's terminal facts plist from OUTPUT, FACTS and ERROR."
  (let ((termination (plist-get facts :termination)))
    (append
     (list :exit-code (or (plist-get facts :exit-code) -1)
           :output (or output "")
           :output-bytes (or (plist-get facts :output-bytes) 0)
           :timed-out-p (equal termination "timed-out")
           :output-limit-p (equal termination "output-limit")
           :wall-time-seconds (/ (or (plist-get facts :wall-ms) 0) 1000.0)
           :termination termination
           :error error
           :name (mevedel-execution--job-name job)
           :kind (mevedel-execution--job-kind job)
           :execution-id (plist-get facts :execution-id)
           :scratch-dir (plist-get facts :scratch-dir)
           :facts facts)
     (copy-sequence (mevedel-execution--job-extra job)))))

(defun mevedel-execution--job-finish (job result)
  "Hand JOB's terminal facts RESULT on, once."
  (setq mevedel-execution--jobs (delq job mevedel-execution--jobs))
  (unless (mevedel-execution--job-done job)
    (setf (mevedel-execution--job-done job) t)
    (let ((torn (mevedel-execution--job-torn job)))
      (when torn
        (setq result (plist-put result :error
                                (list 'mevedel-execution-error
                                      "the owner was torn down before it ended"))))
      (when (mevedel-execution--job-post job)
        (setq result (funcall (mevedel-execution--job-post job) result)))
      (funcall (mevedel-execution--job-deliver job) result torn))))

(defun mevedel-execution--job-read-log (job facts bounded chunks offset)
  "Read JOB's log from OFFSET, CHUNKS read so far; then finish JOB.
FACTS are its final facts and BOUNDED the output of its final
observation, used when the log cannot be read."
  (let* ((session (mevedel-execution--job-session job))
         (conn (mevedel-execution--session-connection (mevedel-execution-session-id session)))
         (give-up (lambda (&rest _)
                    (mevedel-execution--job-finish
                     job (mevedel-execution--terminal-facts
                          job bounded facts (mevedel-execution--termination-error facts))))))
    (if (not conn)
        (funcall give-up)
      (setf (mevedel-execution--job-handle job)
            (mevedel-execution--async
             conn 'spool/read
             (mevedel-execution--session-params
              session 'spool/read
              (list :owner (mevedel-execution--job-owner job)
                    :address (plist-get facts :output-address)
                    :offset offset :length mevedel-execution--log-page-bytes))
             :on-result
             (lambda (page)
               (let ((chunks (cons (or (plist-get page :text) "") chunks))
                     (length (or (plist-get page :length) 0)))
                 (if (or (plist-get page :eof) (zerop length))
                     (mevedel-execution--job-finish
                      job (mevedel-execution--terminal-facts
                           job (apply #'concat (nreverse chunks)) facts
                           (mevedel-execution--termination-error facts)))
                   (mevedel-execution--job-read-log job facts bounded chunks
                                                    (+ offset length)))))
             :on-error give-up :on-lost give-up
             :timeout 60 :now t)))))

(defun mevedel-execution--job-observed (job obs)
  "Make JOB's terminal facts from its final Observation OBS."
  (let* ((facts (plist-get obs :facts))
         (output (or (plist-get obs :output) ""))
         (total (or (plist-get facts :output-bytes) 0)))
    (if (and (> total 0)
             (or (> (or (plist-get facts :omitted-bytes) 0) 0)
                 (< (length (encode-coding-string output 'utf-8 t)) total)))
        (mevedel-execution--job-read-log job facts output nil 0)
      (mevedel-execution--job-finish
       job (mevedel-execution--terminal-facts
            job output facts (mevedel-execution--termination-error facts))))))

(defun mevedel-execution--job-start (job params timeout)
  "Start JOB with the exec/start PARAMS (Lisp keys); TIMEOUT in seconds or nil."
  (let* ((session (mevedel-execution--job-session job))
         (conn (mevedel-execution--ensure session)))
    (push job mevedel-execution--jobs)
    (condition-case err
        (setf (mevedel-execution--job-handle job)
              (mevedel-execution--async
               conn 'exec/start
               (mevedel-execution--session-params
                session 'exec/start
                (append (list :owner (mevedel-execution--job-owner job)
                              :kind (mevedel-execution--job-kind job)
                              :label (mevedel-execution--job-name job)
                              :timeout-ms (and timeout (max 1 (round (* 1000 timeout))))
                              :max-output-chars mevedel-execution--one-shot-output-chars)
                        params))
               :on-result (lambda (obs) (mevedel-execution--job-observed job obs))
               :on-error
               (lambda (err)
                 (mevedel-execution--job-finish
                  job (mevedel-execution--terminal-facts
                       job "" nil
                       (list 'mevedel-execution-helper-error
                             (format "exec/start: %s" (plist-get err :message)) err))))
               :on-lost
               (lambda (why)
                 (mevedel-execution--job-finish
                  job (mevedel-execution--terminal-facts
                       job "" (list :termination "lost" :reason why)
                       (list 'mevedel-execution-error (format "lost: %s" why)))))
               :timeout (and timeout (+ timeout 60))
               :now t))
      ((error quit)
       (setq mevedel-execution--jobs (delq job mevedel-execution--jobs))
       (signal (car err) (cdr err))))
    (mevedel-execution--job-handle job)))

(defun mevedel-execution--job-deliver-async (callback teardown)
  "Return a JOB deliver function that queues CALLBACK, or TEARDOWN when torn.
Both run in the buffer current now, from the queue."
  (let ((buffer (current-buffer)))
    (lambda (result torn)
      (if (and torn teardown)
          (mevedel-execution--defer #'mevedel-execution--run-callback
                                    buffer (lambda (_) (funcall teardown)) nil)
        (mevedel-execution--defer #'mevedel-execution--run-callback
                                  buffer callback result)))))

(defun mevedel-execution--job-run (job params timeout)
  "Start JOB with PARAMS and TIMEOUT (see `mevedel-execution--job-start'), wait.
Return its terminal facts.  The wait runs timers and process
output (`accept-process-output', a tenth of a second at a time);
\\[keyboard-quit] cancels the request in the helper, which stops the
command, and quits."
  (when mevedel-execution--in-filter
    (signal 'mevedel-execution-error
            (list "a synchronous one-shot cannot wait inside the helper's process filter; use the form with a callback")))
  (let ((box nil))
    (setf (mevedel-execution--job-deliver job)
          (lambda (result _torn) (setq box (list result))))
    (mevedel-execution--job-start job params timeout)
    (condition-case nil
        (while (not box)
          (accept-process-output nil 0.1))
      (quit
       (setf (mevedel-execution--job-done job) t)
       (setq mevedel-execution--jobs (delq job mevedel-execution--jobs))
       (mevedel-execution-abort (mevedel-execution--job-handle job))
       (signal 'quit nil)))
    (mevedel-execution--drain)
    (car box)))

(defun mevedel-execution--check-argv (command)
  "Signal unless COMMAND is a non-empty list of strings; return it as a vector."
  (unless (and (consp command) (cl-every #'stringp command)
               (not (string-empty-p (car command))))
    (signal 'wrong-type-argument (list 'list-of-strings command)))
  (vconcat command))

(defun mevedel-execution--check-timeout (timeout)
  "Signal unless TIMEOUT is nil or a positive number of seconds."
  (unless (or (null timeout) (and (numberp timeout) (> timeout 0)))
    (signal 'wrong-type-argument (list 'positive-number-p timeout))))

(cl-defun mevedel-execution--one-shot-job (&key name command workdir writable-roots timeout
                                                additional-permissions sandbox-permissions
                                                session owner)
  "Return the job and the start parameters of a one-shot; see `-start-one-shot'.
NAME COMMAND WORKDIR WRITABLE-ROOTS TIMEOUT ADDITIONAL-PERMISSIONS
SANDBOX-PERMISSIONS SESSION OWNER as there."
  (let ((argv (mevedel-execution--check-argv command)))
    (mevedel-execution--check-timeout timeout)
    (cons (mevedel-execution--make-job
           :session (mevedel-execution-resolve-session session)
           :owner (or owner mevedel-execution-root-owner)
           :kind "one-shot" :name name
           :extra (list :argv command :writable-roots writable-roots
                        :additional-permissions additional-permissions
                        :sandbox-permissions sandbox-permissions))
          (list :argv argv
                :cwd (expand-file-name (or workdir default-directory))
                :sandbox (mevedel-execution--sandbox writable-roots additional-permissions
                                                     sandbox-permissions)))))

(cl-defun mevedel-execution-start-one-shot (callback &key name command workdir writable-roots
                                                    timeout additional-permissions
                                                    sandbox-permissions session owner
                                                    teardown-function)
  "Run the argv list COMMAND to its end in SESSION; CALLBACK gets terminal facts.
COMMAND runs directly, never through a shell unless the list says
so (\"sh\" \"-c\" ...), in WORKDIR (default `default-directory'), as
OWNER (default `mevedel-execution-root-owner'), with kind
\"one-shot\": it never yields.  TIMEOUT, in seconds, stops it
\(termination \"timed-out\").  NAME labels it.  SESSION nil means
the only open session.

CALLBACK receives a plist: `:exit-code' (-1 when there is none),
`:output' (the whole output, up to the session's output limit),
`:output-bytes', `:timed-out-p', `:output-limit-p',
`:wall-time-seconds', `:termination', and `:error', nil or an
error descriptor (ERROR-SYMBOL MESSAGE [DATA]) when it could not
start, was ended from outside or its helper died; also `:name',
`:kind', `:execution-id', `:facts' (the helper's) and the arguments
below.  When OWNER or SESSION is torn down before it ends
\(`mevedel-execution-stop-owner', `-teardown-session', `-teardown-all'),
TEARDOWN-FUNCTION, when given, is called with no argument instead
of CALLBACK (without it, CALLBACK gets facts whose `:error' says so).

WRITABLE-ROOTS, ADDITIONAL-PERMISSIONS and SANDBOX-PERMISSIONS
describe the confinement, as for `mevedel-execution-start-bash'.
Return a handle for `mevedel-execution-abort'."
  (unless (functionp callback)
    (signal 'wrong-type-argument (list 'functionp callback)))
  (pcase-let ((`(,job . ,params)
               (mevedel-execution--one-shot-job
                :name name :command command :workdir workdir :writable-roots writable-roots
                :timeout timeout :additional-permissions additional-permissions
                :sandbox-permissions sandbox-permissions :session session :owner owner)))
    (setf (mevedel-execution--job-deliver job)
          (mevedel-execution--job-deliver-async callback teardown-function))
    (mevedel-execution--job-start job params timeout)))

(cl-defun mevedel-execution-run-one-shot (&key name command workdir writable-roots timeout
                                               additional-permissions sandbox-permissions
                                               session owner)
  "Run the argv list COMMAND to its end and return its terminal facts.
The arguments and the facts are those of
`mevedel-execution-start-one-shot'.  The wait runs timers and process
output; \\[keyboard-quit] stops the command in the helper and quits."
  (pcase-let ((`(,job . ,params)
               (mevedel-execution--one-shot-job
                :name name :command command :workdir workdir :writable-roots writable-roots
                :timeout timeout :additional-permissions additional-permissions
                :sandbox-permissions sandbox-permissions :session session :owner owner)))
    (mevedel-execution--job-run job params timeout)))

(defun mevedel-execution--helper-job (name command read-paths writable-roots session owner timeout)
  "Return the job and start parameters of a helper; see `-start-helper'.
NAME COMMAND READ-PATHS WRITABLE-ROOTS SESSION OWNER TIMEOUT as there."
  (let ((argv (mevedel-execution--check-argv command)))
    (mevedel-execution--check-timeout timeout)
    (cons (mevedel-execution--make-job
           :session (mevedel-execution-resolve-session session)
           :owner (or owner mevedel-execution-root-owner)
           :kind "helper" :name name
           :extra (list :argv command :read-paths read-paths :writable-roots writable-roots))
          ;; No cwd: the scratch directory is the working directory.
          (list :argv argv :scratch t
                :sandbox (mevedel-execution--sandbox writable-roots nil nil read-paths)))))

(cl-defun mevedel-execution-start-helper (callback name command read-paths writable-roots
                                                   &key timeout session owner teardown-callback)
  "Run the external helper program COMMAND (an argv list) in a scratch directory.
Its working directory is a private scratch directory the helper
makes under SESSION's state directory and removes, with everything
in it, before CALLBACK runs.  CALLBACK gets the terminal facts of
`mevedel-execution-start-one-shot' (with kind \"helper\" and
`:scratch-dir', already gone); NAME labels it, TIMEOUT (seconds)
stops it, OWNER and SESSION as there.  TEARDOWN-CALLBACK, when
given, is called with no argument instead of CALLBACK when the owner
or session is torn down first.

READ-PATHS are mounted read-only and WRITABLE-ROOTS writable in
the confinement of `mevedel-execution-sandbox-mode' (the scratch
directory is always writable).  Return a handle for `mevedel-execution-abort'."
  (unless (functionp callback)
    (signal 'wrong-type-argument (list 'functionp callback)))
  (pcase-let ((`(,job . ,params)
               (mevedel-execution--helper-job name command read-paths writable-roots
                                              session owner timeout)))
    (setf (mevedel-execution--job-deliver job)
          (mevedel-execution--job-deliver-async callback teardown-callback))
    (mevedel-execution--job-start job params timeout)))

(cl-defun mevedel-execution-run-helper (name command read-paths writable-roots
                                             &key timeout session owner)
  "Run the helper program COMMAND in a scratch directory; return its facts.
The facts are the terminal facts of a one-shot.  NAME, COMMAND,
READ-PATHS, WRITABLE-ROOTS, TIMEOUT, SESSION and OWNER are those of
`mevedel-execution-start-helper'; the scratch directory is gone when
this returns.  \\[keyboard-quit] stops it and quits."
  (pcase-let ((`(,job . ,params)
               (mevedel-execution--helper-job name command read-paths writable-roots
                                              session owner timeout)))
    (mevedel-execution--job-run job params timeout)))

(defun mevedel-execution--eval-wrapper (form marker)
  "Return the child's program: evaluate FORM, print the result after MARKER.
FORM is a form, or a file name to load.  The result, a plist
\(:value PRINTED) or (:error-message M :backtrace B), is printed,
encoded in UTF-8 and base64 between two copies of MARKER, on a line
of its own after everything FORM printed, so whatever FORM prints
cannot pass for it."
  `(let ((mevedel--result
          (let ((mevedel--backtrace nil))
            (condition-case mevedel--err
                (let ((debug-on-error t)
                      (debug-on-signal nil)
                      (debug-ignored-errors nil)
                      (debugger (lambda (&rest _)
                                  (setq mevedel--backtrace
                                        (with-output-to-string (backtrace)))
                                  nil)))
                  (list :value
                        (prin1-to-string
                         ,(if (stringp form)
                              `(load ,(expand-file-name form) nil t t)
                            `(eval ',form t)))))
              ((debug error)
               (list :error-message (error-message-string mevedel--err)
                     :backtrace mevedel--backtrace))))))
     (princ (concat "\n" ,marker
                    (base64-encode-string
                     (encode-coding-string
                      (let ((print-length nil) (print-level nil))
                        (prin1-to-string mevedel--result))
                      'utf-8 t)
                     t)
                    ,marker "\n"))
     (kill-emacs 0)))

(defun mevedel-execution--eval-result (marker result)
  "Return the terminal facts RESULT of an eval with its value read after MARKER.
The block is taken out of `:output'; `:value', or `:error-message'
and `:backtrace', are added."
  (let* ((output (or (plist-get result :output) ""))
         (re (concat "\n?" (regexp-quote marker) "\\([A-Za-z0-9+/=]*\\)"
                     (regexp-quote marker) "\n?"))
         (start 0) from to data)
    (while (string-match re output start)
      (setq from (match-beginning 0) to (match-end 0)
            data (match-string 1 output) start (match-end 0)))
    (let ((child (and data
                      (ignore-errors
                        (car (read-from-string
                              (decode-coding-string (base64-decode-string data) 'utf-8)))))))
      (when data
        (setq result (plist-put result :output
                                (concat (substring output 0 from) (substring output to)))))
      (if (plist-member child :value)
          (plist-put result :value (plist-get child :value))
        (plist-put (plist-put result :error-message
                              (or (plist-get child :error-message)
                                  (let ((err (plist-get result :error)))
                                    (and err (cadr err)))
                                  (format "the batch Emacs ended without a result (%s, exit code %s)"
                                          (plist-get result :termination)
                                          (plist-get result :exit-code))))
                   :backtrace (mevedel-execution--eval-backtrace
                               (plist-get child :backtrace)))))))

(defun mevedel-execution--eval-backtrace (backtrace)
  "Return BACKTRACE, a string, without the eval wrapper's own frames.
The frames of the debugger that took it and those of the wrapper
around FORM are left out when they can be found."
  (when backtrace
    (let* ((lines (split-string backtrace "\n" t))
           (end (cl-position-if (lambda (line)
                                  (string-match-p "\\`  (prin1-to-string (\\(eval\\|load\\) " line))
                                lines))
           (lines (if end (cl-subseq lines 0 end) lines))
           (start (cl-position-if (lambda (line) (string-match-p "(setq mevedel--backtrace" line))
                                  lines :from-end t)))
      (mapconcat #'identity (if start (nthcdr (1+ start) lines) lines) "\n"))))

(cl-defun mevedel-execution-eval (form &key session owner timeout load-path callback)
  "Evaluate FORM in a fresh `emacs --batch -Q' run by the helper.
FORM is a form (evaluated with lexical binding), or a string, the
name of a file to load.  The child is the same Emacs as this one
\(`invocation-directory', `invocation-name'), started with -L for
each directory of LOAD-PATH, as a one-shot of kind \"eval\" in a
scratch directory, as OWNER (default the root owner) of SESSION
\(nil: the only open session).  TIMEOUT, in seconds, stops it.

The result is the terminal facts plist of
`mevedel-execution-start-one-shot' plus `:value', FORM's value as
printed by `prin1', or, when FORM signalled, `:error-message' and
`:backtrace' (a string).  `:output' is what FORM printed.  The value
travels on stdout between two copies of a random marker, base64
encoded, so nothing FORM prints can be taken for it.  Without
CALLBACK, wait and return that plist (\\[keyboard-quit] stops the
child and quits); with CALLBACK, return a handle at once and give
it the plist."
  (mevedel-execution--check-timeout timeout)
  (unless (or (consp form) (symbolp form) (stringp form) (atom form))
    (signal 'wrong-type-argument (list 'formp form)))
  (let* ((marker (format "@@mevedel-eval-%s@@"
                         (md5 (format "%s%s%s" (random) (float-time) (emacs-pid)))))
         (emacs (expand-file-name invocation-name invocation-directory))
         (argv (append (list emacs "--batch" "-Q")
                       (mapcan (lambda (dir) (list "-L" (expand-file-name dir))) load-path)
                       (list "--eval"
                             (let ((print-length nil) (print-level nil)
                                   (print-escape-newlines nil))
                               (prin1-to-string
                                (mevedel-execution--eval-wrapper form marker))))))
         (job (mevedel-execution--make-job
               :session (mevedel-execution-resolve-session session)
               :owner (or owner mevedel-execution-root-owner)
               :kind "eval" :name "Eval"
               :extra (list :argv argv)
               :post (lambda (result) (mevedel-execution--eval-result marker result))))
         (params (list :argv (vconcat argv) :scratch t)))
    (if (not callback)
        (mevedel-execution--job-run job params timeout)
      (setf (mevedel-execution--job-deliver job)
            (mevedel-execution--job-deliver-async callback nil))
      (mevedel-execution--job-start job params timeout))))

;;;; Owners and their attention

(defun mevedel-execution-set-owner-state (session owner state &optional callback)
  "Tell the helper that OWNER in SESSION is STATE, `busy' or `idle'.
OWNER nil means `mevedel-execution-root-owner'.  An owner is idle
until said busy; the helper wakes only idle owners
\(`mevedel-execution-wake-functions'), so say busy when an agent's
turn starts and idle when it ends.  Turning idle with attention
owed brings a wake at once.

Without CALLBACK, wait for the answer and return t: no wake decided
before it comes after it, so once a `busy' call returned, no wake
arrives until the owner is idle again.  (Made from a hook or a
callback of this file, the call returns first, and the wakes read
before its answer follow once that hook or callback returns.)  With
CALLBACK, return at once; CALLBACK receives t, or (:error ERR).  A
busy owner is told busy again when its session reopens on a new
helper."
  (let ((owner (or owner mevedel-execution-root-owner))
        (state (if (symbolp state) (symbol-name state) state)))
    (unless (member state '("busy" "idle"))
      (signal 'wrong-type-argument (list '(member busy idle) state)))
    (setf (mevedel-execution-session-busy-owners session)
          (if (equal state "busy")
              (cl-adjoin owner (mevedel-execution-session-busy-owners session)
                         :test #'equal)
            (remove owner (mevedel-execution-session-busy-owners session))))
    (mevedel-execution--request-either
     session 'owner/state (list :owner owner :state state)
     (lambda (_result) t)
     callback)))

(defun mevedel-execution-attend (session owner delivery-ids &optional callback)
  "Say that OWNER in SESSION attended to DELIVERY-IDS; return how many were owed.
Call it when the model read those results inside a turn (the ids a
wake function received, or a delivery's `:delivery-id'): they are
owed no more and no later wake offers them again.  A result the
model polled to its end needs no call.  OWNER nil means
`mevedel-execution-root-owner'; DELIVERY-IDS is a list of strings,
and ids not owed (unknown, attended or retired already) count for
nothing.  Without CALLBACK, wait and return the count.  With
CALLBACK, return at once; CALLBACK receives the count, or (:error
ERR)."
  (unless (and (or (listp delivery-ids) (vectorp delivery-ids))
               (cl-every #'stringp delivery-ids))
    (signal 'wrong-type-argument (list 'list-of-strings delivery-ids)))
  (mevedel-execution--request-either
   session 'owner/attend
   (list :owner (or owner mevedel-execution-root-owner)
         :delivery-ids (vconcat delivery-ids))
   (lambda (result) (or (plist-get result :attended) 0))
   callback))

(defun mevedel-execution-retire-owner (session owner &optional callback)
  "Retire the attention OWNER in SESSION owes; return how many were owed.
Call it when the person stops that owner's turn: results made up to
now bring no wake, those made later do, and monitors keep running.
OWNER nil means `mevedel-execution-root-owner'.  Without CALLBACK,
wait and return the count.  With CALLBACK, return at once; CALLBACK
receives the count, or (:error ERR).

This retires at once.  When stopping the turn can fail, retire in
two phases instead: `mevedel-execution-retire-begin' takes the
frontier before the stop, then `mevedel-execution-retire-commit'
retires up to it once the stop took, or
`mevedel-execution-retire-abort' leaves everything owed."
  (mevedel-execution--request-either
   session 'owner/retire (list :owner (or owner mevedel-execution-root-owner))
   (lambda (result) (plist-get result :retired))
   callback))

(defun mevedel-execution-retire-begin (session owner &optional callback)
  "Begin retiring the attention OWNER in SESSION owes; return the frontier.
The frontier, an integer, marks every result made so far; nothing
is retired yet.  Pass it to `mevedel-execution-retire-commit' once
the turn is stopped, or to `mevedel-execution-retire-abort' when the
stop failed.  Results made after it stay owed either way.  OWNER
nil means `mevedel-execution-root-owner'.  Without CALLBACK, wait
and return the frontier.  With CALLBACK, return at once; CALLBACK
receives the frontier, or (:error ERR)."
  (let* ((owner (or owner mevedel-execution-root-owner))
         (note (lambda (result)
                 (let ((frontier (plist-get result :frontier)))
                   ;; Which helper took it: a frontier means nothing
                   ;; to the next one.
                   (setf (mevedel-execution-session-retiring session)
                         (cons (cons owner (cons frontier
                                                 (mevedel-execution-session-generation session)))
                               (cl-remove owner (mevedel-execution-session-retiring session)
                                          :key #'car :test #'equal)))
                   frontier))))
    (mevedel-execution--request-either
     session 'owner/retire (list :owner owner :phase "begin") note callback)))

(defun mevedel-execution--retire-end (session owner phase frontier value callback)
  "End OWNER's retirement in SESSION with PHASE at FRONTIER.
VALUE maps the result; CALLBACK as in `mevedel-execution-retire-commit'.
A frontier taken on a helper that has died since is not sent: the
attention it covered died with that helper (a new helper owes
nothing from before, and a delivery it re-makes never wakes), and
the new helper's frontiers count from zero again.  The answer is
then VALUE of an empty result."
  (unless (natnump frontier)
    (signal 'wrong-type-argument (list 'natnump frontier)))
  (let* ((owner (or owner mevedel-execution-root-owner))
         (begun (assoc owner (mevedel-execution-session-retiring session)))
         (stale (and begun (eql (cadr begun) frontier)
                     (not (and (eql (cddr begun)
                                    (mevedel-execution-session-generation session))
                               (mevedel-execution--session-connection
                                (mevedel-execution-session-id session)))))))
    (when (and begun (eql (cadr begun) frontier))
      (setf (mevedel-execution-session-retiring session)
            (delq begun (mevedel-execution-session-retiring session))))
    (cond
     ((not stale)
      (mevedel-execution--request-either
       session 'owner/retire (list :owner owner :phase phase :frontier frontier)
       value callback))
     ((not callback) (funcall value nil))
     (t
      ;; Like an answer: from the queue, in the caller's buffer.
      (mevedel-execution--defer #'mevedel-execution--run-callback
                                (current-buffer) callback (funcall value nil))
      (mevedel-execution--schedule-drain)
      nil))))

(defun mevedel-execution-retire-commit (session owner frontier &optional callback)
  "Retire what OWNER in SESSION owes up to FRONTIER; return how many.
FRONTIER is what `mevedel-execution-retire-begin' returned.  It
retires every result made up to it, including one whose delivery
becomes durable only later; results made after it stay owed, and
monitors keep running.  OWNER nil means
`mevedel-execution-root-owner'.  Without CALLBACK, wait and return
the count.  With CALLBACK, return at once; CALLBACK receives the
count, or (:error ERR).  A frontier taken on a helper that has died
since retires nothing there is left to retire: the count is 0."
  (mevedel-execution--retire-end
   session owner "commit" frontier
   (lambda (result) (or (plist-get result :retired) 0))
   callback))

(defun mevedel-execution-retire-abort (session owner frontier &optional callback)
  "Abandon the retirement OWNER in SESSION began at FRONTIER; return t.
Call it when stopping the turn failed: everything stays owed.
FRONTIER is what `mevedel-execution-retire-begin' returned; OWNER
nil means `mevedel-execution-root-owner'.  Without CALLBACK, wait
and return t.  With CALLBACK, return at once; CALLBACK receives t,
or (:error ERR)."
  (mevedel-execution--retire-end
   session owner "abort" frontier (lambda (_result) t) callback))

;;;; Monitors

(cl-defun mevedel-execution-monitor-start (session &key owner command workdir label
                                                  filter persistent timeout-ms env
                                                  callback)
  "Start a monitor in SESSION: COMMAND's output lines become events.
Each line (or only those matching the RE2 regexp FILTER) reaches
OWNER (default `mevedel-execution-root-owner') as a MONITOR
delivery through `mevedel-execution-mailbox-delivery-function', in
batches, and the monitor's end as one MONITOR_TERMINAL delivery.
WORKDIR defaults to `default-directory'; LABEL names it.  Unless
PERSISTENT, it stops after TIMEOUT-MS (5 minutes by default).  ENV
is an alist of extra variables.  Without CALLBACK, wait and return
the monitor plist \(:monitor-id :execution-id :label :state :events
:suppressed).  With CALLBACK, return at once; CALLBACK receives
that plist, or \(:error ERR)."
  (unless (and (stringp command) (not (string-blank-p command)))
    (signal 'wrong-type-argument (list 'stringp command)))
  (unless (or (null timeout-ms) (natnump timeout-ms))
    (signal 'wrong-type-argument (list 'natnump timeout-ms)))
  (mevedel-execution--request-either
   session 'monitor/start
   (list :owner owner
         :command command
         :cwd (expand-file-name (or workdir default-directory))
         :label label
         :filter filter
         :persistent (and persistent t)
         :timeout-ms timeout-ms
         :env (mevedel-execution--env-plist env))
   #'identity callback))

(defun mevedel-execution-monitor-stop (session owner monitor-id &optional callback)
  "Stop MONITOR-ID of OWNER (nil: the root owner) in SESSION.
Without CALLBACK, wait until its command has ended and return the
monitor plist; with CALLBACK, return at once and give it that plist,
or (:error ERR).  Its MONITOR_TERMINAL delivery follows."
  (mevedel-execution--request-either
   session 'monitor/stop
   (list :owner (or owner mevedel-execution-root-owner) :monitor-id monitor-id)
   #'identity callback))

(defun mevedel-execution-monitor-list (session owner)
  "Return the live monitors of OWNER (nil: the root owner) in SESSION."
  (plist-get (mevedel-execution-request
              session 'monitor/list (list :owner (or owner mevedel-execution-root-owner)))
             :monitors))

;;;; Installing the helper

;;;###autoload
(defun mevedel-execution-install-helper (&optional src-dir)
  "Build the helper with `go build' into `mevedel-execution-install-directory'.
SRC-DIR is the helper's source tree (default: the one this file
came from).  The build runs in the background."
  (interactive)
  (let* ((src (or src-dir (mevedel-execution--source-directory)
                  (user-error "No mevedel-exec source tree found above %s"
                              mevedel-execution--source-file)))
         (out (mevedel-execution--installed-program))
         (go (or (executable-find "go") (user-error "Go is not on exec-path")))
         (default-directory (file-name-as-directory src))
         (buffer (get-buffer-create "*mevedel-exec build*")))
    (make-directory (file-name-directory out) t)
    (with-current-buffer buffer (let ((inhibit-read-only t)) (erase-buffer)))
    (make-process
     :name "mevedel-exec-build"
     :buffer buffer
     :command (list go "build" "-o" out "./cmd/mevedel-exec")
     :noquery t
     :sentinel (lambda (proc _event)
                 (unless (process-live-p proc)
                   (if (zerop (process-exit-status proc))
                       (message "mevedel-exec: built %s" out)
                     (message "mevedel-exec: the build failed; see %s"
                              (buffer-name buffer))))))
    (message "mevedel-exec: building %s..." out)))

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

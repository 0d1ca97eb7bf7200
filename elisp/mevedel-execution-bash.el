;;; mevedel-execution-bash.el --- Managed shell commands through mevedel-exec  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; The agent's managed Bash: start with a yield, observe, stop, input,
;; the same with user authority, owners' and sessions' liveness,
;; unknown outcomes, monitors, and the confinement arguments every start
;; turns into the helper's sandbox policy.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'mevedel-execution-session)

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
                 (const :tag "Never confine" off))
  :group 'mevedel-execution)

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

(defun mevedel-execution-sandbox-params (writable-roots additional-permissions
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
confinement (see `mevedel-execution-sandbox-params' and
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
           :sandbox (mevedel-execution-sandbox-params writable-roots additional-permissions
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
A lone Ctrl-C character (code 3) interrupts any execution.  CALLBACK, if
given, receives the Observation that follows the input."
  (unless (and (stringp chars) (not (string-empty-p chars)))
    (signal 'wrong-type-argument (list 'stringp chars)))
  (mevedel-execution--observation-request
   session nil id 'exec/observe
   (list :as "user" :execution-id id :chars chars)
   (or callback #'mevedel-execution--ignore)
   mevedel-execution-request-timeout))

;;;; Owners and sessions

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
        (mevedel-execution-request-either
         session 'exec/stopAll (list :owner owner)
         (lambda (result) (or (plist-get result :stopped) 0))
         callback)
      (if callback (progn (funcall callback 0) nil) 0))))

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
  (mevedel-execution-request-either
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
  (mevedel-execution-request-either
   session 'monitor/stop
   (list :owner (or owner mevedel-execution-root-owner) :monitor-id monitor-id)
   #'identity callback))

(defun mevedel-execution-monitor-list (session owner)
  "Return the live monitors of OWNER (nil: the root owner) in SESSION."
  (plist-get (mevedel-execution-request
              session 'monitor/list (list :owner (or owner mevedel-execution-root-owner)))
             :monitors))

(provide 'mevedel-execution-bash)
;;; mevedel-execution-bash.el ends here

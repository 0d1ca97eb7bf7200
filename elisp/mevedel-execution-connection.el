;;; mevedel-execution-connection.el --- The mevedel-exec helper process and its requests  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; One JSON-RPC connection to the helper (a child process, or the
;; helper daemon's socket), the queue that keeps callers' code out of
;; its process filter, synchronous and asynchronous requests, and the
;; dispatch of notifications to `mevedel-execution-handle-notification'.
;; The other files reach the helper only through the public functions
;; here: `mevedel-execution-connect', `-call', `-call-async', `-defer',
;; `-drain'.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'subr-x)
(require 'mevedel-execution-wire)
(require 'mevedel-execution-install)

(declare-function jsonrpc--async-request-1 "jsonrpc")
(declare-function jsonrpc--process "jsonrpc" (conn) t)
(declare-function mevedel-execution-daemon-check-version "mevedel-execution-daemon" (program info))
(declare-function mevedel-execution-daemon-schedule-reconnect "mevedel-execution-daemon" (try))
(declare-function mevedel-execution-forget-live "mevedel-execution-session" (generation))

;;;; Options

(defcustom mevedel-execution-program "mevedel-exec"
  "The mevedel-exec helper: a file name, or a command on the variable `exec-path'.
When it cannot be found, the helper installed by
`mevedel-execution-install-helper' is used."
  :type 'string
  :group 'mevedel-execution)

(defcustom mevedel-execution-program-arguments '("serve")
  "Arguments that make the helper speak its protocol on stdio."
  :type '(repeat string)
  :group 'mevedel-execution)

(defcustom mevedel-execution-nice 10
  "Niceness of the commands the helper runs, from 0 to 19.
Commands that keep every CPU busy (a build, hundreds of watchers)
then yield the CPU to Emacs, which stays responsive beside them;
they take whatever Emacs leaves.  Where the kernel schedules by
session (autogroups), the helper's session yields too, so its
commands also yield to the programs of other sessions.  0 runs
them as any program of Emacs.  It takes effect when the helper
starts (the daemon: when it starts detached)."
  :type '(integer :tag "Niceness (0 to 19)")
  :group 'mevedel-execution)

(defun mevedel-execution--nice-arguments ()
  "The helper's arguments for `mevedel-execution-nice'."
  (let ((n mevedel-execution-nice))
    (unless (and (integerp n) (<= 0 n 19))
      (user-error "`mevedel-execution-nice' must be an integer from 0 to 19, not %S" n))
    (and (> n 0) (list "--nice" (number-to-string n)))))

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
                 (const :tag "The per-user daemon" daemon))
  :group 'mevedel-execution)

(defcustom mevedel-execution-request-timeout 10
  "Seconds a short synchronous call waits for the helper."
  :type 'number
  :group 'mevedel-execution)

(defcustom mevedel-execution-events-buffer-size 0
  "Size of the JSON-RPC events log buffer; 0 turns logging off.
Logging every message costs several times the notification
throughput, so it is off unless you are debugging the protocol.
nil means no limit."
  :type '(choice (const :tag "Off" 0)
                 (const :tag "No limit" nil)
                 (integer :tag "Characters"))
  :group 'mevedel-execution)

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
function gets its own copy, so it may keep or modify it, except
those added with `mevedel-execution-add-reader', which share it.
`changed' events are coalesced: after one, the changes of the next
quarter second come together in one, `:changed' holding the latest
facts of each execution.  These events acknowledge nothing; an
error in one function is reported and does not stop the others.

The functions run from a timer, never inside the process filter,
in the order the helper sent the events (and after the callbacks
of answers read before them), so they may call the synchronous
functions of this package.  Until one returns, nothing after it runs.")

(defun mevedel-execution--error-plist (error)
  "Return the Lisp error plist for a JSON-RPC ERROR object."
  (let* ((err (mevedel-execution-normalize error))
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
    :documentation "Non-nil for a connection to the helper daemon's socket.")
   (version
    :initform nil
    :documentation "The version the helper said it is at the handshake."))
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

(defun mevedel-execution-in-filter-p ()
  "Return non-nil inside a helper connection's process filter.
Nothing may wait for the helper there."
  mevedel-execution--in-filter)

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
          (run-at-time 0 nil #'mevedel-execution-drain))))

(defun mevedel-execution-defer (function &rest args)
  "Queue FUNCTION with ARGS, to run after everything queued before it."
  (let ((cell (list (cons function args))))
    (if mevedel-execution--queue
        (setcdr mevedel-execution--queue-last cell)
      (setq mevedel-execution--queue cell))
    (setq mevedel-execution--queue-last cell))
  (mevedel-execution--schedule-drain))

(defun mevedel-execution-drain ()
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
  "Note in `mevedel-execution--in-filter' while CONN's process filter is running.
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

(defun mevedel-execution-generation (conn)
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

(defun mevedel-execution-current-connection ()
  "Return the connection to the running helper, or nil.
Unlike `mevedel-execution-connect', it starts nothing."
  mevedel-execution--current)

(defvar mevedel-execution--generation 0
  "Generation of the most recently started helper.")

(defun mevedel-execution-connect (&optional meanwhile)
  "Return a connection to a running helper, starting one if needed.
MEANWHILE, a function, is called before it returns: while a helper
being started answers its handshake, or at once."
  (let ((conn mevedel-execution--current))
    (if (and conn (jsonrpc-running-p conn))
        (progn (when meanwhile (funcall meanwhile)) conn)
      (mevedel-execution--start-helper meanwhile))))

(defun mevedel-execution--daemon-socket (program)
  "Start PROGRAM's daemon unless one is running; return its socket's file name."
  (with-temp-buffer
    (let ((status (apply #'call-process program nil t nil "daemon"
                         (mevedel-execution--nice-arguments))))
      (goto-char (point-max))
      (skip-chars-backward " \t\n")
      (let ((last (buffer-substring-no-properties (line-beginning-position) (point))))
        (unless (and (eql status 0) (file-name-absolute-p last))
          (signal 'mevedel-execution-error
                  (list (format "the helper daemon did not start: %s"
                                (string-trim (buffer-string))))))
        last))))

(defun mevedel-execution-daemon-connection-p (conn)
  "Return non-nil if CONN is a connection to the helper daemon."
  (and conn (oref conn daemon)))

(defun mevedel-execution-daemon-p ()
  "Return non-nil if work outlives this Emacs: the helper is the daemon."
  (let ((conn mevedel-execution--current))
    (if (and conn (jsonrpc-running-p conn))
        (mevedel-execution-daemon-connection-p conn)
      (eq mevedel-execution-connection 'daemon))))

(defun mevedel-execution--start-helper (&optional meanwhile)
  "Start the helper, shake hands with it, and return the connection.
In `daemon' mode (`mevedel-execution-connection') it connects to
the helper daemon, starting it first when none runs.  MEANWHILE is
called while the handshake's answer is awaited."
  (let* ((program (mevedel-execution-program-file))
         (command (cons program (append mevedel-execution-program-arguments
                                        (mevedel-execution--nice-arguments))))
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
                     :command command
                     :connection-type 'pipe
                     :coding 'utf-8-emacs-unix
                     :noquery t
                     :stderr (get-buffer-create "*mevedel-exec stderr*")))))))
    (setq mevedel-execution--current conn)
    (let ((info (condition-case err
                    (mevedel-execution-call
                     conn 'initialize
                     (mevedel-execution-to-wire
                      'initialize
                      (list :client-name "mevedel-execution.el"
                            :client-version mevedel-execution-package-version
                            :protocol-version mevedel-execution-protocol-version))
                     nil meanwhile)
                  (error
                   (mevedel-execution-kill-connection conn)
                   (signal (car err) (cdr err))))))
      (unless (eql (plist-get info :protocol-version)
                   mevedel-execution-protocol-version)
        (mevedel-execution-kill-connection conn)
        (signal 'mevedel-execution-error
                (list (format "helper %s speaks protocol %s, this package speaks %s"
                              program (plist-get info :protocol-version)
                              mevedel-execution-protocol-version))))
      (oset conn version (plist-get info :server-version))
      (when socket
        (mevedel-execution-daemon-check-version program info)))
    conn))

(defun mevedel-execution-running-version ()
  "Return the version of the running helper, or nil if there is none."
  (let ((conn mevedel-execution--current))
    (and conn (jsonrpc-running-p conn) (oref conn version))))

(defun mevedel-execution-kill-connection (conn)
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
        (generation (mevedel-execution-generation conn)))
    ;; What the sink was handed is kept: the session's next helper
    ;; re-makes what was pending here under the same ids.
    (when unexpected
      (mevedel-execution--set-closing conn)
      (if (mevedel-execution-daemon-connection-p conn)
          (progn
            (message "mevedel-exec: the connection to the helper daemon was lost; reconnecting (what runs there goes on)")
            (mevedel-execution-daemon-schedule-reconnect 0))
        (message "mevedel-exec: the helper exited unexpectedly (status %s); pending requests were answered as lost, and the next call starts a new helper"
                 status)))
    ;; After the events and the lost answers read before it.
    (mevedel-execution-defer #'mevedel-execution-forget-live generation)
    (mevedel-execution-defer
     #'mevedel-execution-run-event
     'exit (list :generation generation :status status :unexpected unexpected))))

;;;; Requests

(defun mevedel-execution-run-callback (buffer callback value)
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

(cl-defun mevedel-execution-call-async (conn method params &key on-result on-error on-lost timeout now)
  "Send METHOD with PARAMS on CONN; return a handle for `mevedel-execution-abort'.
PARAMS is the wire object (see `mevedel-execution-to-wire').
ON-RESULT receives the normalized result, ON-ERROR the error plist.
ON-LOST, called with a reason string, replaces ON-ERROR when the
helper died before answering.  TIMEOUT is in seconds; nil waits
as long as it takes.  The callbacks run in the buffer current now
if it is still live, queued after what the helper sent before (see
`mevedel-execution-defer'); NOW non-nil calls them at once, inside
the process filter, which only the package's own bookkeeping may ask."
  (let* ((buffer (current-buffer))
         (hand (lambda (callback value)
                 (if now
                     (mevedel-execution-run-callback buffer callback value)
                   (mevedel-execution-defer
                    #'mevedel-execution-run-callback buffer callback value))))
         (lost-why (lambda ()
                     (if (mevedel-execution-daemon-connection-p conn)
                         "the connection to the helper daemon was lost before it answered; if the daemon still runs, the command goes on there and its result comes through the mailbox"
                       "the helper died before it answered")))
         (id-and-timer
          (mevedel-execution--send-or-lost
           conn
           (lambda ()
             (let ((why (funcall lost-why)))
               (cond (on-lost (funcall hand on-lost why))
                     (on-error (funcall hand on-error
                                        (list :code -1 :kind "lost" :message why))))))
           method params
           :success-fn
           (lambda (result)
             (when on-result
               (funcall hand on-result (mevedel-execution-normalize result))))
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
    (cons (mevedel-execution-generation conn) (car id-and-timer))))

(defun mevedel-execution-abort (handle)
  "Abort the request HANDLE, as returned by an asynchronous call.
The helper is sent `$/cancelRequest': a start that has not yielded
yet is aborted (its callback receives the final observation, with
termination \"aborted\"); a waiting observation answers at once.
HANDLE is (GENERATION . ID): a request of a helper that has exited
since is not sent anywhere."
  (pcase-let* ((`(,generation . ,id) handle)
               (conn mevedel-execution--current))
    (when (and conn id (eql generation (mevedel-execution-generation conn))
               (jsonrpc-running-p conn))
      (jsonrpc-notify conn '$/cancelRequest
                      (mevedel-execution-to-wire '$/cancelRequest (list :id id))))))

(defun mevedel-execution-call (conn method params &optional timeout meanwhile)
  "Send METHOD with PARAMS on CONN and wait for the result.
PARAMS is the wire object (see `mevedel-execution-to-wire').
Wait at most TIMEOUT seconds (default `mevedel-execution-request-timeout').
MEANWHILE, a function, is called once the request is sent, before
the wait: work of the caller's own that the helper need not wait for.
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
          (mevedel-execution-call-async
           conn method params
           :on-result (lambda (r) (setq outcome (list 'ok r)))
           :on-error (lambda (e) (setq outcome (list 'error e)))
           :on-lost (lambda (why)
                      (setq outcome (list 'error (list :code -1 :kind "lost" :message why))))
           :timeout timeout
           :now t)))
    (when meanwhile (funcall meanwhile))
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
    (mevedel-execution-drain)
    (unless mevedel-execution--draining
      (funcall mevedel-execution-flush-held-function))
    (pcase outcome
      (`(ok ,result) result)
      (`(error ,err)
       (signal 'mevedel-execution-helper-error
               (list (format "%s: %s" method (plist-get err :message)) err))))))

(defun mevedel-execution--dispatch-request (_conn method _params)
  "Answer the request METHOD from the helper; it sends none today."
  (jsonrpc-error :code -32601 :message (format "method not found: %s" method)))

(defvar mevedel-execution-at-once-notifications nil
  "Notifications handled inside the process filter: (METHOD . FUNCTION).
FUNCTION is called with CONN and the wire params at once, ahead of
what is queued, so what it shows is drawn by the redisplay that
follows the helper's output.  Only for work that waits for nothing
and is right in any order against other messages.")

(defun mevedel-execution--dispatch-notification (conn method params)
  "Queue the notification METHOD with PARAMS from CONN's helper.
It is routed after everything queued before it; see
`mevedel-execution-defer'.  Those of
`mevedel-execution-at-once-notifications' are handled now."
  (let ((now (alist-get method mevedel-execution-at-once-notifications)))
    (if (not now)
        (mevedel-execution-defer #'mevedel-execution--route-notification
                                  conn method params)
      (condition-case err
          (funcall now conn params)
        (error (message "mevedel-exec: handling %s: %s" method
                        (error-message-string err)))))))

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
A helper newer than this package may send one; it is ignored."
  (unless (memq method mevedel-execution--unknown-notifications)
    (push method mevedel-execution--unknown-notifications)
    (display-warning 'mevedel-execution
                     (format "the helper sent the notification %s, which this Emacs does not handle; ignored"
                             method))))

(defun mevedel-execution-run-event (type params)
  "Give each of `mevedel-execution-event-functions' its copy of PARAMS.
TYPE names the event."
  (when mevedel-execution-event-functions
    (mevedel-execution-emit type (mevedel-execution-normalize params))))

(defvar mevedel-execution-flush-held-function #'ignore
  "Function that sends the events held back to be coalesced.
Called before any other event goes out, and as a synchronous call
returns, so that events keep the helper's order.")

(defvar mevedel-execution--readers (make-hash-table :test #'eq :weakness 'key)
  "Listeners that only read what they are handed: they get no copy.")

(defun mevedel-execution-add-reader (function &optional depth)
  "Add FUNCTION to `mevedel-execution-event-functions' as a reader.
A reader is handed each event's payload itself, shared with the
other listeners and with the facade's own tables: it must never
change it, nor anything in it.  It costs no copy.  DEPTH is as for
`add-hook'."
  (puthash function t mevedel-execution--readers)
  (add-hook 'mevedel-execution-event-functions function depth))

(defun mevedel-execution-emit (type plist &optional shared)
  "Give each of `mevedel-execution-event-functions' its copy of PLIST.
TYPE names the event.  Each listener gets a copy of PLIST taken
before any ran, except readers (`mevedel-execution-add-reader'),
which share PLIST, and the last listener, which gets PLIST itself
unless SHARED says PLIST shares structure with the facade's tables.
Events held back to be coalesced go out first."
  (unless (eq type 'changed)
    (funcall mevedel-execution-flush-held-function))
  (let ((fns nil))
    (run-hook-wrapped 'mevedel-execution-event-functions
                      (lambda (fn) (push fn fns) nil))
    (setq fns (nreverse fns))
    (while fns
      (let* ((fn (pop fns))
             (arg (if (or (gethash fn mevedel-execution--readers)
                          (and (null fns) (not shared)))
                      plist
                    (copy-tree plist))))
        (condition-case-unless-debug err
            (funcall fn type arg)
          (error (message "mevedel-exec: error in %s listener: %s"
                          type (error-message-string err))))))))

(defun mevedel-execution-shutdown (conn &optional exiting)
  "Shut CONN's helper down: it ends every execution, then exits.
With EXITING (Emacs itself is exiting), the helper is left to exit
at the EOF that Emacs's own exit gives it, instead of being waited
for and killed."
  (mevedel-execution--set-closing conn)
  (let ((proc (jsonrpc--process conn))
        (deadline (+ (float-time) 5)))
    ;; Inside the process filter nothing may wait: the kill will do.
    (when (and (jsonrpc-running-p conn) (not mevedel-execution--in-filter))
      ;; The helper ends every execution, then exits at EOF.
      (ignore-errors (mevedel-execution-call conn 'shutdown nil 30))
      (ignore-errors (process-send-eof proc))
      ;; Emacs killed by a hangup exits with SIGCHLD blocked: the helper
      ;; is never reaped, its pipe reads EOF forever and a wait for its
      ;; exit spins.  Its answer already said every execution ended.
      (unless exiting
        (while (and (process-live-p proc) (< (float-time) deadline))
          (accept-process-output proc 0.05)))))
  (if exiting
      (when (eq conn mevedel-execution--current)
        (setq mevedel-execution--current nil))
    (mevedel-execution-kill-connection conn)))

;;;; Followers of one execution

;; An output buffer follows one execution's growth, ten times a second
;; while it streams.  It is told directly, not through the `changed'
;; event, which is coalesced and built for whole live sets.

(defvar mevedel-execution--followers (make-hash-table :test #'equal)
  "Per (SESSION-ID . EXECUTION-ID), the functions told of its new facts.")

(defun mevedel-execution-follow-facts (session-id execution-id function &optional remove)
  "Call FUNCTION with the new facts of EXECUTION-ID in SESSION-ID, each time.
Each time the helper sends them, that is; with REMOVE, stop.
FUNCTION runs from the queue, as event listeners do, but at once:
it is not coalesced.  It is handed the live table's own facts, so
it must not change them."
  (let* ((key (cons session-id execution-id))
         (fns (delq function (gethash key mevedel-execution--followers))))
    (unless remove (push function fns))
    (if fns
        (puthash key fns mevedel-execution--followers)
      (remhash key mevedel-execution--followers))))

(defvar mevedel-execution--followers-key (cons nil nil)
  "The key `mevedel-execution-tell-followers' looks up, filled anew each time.
Hundreds of executions grow each second: no key is made for each.")

(defun mevedel-execution-tell-followers (session-id facts)
  "Hand FACTS of an execution of SESSION-ID to its followers.
See `mevedel-execution-follow-facts'."
  (dolist (fn (let ((key mevedel-execution--followers-key))
                (setcar key session-id)
                (setcdr key (plist-get facts :execution-id))
                (prog1 (gethash key mevedel-execution--followers)
                  (setcar key nil)
                  (setcdr key nil))))
    (condition-case-unless-debug err
        (funcall fn facts)
      (error (message "mevedel-exec: error in a follower: %s"
                      (error-message-string err))))))

(provide 'mevedel-execution-connection)
;;; mevedel-execution-connection.el ends here

;;; mevedel-execution-test-support.el --- What the ERT suite's files share  -*- lexical-binding: t; -*-

;;; Commentary:

;; The fixture every test file uses: a real helper (the one
;; MEVEDEL_EXEC_PROGRAM names, else the checkout's build) with a private
;; HOME and state directory, gates the tests open, bounded waits on the
;; helper's state, and the panel's readers.  It defines no test, so each
;; test file runs only its own tests, and the files can run in separate
;; Emacs processes side by side.

;;; Code:

(require 'ert)
(require 'cl-lib)

;;;; From the tests of the facade

(defconst mevedel-execution-test--root
  (file-name-as-directory
   (expand-file-name "../.." (file-name-directory (or load-file-name buffer-file-name))))
  "The repository's root.")

(add-to-list 'load-path (expand-file-name "elisp" mevedel-execution-test--root))

(require 'mevedel-execution)
(require 'mevedel-execution-transcript)
(require 'mevedel-execution-panel)

(defvar mevedel-execution-test--program
  (or (getenv "MEVEDEL_EXEC_PROGRAM")
      (expand-file-name "bin/mevedel-exec" mevedel-execution-test--root))
  "The helper binary under test.")

(defconst mevedel-execution-test--timeout 30
  "Upper bound of every wait, in seconds.")

(defvar mevedel-execution-test--limits '(:graceMs 500)
  "Wire limits of the sessions the fixture opens; tests may bind it.")

(defvar mevedel-execution-test--nice 0
  "`mevedel-execution-nice' of the fixture's helpers; tests may bind it.
0: the commands of a suite running beside other work are not starved.")

(defun mevedel-execution-test--call-with-helper (fn)
  "Call FN with a session on a fresh helper; tear everything down after.
The helper gets a private HOME, so no user profile runs.  Every
temporary file the test makes goes below one directory, removed after."
  (let* ((root (make-temp-file "mevedel-ert-" t))
         (temporary-file-directory (file-name-as-directory root))
         (home (make-temp-file "mevedel-ert-home-" t))
         (state (make-temp-file "mevedel-ert-state-" t))
         (process-environment (append (list (concat "HOME=" home)) process-environment))
         (mevedel-execution-program mevedel-execution-test--program)
         (mevedel-execution-nice mevedel-execution-test--nice)
         (mevedel-execution-event-functions nil)
         (mevedel-execution-wake-functions nil)
         (mevedel-execution-mailbox-delivery-function nil)
         (default-directory home))
    (should (file-executable-p mevedel-execution-program))
    (unwind-protect
        (funcall fn (mevedel-execution-open-session
                     (format "ert-%d" (random 1000000)) state mevedel-execution-test--limits))
      (mevedel-execution-teardown-all)
      (delete-directory root t))))

(defmacro mevedel-execution-test--with-helper (var &rest body)
  "Run BODY with VAR bound to a session on a fresh helper."
  (declare (indent 1) (debug (symbolp body)))
  `(mevedel-execution-test--call-with-helper (lambda (,var) ,@body)))

(defun mevedel-execution-test--wait-until (pred &optional what)
  "Process events until PRED returns non-nil; fail after the bound.
WHAT says what was awaited."
  (let ((deadline (+ (float-time) mevedel-execution-test--timeout)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or (funcall pred)
        (ert-fail (format "timed out waiting for %s" (or what "a condition"))))))

(defun mevedel-execution-test--await (start)
  "Call START with a callback and return the value it is called with."
  (let ((box nil))
    (funcall start (lambda (value) (setq box (list value))))
    (mevedel-execution-test--wait-until (lambda () box) "a callback")
    (car box)))

(defun mevedel-execution-test--start (session command &rest args)
  "Start COMMAND in SESSION with ARGS; return the first Observation."
  (mevedel-execution-test--await
   (lambda (cb)
     (apply #'mevedel-execution-start-bash cb :session session :command command args))))

(defun mevedel-execution-test--final (session owner id)
  "Poll execution ID of OWNER in SESSION until its final Observation.
Return (OUTPUT . FINAL-OBSERVATION), OUTPUT being everything read."
  (let ((output "") final)
    (while (not final)
      (let ((obs (mevedel-execution-test--await
                  (lambda (cb) (mevedel-execution-observe session owner id cb :wait-ms 5000)))))
        (should-not (plist-get obs :error))
        (setq output (concat output (plist-get obs :output)))
        (when (plist-get obs :final) (setq final obs))))
    (cons output final)))

(defun mevedel-execution-test--facts (obs)
  "Return the facts of OBS."
  (plist-get obs :facts))

;;;; From the tests of mailbox

(defvar mevedel-execution-mailbox-test--gates nil
  "Directories of the gates made by the running test.")

(defun mevedel-execution-mailbox-test--gate ()
  "Return a new fifo for a command to wait on."
  (let* ((dir (make-temp-file "mevedel-ert-gate-" t))
         (fifo (expand-file-name "gate" dir)))
    (push dir mevedel-execution-mailbox-test--gates)
    (unless (eql 0 (call-process "mkfifo" nil nil nil fifo))
      (ert-fail "mkfifo failed"))
    fifo))

(defun mevedel-execution-mailbox-test--open (fifo)
  "Open the gate FIFO: its command reads a line and goes on.
Opening a fifo waits for its reader; `timeout' bounds that."
  (unless (eql 0 (call-process "timeout" nil nil nil
                               (number-to-string mevedel-execution-test--timeout)
                               "sh" "-c" "echo go > \"$1\"" "sh" fifo))
    (ert-fail (format "nobody read the gate %s" fifo))))

(defun mevedel-execution-mailbox-test--start-background (session command label &rest args)
  "Start COMMAND labelled LABEL in SESSION in the background; return its id.
ARGS are more keywords for `mevedel-execution-start-bash'."
  (let ((obs (apply #'mevedel-execution-test--start session command
                    :yield-time-ms 0 :label label args)))
    (should-not (plist-get obs :error))
    (should-not (plist-get obs :final))
    (plist-get (plist-get obs :facts) :execution-id)))

(defun mevedel-execution-mailbox-test--background (session text &optional owner label)
  "Start in SESSION a command that prints TEXT once its gate opens.
OWNER defaults to \"/root\"; LABEL names the command.  Return
\(EXECUTION-ID . GATE)."
  (let ((gate (mevedel-execution-mailbox-test--gate)))
    (cons (mevedel-execution-mailbox-test--start-background
           session (format "read -r _ < %s; echo %s"
                           (shell-quote-argument gate) (shell-quote-argument text))
           label :owner owner)
          gate)))

(defun mevedel-execution-mailbox-test--finish (session text &optional owner)
  "Run a command printing TEXT in SESSION to its end in the background.
Return its execution id; its result goes to the mailbox."
  (let ((started (mevedel-execution-mailbox-test--background session text owner)))
    (mevedel-execution-mailbox-test--open (cdr started))
    (car started)))

(defun mevedel-execution-mailbox-test--peek (session id)
  "Return the current Observation of ID in SESSION, seen by the user.
The user's view never counts as the model reading the result, so
it changes nothing about wakes."
  (mevedel-execution-call
   (mevedel-execution-ensure-session session) 'exec/observe
   (list :sessionId (mevedel-execution-session-id session) :as "user" :executionId id)))

(defun mevedel-execution-mailbox-test--wait-consumed (session id seen)
  "Wait until the helper made the delivery of ID in SESSION durable.
SEEN is the recording function of the test.  Return the Observation
that shows it: final, with no delivery pending and nothing unread."
  ;; Looking before the delivery is made would take the output from it:
  ;; any observation of a running command reads what it printed.
  (mevedel-execution-test--wait-until
   (lambda () (cl-find id (cdr (funcall seen)) :key #'cl-caddr :test #'equal))
   (format "the delivery of %s" id))
  (let (obs)
    (mevedel-execution-test--wait-until
     (lambda ()
       (setq obs (mevedel-execution-mailbox-test--peek session id))
       (and (plist-get obs :final)
            (not (plist-get obs :delivery-id))
            (eql 0 (plist-get (plist-get obs :facts) :unread-bytes))))
     (format "the delivery of %s to be consumed" id))
    obs))

(defvar mevedel-execution-mailbox-test--drop nil
  "Non-nil makes the next durable ack vanish; see the recording helper.")

(defun mevedel-execution-mailbox-test--call-recording (fn)
  "Call FN with a function returning the acks and deliveries seen so far.
That function returns (ACKS . DELIVERIES), oldest first: ACKS as
\(DELIVERY-ID ERROR) for each `mailbox/ack' the facade sent,
DELIVERIES as (DELIVERY-ID ATTEMPT EXECUTION-ID) for each
`mailbox/deliver' that reached it.  While `mevedel-execution-mailbox-test--drop' is
non-nil, the next durable ack is not sent (as if it were lost)."
  (let* ((acks nil) (deliveries nil)
        (record-ack (lambda (_conn _session-id delivery-id error)
                      (push (list delivery-id error) acks)))
        (drop (lambda (orig conn session-id delivery-id error)
                (if (and mevedel-execution-mailbox-test--drop (not error))
                    (setq mevedel-execution-mailbox-test--drop nil)
                  (funcall orig conn session-id delivery-id error))))
        (record-delivery (lambda (_conn params)
                           (push (list (plist-get params :deliveryId)
                                       (plist-get params :attempt)
                                       (plist-get (plist-get params :attrs) :executionId))
                                 deliveries))))
    (advice-add 'mevedel-execution--send-ack :around drop)
    (advice-add 'mevedel-execution--send-ack :before record-ack)
    (advice-add 'mevedel-execution--deliver :before record-delivery)
    (unwind-protect
        (funcall fn (lambda () (cons (reverse acks) (reverse deliveries))))
      (advice-remove 'mevedel-execution--send-ack drop)
      (advice-remove 'mevedel-execution--send-ack record-ack)
      (advice-remove 'mevedel-execution--deliver record-delivery)
      (setq mevedel-execution-mailbox-test--drop nil))))

(defmacro mevedel-execution-mailbox-test--with-helper (limits var seen &rest body)
  "Run BODY with VAR bound to a session opened with LIMITS.
SEEN is bound to the function of
`mevedel-execution-mailbox-test--call-recording'."
  (declare (indent 3) (debug (form symbolp symbolp body)))
  `(let ((mevedel-execution-test--limits ,limits)
         (mevedel-execution-mailbox-test--gates nil))
     (unwind-protect
         (mevedel-execution-test--with-helper ,var
           (mevedel-execution-mailbox-test--call-recording
            (lambda (,seen) (ignore ,seen) ,@body)))
       ;; Gone already when made below the fixture's temporary root.
       (dolist (dir mevedel-execution-mailbox-test--gates)
         (when (file-directory-p dir)
           (delete-directory dir t))))))

(defun mevedel-execution-mailbox-test--acks-of (seen delivery-id)
  "Return the errors of the acks SEEN sent for DELIVERY-ID (nil = durable)."
  (mapcar #'cadr (cl-remove-if-not (lambda (a) (equal (car a) delivery-id))
                                   (car (funcall seen)))))

(defun mevedel-execution-mailbox-test--attempts-of (seen delivery-id)
  "Return the attempts of the deliveries SEEN got for DELIVERY-ID."
  (mapcar #'cadr (cl-remove-if-not (lambda (d) (equal (car d) delivery-id))
                                   (cdr (funcall seen)))))

(defun mevedel-execution-mailbox-test--acking-sink (record ack)
  "A sink that keeps nothing: RECORD is durable at once through ACK."
  (ignore record)
  (funcall ack))

;;;; From the tests of transcript

(defun mevedel-execution-transcript-test--face-p (face string &optional pos)
  "Return non-nil if FACE is among the faces of STRING at POS (default 0)."
  (let ((f (get-text-property (or pos 0) 'face string)))
    (memq face (if (listp f) f (list f)))))

;;;; From the tests of panel

(defun mevedel-execution-panel-test--call-with-panel (session fn)
  "Call FN with the panel buffer of SESSION; kill the buffer after."
  (let ((buffer (mevedel-execution-panel session)))
    (unwind-protect
        (with-current-buffer buffer (funcall fn buffer))
      (when (buffer-live-p buffer) (kill-buffer buffer)))))

(defmacro mevedel-execution-panel-test--with-panel (session var &rest body)
  "Run BODY in the panel of SESSION, with VAR bound to its buffer."
  (declare (indent 2) (debug (form symbolp body)))
  `(mevedel-execution-panel-test--call-with-panel ,session (lambda (,var) (ignore ,var) ,@body)))

(defun mevedel-execution-panel-test--ids ()
  "Return the execution ids the current panel shows, in order."
  (mapcar #'car tabulated-list-entries))

(defun mevedel-execution-panel-test--column (id name)
  "Return the column NAME of row ID in the current panel."
  (let ((cols (cadr (assoc id tabulated-list-entries)))
        (i (cl-position name (mapcar #'car tabulated-list-format) :test #'equal)))
    (and cols (substring-no-properties (aref cols i)))))

(defun mevedel-execution-panel-test--shown-p (text)
  "Return non-nil if the current buffer shows TEXT."
  (save-excursion
    (goto-char (point-min))
    (search-forward text nil t)))

(defun mevedel-execution-panel-test--press (key id)
  "Press KEY on the row of execution ID in the current panel."
  (goto-char (or (mevedel-execution-panel-row-start id)
                 (ert-fail (format "no row for %s" id))))
  (let ((command (key-binding (kbd key))))
    (should (commandp command))
    ;; A command that pops to another buffer leaves the panel current.
    (save-current-buffer (call-interactively command))))

(defun mevedel-execution-panel-test--changed (session-id &rest live)
  "Dispatch an `exec/changed' after which SESSION-ID has the wire facts LIVE.
It carries LIVE and, as settled, every other execution the facade
holds live.  The panel has handled it, as the queue's timer would,
on return."
  (let* ((ids (mapcar (lambda (facts) (plist-get facts :executionId)) live))
         (gone (cl-loop for facts in (mevedel-execution--live-list session-id)
                        for id = (plist-get facts :execution-id)
                        unless (member id ids)
                        collect (list :executionId id :state "settled"))))
    (mevedel-execution--dispatch-notification
     mevedel-execution--current 'exec/changed
     (list :sessionId session-id :changed (vconcat gone live))))
  (mevedel-execution-drain)
  ;; Not held to be coalesced with the next one.
  (mevedel-execution-flush-changed))

(defun mevedel-execution-panel-test--redisplay (&rest windows)
  "Run the window change functions as redisplay runs them after WINDOWS changed.
Batch Emacs never redisplays.  As redisplay does, each window's
buffer's own functions run with the selected window's buffer
current, not the window's; then the global ones, with the frame."
  (with-current-buffer (window-buffer (selected-window))
    (dolist (window windows)
      (when (local-variable-p 'window-buffer-change-functions (window-buffer window))
        (dolist (fn (buffer-local-value 'window-buffer-change-functions (window-buffer window)))
          (unless (eq fn t) (funcall fn window)))))
    (dolist (fn (default-value 'window-buffer-change-functions))
      (funcall fn (selected-frame)))))

(defun mevedel-execution-panel-test--wait-gone (id what)
  "Wait until the current panel has no row ID; WHAT names the wait.
A failure says what the panel and the system knew of the process."
  (let ((facts (mevedel-execution-panel-facts id)))
    (condition-case err
        (mevedel-execution-test--wait-until
         (lambda () (not (member id (mevedel-execution-panel-test--ids)))) what)
      (ert-test-failed
       (let ((pid (plist-get facts :pid)))
         (ert-fail (list (cadr err) :facts (mevedel-execution-panel-facts id)
                         :process (and pid (process-attributes pid)))))))))

(defun mevedel-execution-panel-test--gone-p (pid)
  "Return non-nil if PID has exited (a zombie counts as exited)."
  (let ((attrs (process-attributes pid)))
    (or (null attrs) (equal (alist-get 'state attrs) "Z"))))

(defmacro mevedel-execution-test--as-person (var messages &rest body)
  "Run BODY with VAR bound to a session on a fresh helper, as a person.
The person's sessions live in a temporary directory, and messages
are recorded, newest first, in the special variable MESSAGES."
  (declare (indent 2) (debug (symbolp symbolp body)))
  `(let ((person-dir (make-temp-file "mevedel-ert-person-" t))
         (,messages nil))
     (unwind-protect
         (mevedel-execution-test--with-helper ,var
           (let ((mevedel-execution-person-directory person-dir))
             (cl-letf* ((orig (symbol-function 'message))
                        ((symbol-function 'message)
                         (lambda (fmt &rest args)
                           (when fmt
                             (push (apply #'format fmt args) ,messages))
                           (apply orig fmt args))))
               ,@body)))
       (dolist (b (buffer-list))
         (when (string-match-p "\\`\\*mevedel" (buffer-name b)) (kill-buffer b)))
       (delete-directory person-dir t))))

(provide 'mevedel-execution-test-support)
;;; mevedel-execution-test-support.el ends here

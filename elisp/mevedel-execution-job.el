;;; mevedel-execution-job.el --- One-shots, helpers and batch Eval through mevedel-exec  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A job runs to its end and gives terminal facts: a one-shot (an argv
;; list), a helper (read-only inputs and a private scratch directory),
;; or a batch Eval of a form in a fresh Emacs.  Eval is a job of kind
;; "eval", so it lives here with the job's machinery.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'mevedel-execution-bash)

;;;; One-shots, helpers and batch Eval

;; A one-shot runs to its end (the helper never yields it); the start
;; request's answer is its final observation.  Its terminal facts are
;; made from that answer and, when the answer was bounded, from the
;; log, read in the filter as the answers come: only the package's
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
         (conn (mevedel-execution-session-connection (mevedel-execution-session-id session)))
         (give-up (lambda (&rest _)
                    (mevedel-execution--job-finish
                     job (mevedel-execution--terminal-facts
                          job bounded facts (mevedel-execution--termination-error facts))))))
    (if (not conn)
        (funcall give-up)
      (setf (mevedel-execution--job-handle job)
            (mevedel-execution-call-async
             conn 'spool/read
             (mevedel-execution-session-params
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
         (conn (mevedel-execution-ensure-session session)))
    (push job mevedel-execution--jobs)
    (condition-case err
        (setf (mevedel-execution--job-handle job)
              (mevedel-execution-call-async
               conn 'exec/start
               (mevedel-execution-session-params
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
          (mevedel-execution-defer #'mevedel-execution-run-callback
                                    buffer (lambda (_) (funcall teardown)) nil)
        (mevedel-execution-defer #'mevedel-execution-run-callback
                                  buffer callback result)))))

(defun mevedel-execution--job-run (job params timeout)
  "Start JOB with PARAMS and TIMEOUT (see `mevedel-execution--job-start'), wait.
Return its terminal facts.  The wait runs timers and process
output (`accept-process-output', a tenth of a second at a time);
\\[keyboard-quit] cancels the request in the helper, which stops the
command, and quits."
  (when (mevedel-execution-in-filter-p)
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
    (mevedel-execution-drain)
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
                :sandbox (mevedel-execution-sandbox-params writable-roots additional-permissions
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
NAME, COMMAND, WORKDIR, WRITABLE-ROOTS, TIMEOUT,
ADDITIONAL-PERMISSIONS, SANDBOX-PERMISSIONS, SESSION and OWNER, and
the facts, are those of `mevedel-execution-start-one-shot'.  The
wait runs timers and process output; \\[keyboard-quit] stops the
command in the helper and quits."
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
                :sandbox (mevedel-execution-sandbox-params writable-roots nil nil read-paths)))))

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
\(the variable `invocation-directory', the variable
`invocation-name'), started with -L for each directory of
LOAD-PATH, as a one-shot of kind \"eval\" in a
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

(provide 'mevedel-execution-job)
;;; mevedel-execution-job.el ends here

;;; mevedel-execution-person-test.el --- ERT tests of what a person runs  -*- lexical-binding: t; -*-

;;; Commentary:

;; The person's commands (shell command, build, sessions, stop-all,
;; restart, history, the exit question), the live output buffer and the
;; panel's finished rows, marks, columns and input, against the real
;; helper with the fixtures of the other test files.  Commands end when
;; the test opens their gate (a fifo) or on their own; every wait is a
;; bounded loop on a condition.  Only the waiting and listening facts,
;; which this tree's helper does not report yet, are given as a fake
;; `exec/changed', for their rendering.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-person)

;;;; Helpers

(defmacro mevedel-execution-person-test--with (var &rest body)
  "Run BODY with VAR bound to a session on a fresh helper, as a person.
The person's listener is on, and messages are recorded in
`mevedel-execution-person-test--messages'."
  (declare (indent 1) (debug (symbolp body)))
  `(mevedel-execution-test--as-person ,var mevedel-execution-person-test--messages
     (add-hook 'mevedel-execution-event-functions
               #'mevedel-execution-person--listener -90)
     ,@body))

(defvar mevedel-execution-person-test--messages nil
  "Messages shown during the running test, newest first.")

(defun mevedel-execution-person-test--said-p (text)
  "Return non-nil if a message equal to TEXT was shown."
  (member text mevedel-execution-person-test--messages))

(defun mevedel-execution-person-test--project ()
  "Return a fresh directory to run a person's commands in."
  (file-name-as-directory (make-temp-file "mevedel-ert-project-" t)))

(defun mevedel-execution-person-test--settled-p (buffer)
  "Return non-nil once the output BUFFER knows its command settled."
  (with-current-buffer buffer
    (equal (plist-get mevedel-execution-spool--facts :state) "settled")))

(defun mevedel-execution-person-test--text (buffer)
  "Return BUFFER's text without properties."
  (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max))))

(defun mevedel-execution-person-test--header (buffer)
  "Return the header line of the output BUFFER as text."
  (with-current-buffer buffer
    (substring-no-properties (mevedel-execution-spool--header))))

(defun mevedel-execution-person-test--gated (session command label)
  "Start COMMAND labelled LABEL in SESSION, in the background, once a gate opens.
Return (EXECUTION-ID . GATE)."
  (let ((gate (mevedel-execution-mailbox-test--gate)))
    (cons (mevedel-execution-mailbox-test--start-background
           session (format "read -r _ < %s; %s" (shell-quote-argument gate) command) label)
          gate)))

;;;; The person's session of a directory

(ert-deftest mevedel-execution-person-test-helper-starts-while-the-project-is-found ()
  "A person's first command starts the helper before finding the project.
The first lookup of a project loads the VC backends and asks each
of them, some tens of milliseconds in a fresh Emacs; the helper's
start and handshake take as long, and run meanwhile."
  (mevedel-execution-test--as-person _session _messages
    (mevedel-execution-shutdown (mevedel-execution-current-connection))
    (let* ((dir (file-name-as-directory (make-temp-file "mevedel-ert-project-" t)))
           (running nil)
           (note (lambda (&rest _)
                   (let ((conn (mevedel-execution-current-connection)))
                     (push (and conn (jsonrpc-running-p conn) t) running)))))
      (should-not (let ((conn (mevedel-execution-current-connection)))
                    (and conn (jsonrpc-running-p conn))))
      (advice-add 'project-current :before note)
      (unwind-protect
          (should (mevedel-execution-person-session dir))
        (advice-remove 'project-current note))
      (should (equal running '(t)))
      (should (mevedel-execution-session-connection
               (mevedel-execution-session-id (mevedel-execution-person-session dir)))))))

(ert-deftest mevedel-execution-person-test-project-found-once ()
  "A directory's project is looked for once, and again when a name changes.
The second command in a directory asks no VC backend; a repository
made in an ancestor afterwards is the directory's project at once."
  (let* ((top (file-name-as-directory (make-temp-file "mevedel-ert-roots-" t)))
         (outer (file-name-as-directory (expand-file-name "outer" top)))
         (inner (file-name-as-directory (expand-file-name "inner" outer)))
         (old (time-subtract nil 3600))
         (looks 0)
         (count (lambda (&rest _) (cl-incf looks)))
         ;; The temporary directory (/tmp) changes whenever the suite's
         ;; other shards make a file there: only the times of TOP and
         ;; below are this test's to count on.
         (above (length (split-string top "/" t))) ; TOP's ancestors, root first
         (own (lambda (stamp) (cons (car stamp) (nthcdr above (cdr stamp)))))
         ;; Times set an hour back are settled; the temporary
         ;; directory's own may not be.
         (mevedel-execution--project-root-settle 0))
    (unwind-protect
        (progn
          (make-directory inner t)
          (set-file-times inner old)
          (set-file-times outer old)
          (advice-add 'mevedel-execution--directory-stamp :filter-return own)
          (advice-add 'project-current :before count)
          (should (string-prefix-p "person-inner-" (mevedel-execution-person-session-id inner)))
          (should (= looks 1))
          (should (equal (mevedel-execution-person-session-id inner)
                         (mevedel-execution-person-session-id inner)))
          (should (= looks 1))
          ;; A repository in an ancestor changes that ancestor's time.
          (make-directory (expand-file-name ".git" outer))
          (should (equal (mevedel-execution-person-session-id inner)
                         (mevedel-execution-person-session-id outer)))
          (should (string-prefix-p "person-outer-" (mevedel-execution-person-session-id inner)))
          (should (= looks 3))
          ;; A directory changed within the settling time is looked
          ;; for on each command.
          (let ((mevedel-execution--project-root-settle 3600))
            (mevedel-execution-person-session-id top)
            (mevedel-execution-person-session-id top))
          (should (= looks 5)))
      (advice-remove 'mevedel-execution--directory-stamp own)
      (advice-remove 'project-current count)
      (delete-directory top t))))

;;;; The shell command and its live output

(ert-deftest mevedel-execution-person-test-shell-command-waits-once ()
  "M-x mevedel-execution-shell-command waits for the helper once: the start.
Its output buffer is open and following when it returns, and the
first output comes into it by itself, without another wait."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((dir (mevedel-execution-person-test--project))
           (default-directory dir)
           (gate (mevedel-execution-mailbox-test--gate))
           ;; The person's session opens first, as for any command.
           (_ (mevedel-execution-person-session dir))
           (waits nil)
           (note (lambda (_conn method &rest _) (push method waits)))
           (buffer nil))
      (advice-add 'mevedel-execution-call :before note)
      (unwind-protect
          (setq buffer (mevedel-execution-shell-command
                        (format "printf ready; read -r _ < %s" (shell-quote-argument gate))))
        (advice-remove 'mevedel-execution-call note))
      (should (equal waits '(exec/start)))
      (mevedel-execution-test--wait-until
       (lambda () (equal (mevedel-execution-person-test--text buffer) "ready"))
       "the first output")
      (mevedel-execution-mailbox-test--open gate)
      (mevedel-execution-test--wait-until
       (lambda () (mevedel-execution-person-test--settled-p buffer)) "its end"))))

(ert-deftest mevedel-execution-person-test-quick-end-is-not-delivered ()
  "A person's command that ends at once is shown and told, never delivered.
It may end before Emacs has read its start's answer, before any
observation of its owner could claim it: it is still the person's,
not the mailbox's."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-person-test--project))
           (delivered nil)
           (note (lambda (_conn params) (push (plist-get params :owner) delivered)))
           (buffers nil))
      (advice-add 'mevedel-execution--deliver :before note)
      (unwind-protect
          (progn
            (dotimes (_ 10)
              (push (mevedel-execution-shell-command "true") buffers))
            ;; A delivery would come before the end's exec/settled,
            ;; which brings the facts to each buffer.
            (mevedel-execution-test--wait-until
             (lambda () (cl-every #'mevedel-execution-person-test--settled-p buffers))
             "the ten ends")
            (should (= 10 (cl-count-if (lambda (m) (string-match-p "\\`Command .true. completed" m))
                                       mevedel-execution-person-test--messages)))
            (should-not delivered))
        (advice-remove 'mevedel-execution--deliver note)))))

(ert-deftest mevedel-execution-person-test-end-before-the-answer ()
  "A person's command whose end came before its start's answer was read.
Its end is shown, told and kept for the panel by the time the start
returns, though it was not yet known as the person's when it came."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-person-test--project))
           (gate (mevedel-execution-mailbox-test--gate))
           (settled nil)
           (reader (lambda (type plist)
                     (when (eq type 'settled) (push (plist-get plist :facts) settled))))
           ;; Emacs is busy while the helper starts the command (here:
           ;; waiting for its end, which lets the helper's messages in).
           (busy (lambda (&rest _)
                   (mevedel-execution-mailbox-test--open gate)
                   (mevedel-execution-test--wait-until (lambda () settled) "its end")))
           (buffer nil))
      (mevedel-execution-add-reader reader)
      (advice-add 'mevedel-execution-spool-output-mode :after busy)
      (unwind-protect
          (setq buffer (mevedel-execution-shell-command
                        (format "read -r _ < %s" (shell-quote-argument gate))))
        (advice-remove 'mevedel-execution-spool-output-mode busy)
        (remove-hook 'mevedel-execution-event-functions reader))
      (let ((id (buffer-local-value 'mevedel-execution-spool--execution-id buffer)))
        (should (equal (plist-get (car settled) :execution-id) id))
        (should (mevedel-execution-person-test--settled-p buffer))
        (should (cl-find-if (lambda (m) (string-match-p "\\`Command .read -r _ .* completed" m))
                            mevedel-execution-person-test--messages))
        (should (member id (mapcar (lambda (f) (plist-get f :execution-id))
                                   (mevedel-execution-finished-work
                                    (mevedel-execution-session-id
                                     (buffer-local-value 'mevedel-execution-buffer-session buffer))))))))))

(ert-deftest mevedel-execution-person-test-shell-command-follows ()
  "M-x mevedel-execution-shell-command shows a live output buffer.
It appends output as it comes (no g), renders colours, handles
carriage returns, visits errors with next-error, names the command,
state and exit in its header, and a message says how it ended."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((dir (mevedel-execution-person-test--project))
           (gate (mevedel-execution-mailbox-test--gate))
           (default-directory dir)
           (command (format "printf '\\033[31mred\\033[0m plain\\n'; printf 'step 1\\rstep 2\\r'; printf 'step 3\\n'; read -r _ < %s; echo 'main.c:2:3: error: missing semicolon'; exit 2"
                            (shell-quote-argument gate)))
           (buffer nil))
      (with-temp-file (expand-file-name "main.c" dir) (insert "int main(void)\n{ return 0 }\n"))
      ;; A refused command is the person's to read.
      (should (string-match-p "backgrounding is not allowed"
                              (cadr (should-error (mevedel-execution-shell-command "sleep 5 &")
                                                  :type 'user-error))))
      (cl-letf (((symbol-function 'read-shell-command) (lambda (&rest _) command)))
        (setq buffer (call-interactively #'mevedel-execution-shell-command)))
      (should (bufferp buffer))
      (with-current-buffer buffer
        (should (derived-mode-p 'mevedel-execution-spool-output-mode))
        (should (derived-mode-p 'compilation-mode))
        (should buffer-read-only)
        (should (equal default-directory dir)))
      ;; The person's session of the project runs it, as the person.
      (let ((person (mevedel-execution-find-session (mevedel-execution-person-session-id dir))))
        (should person)
        (should (equal (plist-get (buffer-local-value 'mevedel-execution-spool--facts buffer) :owner)
                       mevedel-execution-person-owner))
        (should (eq (buffer-local-value 'mevedel-execution-buffer-session buffer) person)))
      (mevedel-execution-test--wait-until
       (lambda () (string-match-p "step 3" (mevedel-execution-person-test--text buffer)))
       "the first lines in the live buffer")
      (should (equal (mevedel-execution-person-test--text buffer) "red plain\nstep 3\n"))
      (with-current-buffer buffer
        (should (equal (get-text-property (point-min) 'font-lock-face)
                       (get-text-property 0 'font-lock-face (ansi-color-apply "\e[31mx")))))
      (should (string-match-p "running" (mevedel-execution-person-test--header buffer)))
      (should-not (mevedel-execution-person-test--settled-p buffer))
      ;; A window at the end stays at the end as output comes.
      (set-window-buffer (selected-window) buffer)
      (set-window-point (selected-window) (with-current-buffer buffer (point-max)))
      ;; Nothing is asked for: the next line comes by itself.
      (mevedel-execution-mailbox-test--open gate)
      (mevedel-execution-test--wait-until
       (lambda () (and (mevedel-execution-person-test--settled-p buffer)
                       (string-match-p "error: missing"
                                       (mevedel-execution-person-test--text buffer))))
       "the rest of the output and the end")
      (should (equal (mevedel-execution-person-test--text buffer)
                     "red plain\nstep 3\nmain.c:2:3: error: missing semicolon\n"))
      (should (= (window-point (selected-window)) (with-current-buffer buffer (point-max))))
      (let ((header (mevedel-execution-person-test--header buffer)))
        (should (string-match-p "printf" header))
        (should (string-match-p "failed (exit 2)" header)))
      (mevedel-execution-test--wait-until
       (lambda () (cl-find-if (lambda (m) (string-match-p "\\`Command [`‘]printf .*[’'] failed (exit code 2)\\'" m))
                              mevedel-execution-person-test--messages))
       "the message saying it failed")
      ;; next-error visits the error's file, line and column.
      (let ((next-error-last-buffer buffer))
        (save-window-excursion
          (next-error)
          (set-buffer (window-buffer (selected-window)))
          (should (equal (buffer-name) "main.c"))
          (should (= (line-number-at-pos) 2))
          (should (= (current-column) 2))))
      (kill-buffer "main.c"))))

(ert-deftest mevedel-execution-person-test-follows-a-fast-producer ()
  "A command that writes faster than the buffer reads is followed to its end.
The log grows while each range is read, so the helper's size is
often past what a read returned; the buffer keeps following, stays
within two pages, and ends with the last line."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-person-test--project))
           (mevedel-execution-spool-page-bytes 65536)
           (buffer (mevedel-execution-shell-command "seq 1 200000")))
      (mevedel-execution-test--wait-until
       (lambda () (and (mevedel-execution-person-test--settled-p buffer)
                       (string-suffix-p "\n199999\n200000\n"
                                        (mevedel-execution-person-test--text buffer))))
       "the last line of a fast producer")
      (with-current-buffer buffer
        (should (<= (buffer-size) (* 2 mevedel-execution-spool-page-bytes)))
        ;; Whole lines from a line start, in order.
        (goto-char (point-min))
        (let ((previous nil))
          (while (not (eobp))
            (let ((n (string-to-number (buffer-substring (point) (line-end-position)))))
              (when previous (should (= n (1+ previous))))
              (setq previous n))
            (forward-line 1)))
        (should (string-match-p "bytes [0-9]+-1288895 of 1288895"
                                (mevedel-execution-person-test--header buffer)))))))

(ert-deftest mevedel-execution-person-test-output-pages-and-unknown-ids ()
  "Pages of a big log start and end at lines; an unknown id makes no buffer."
  (mevedel-execution-person-test--with session
    (let* ((obs (mevedel-execution-test--start session "seq 1 5000"))
           (id (plist-get (plist-get obs :facts) :execution-id))
           (mevedel-execution-spool-page-bytes 1000)
           (buffer (mevedel-execution-spool-open-output session id t)))
      (with-current-buffer buffer
        (should (string-suffix-p "\n4999\n5000\n" (buffer-string)))
        (should (string-match-p "\\`[0-9]+\n" (buffer-string)))
        (mevedel-execution-spool-previous-page)
        (dolist (line (split-string (buffer-string) "\n" t))
          (should (string-match-p "\\`[0-9]+\\'" line)))
        ;; Each page starts right after the last one's last line.
        (let ((first (string-to-number (buffer-substring (point-min) (line-end-position)))))
          (mevedel-execution-spool-next-page)
          (goto-char (point-max))
          (forward-line -1)
          (should (= 5000 (string-to-number (buffer-substring (point) (line-end-position)))))
          (mevedel-execution-spool-previous-page)
          (should (= first (string-to-number (buffer-substring (point-min) (line-end-position))))))
        (should (string-match-p "bytes [0-9]+-[0-9]+ of [0-9]+"
                                (mevedel-execution-person-test--header buffer)))
        (should (string-match-p "seq 1 5000 · completed (exit 0)"
                                (mevedel-execution-person-test--header buffer)))))
    (let ((before (length (buffer-list))))
      (cl-letf (((symbol-function 'completing-read)
                 (lambda (_prompt _coll &rest _)
                   (mevedel-execution-session-id session))))
        (should-error (mevedel-execution-spool-open-output session "exec-nope0-000099")
                      :type 'user-error))
      (should-not (get-buffer "*mevedel-exec output exec-nope0-000099*"))
      (should (= before (length (buffer-list)))))))

;;;; Builds

(ert-deftest mevedel-execution-person-test-compile-and-recompile ()
  "A build runs in a compilation buffer; next-error visits; g runs it again."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((dir (mevedel-execution-person-test--project))
           (default-directory dir)
           (compilation-read-command nil)
           (compile-command "echo 'lib.c:1:5: error: boom' >&2; exit 2")
           (buffer (call-interactively #'mevedel-execution-compile)))
      (with-temp-file (expand-file-name "lib.c" dir) (insert "int x = y;\n"))
      (should (equal (buffer-name buffer) mevedel-execution-compilation-buffer-name))
      (mevedel-execution-test--wait-until
       (lambda () (and (mevedel-execution-person-test--settled-p buffer)
                       (string-match-p "boom" (mevedel-execution-person-test--text buffer))))
       "the build to end")
      (mevedel-execution-test--wait-until
       (lambda () (mevedel-execution-person-test--said-p
                   ;; What it was and the command as typed, unescaped.
                   (format-message "Compile `%s' failed (exit code 2)" compile-command)))
       "the build's message")
      (save-window-excursion
        (with-current-buffer buffer (goto-char (point-min)))
        (next-error)
        (set-buffer (window-buffer (selected-window)))
        (should (equal (buffer-name) "lib.c"))
        (should (= (current-column) 4)))
      (kill-buffer "lib.c")
      (let ((first (buffer-local-value 'mevedel-execution-spool--execution-id buffer)))
        (with-current-buffer buffer
          (call-interactively (key-binding (kbd "g"))))
        (let ((again (get-buffer mevedel-execution-compilation-buffer-name)))
          (should-not (equal first (buffer-local-value 'mevedel-execution-spool--execution-id again)))
          (mevedel-execution-test--wait-until
           (lambda () (mevedel-execution-person-test--settled-p again)) "the second build"))
        (let ((third (mevedel-execution-recompile)))
          (should (equal (buffer-name third) mevedel-execution-compilation-buffer-name)))))))

;;;; Sessions, stop-all, restart, exit

(ert-deftest mevedel-execution-person-test-sessions-stop-all-restart ()
  "Sessions open and close from M-x; stop-all and restart-helper ask first."
  (mevedel-execution-person-test--with session
    (let* ((dir (mevedel-execution-person-test--project))
           (default-directory dir)
           (asked nil))
      ;; open-session offers the project's session and its directory.
      (let ((person (cl-letf (((symbol-function 'read-string)
                               (lambda (_p _i _h default) default))
                              ((symbol-function 'read-directory-name)
                               (lambda (_p _dir default &rest _) default)))
                      (call-interactively #'mevedel-execution-open-session))))
        (should (equal (mevedel-execution-session-id person)
                       (mevedel-execution-person-session-id dir)))
        (should (string-prefix-p (file-name-as-directory mevedel-execution-person-directory)
                                 (mevedel-execution-session-state-dir person)))
        (mevedel-execution-mailbox-test--start-background person "sleep 300" "long")
        (mevedel-execution-mailbox-test--start-background session "sleep 301" "other")
        (mevedel-execution-mailbox-test--start-background session "sleep 302" "third")
        ;; The panel of the person's session, to see it close.
        (mevedel-execution-panel-test--with-panel person _panel
          (cl-letf (((symbol-function 'yes-or-no-p) (lambda (p) (push p asked) t))
                    ((symbol-function 'completing-read)
                     (lambda (&rest _) (mevedel-execution-session-id person))))
            (should (= 1 (call-interactively #'mevedel-execution-close-session))))
          (should (string-match-p "has 1 running command; stop and close" (car asked)))
          (should-not (mevedel-execution-session-open-p person))
          (should (mevedel-execution-panel-test--shown-p
                   (format "Session %s is closed" (mevedel-execution-session-id person))))
          (should-error (call-interactively (key-binding (kbd "g"))) :type 'user-error)))
      ;; stop-all stops what runs everywhere, after asking.
      (setq asked nil)
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (p) (push p asked) t)))
        (should (= 2 (call-interactively #'mevedel-execution-stop-all))))
      (should (equal asked '("Stop 2 running commands? ")))
      (mevedel-execution-test--wait-until
       (lambda () (zerop (mevedel-execution-count-user session))) "everything to stop")
      ;; restart-helper: a new helper, the sessions reopened on it.
      (mevedel-execution-mailbox-test--start-background session "sleep 303" "fourth")
      (let ((generation (mevedel-execution-session-generation session)))
        (setq asked nil)
        (cl-letf (((symbol-function 'yes-or-no-p) (lambda (p) (push p asked) t)))
          (should (= 1 (call-interactively #'mevedel-execution-restart-helper))))
        (should (equal asked '("Restarting the helper stops 1 running command; restart? ")))
        (should (> (mevedel-execution-session-generation session) generation))
        (should (zerop (mevedel-execution-count-user session))))
      ;; The exit question names how many commands run; batch never asks.
      (mevedel-execution-mailbox-test--start-background session "sleep 304" "fifth")
      (should (mevedel-execution--confirm-kill-emacs))
      (setq asked nil)
      (let ((noninteractive nil))
        (cl-letf (((symbol-function 'yes-or-no-p) (lambda (p) (push p asked) nil)))
          (should-not (mevedel-execution--confirm-kill-emacs))))
      (should (string-match-p "\\`1 command still running under mevedel-exec" (car asked)))
      (should (memq #'mevedel-execution--confirm-kill-emacs kill-emacs-query-functions)))))

(ert-deftest mevedel-execution-person-test-recovery-reported-by-any-call ()
  "After a helper death, the plain call that reopens the session says what it marked lost."
  (mevedel-execution-person-test--with session
    (let ((id (mevedel-execution-mailbox-test--start-background session "sleep 300" "orphan")))
      (mevedel-execution-transcript-checkpoint session)
      (signal-process (jsonrpc--process mevedel-execution--current) 'KILL)
      (mevedel-execution-test--wait-until (lambda () (null mevedel-execution--current))
                                          "the helper's death to be seen")
      (should (zerop (mevedel-execution-count-user session)))
      (should (cl-find-if (lambda (m) (and (string-match-p "marked lost" m)
                                           (string-match-p (regexp-quote id) m)
                                           (string-match-p "orphan" m)))
                          mevedel-execution-person-test--messages)))))

(ert-deftest mevedel-execution-person-test-quiet-handles-and-buffers ()
  "A start's handle prints short; no visible events buffer; stderr is named."
  (mevedel-execution-person-test--with session
    (let ((handle (mevedel-execution-start-bash #'ignore :session session :command "echo hi")))
      (should (< (length (prin1-to-string handle)) 40)))
    (mevedel-execution-test--start session "echo done")
    (should-not (get-buffer "*mevedel-exec events*"))
    (should (get-buffer mevedel-execution-stderr-buffer))
    (should (equal mevedel-execution-stderr-buffer " *mevedel-exec stderr*"))))

(ert-deftest mevedel-execution-person-test-autoloads ()
  "After requiring the core alone, every entry point is a command."
  (let* ((elisp (expand-file-name "elisp" mevedel-execution-test--root))
         (out (with-temp-buffer
                (call-process
                 (expand-file-name invocation-name invocation-directory) nil t nil
                 "--batch" "-Q" "-L" elisp "--eval"
                 (prin1-to-string
                  '(progn
                     (require 'mevedel-execution)
                     (princ (mapconcat
                             (lambda (f) (format "%s=%s" f (and (commandp f) t)))
                             '(mevedel-execution-panel mevedel-execution-shell-command
                               mevedel-execution-compile mevedel-execution-recompile
                               mevedel-execution-history mevedel-execution-open-session
                               mevedel-execution-close-session mevedel-execution-stop-all
                               mevedel-execution-restart-helper
                               mevedel-execution-spool-open-output)
                             " ")))))
                (buffer-string))))
    (should (equal (cl-remove-if (lambda (w) (string-suffix-p "=t" w)) (split-string out))
                   nil))))

;;;; History

(ert-deftest mevedel-execution-person-test-history ()
  "The history shows a session's transcript lines with their buttons."
  (mevedel-execution-person-test--with session
    (pcase-let ((`(,id . ,gate) (mevedel-execution-mailbox-test--background session "hi" nil "greeter")))
      (mevedel-execution-mailbox-test--open gate)
      (mevedel-execution-test--final session nil id))
    (let ((buffer (cl-letf (((symbol-function 'completing-read)
                             (lambda (&rest _) (mevedel-execution-session-id session))))
                    (call-interactively #'mevedel-execution-history))))
      (with-current-buffer buffer
        (should (derived-mode-p 'mevedel-execution-history-mode))
        (should (string-match-p "● Background command \"greeter\" completed (exit code 0) \\[Show result\\]"
                                (buffer-string)))
        (goto-char (point-min))
        (should (text-property-search-forward 'button))))))

;;;; The panel: finished rows, marks, columns

(ert-deftest mevedel-execution-person-test-finished-rows-stay ()
  "A background command that fails stays, dimmed, with status and exit code.
Its output stays reachable; the person is told once; d and x dismiss;
the limit ages finished rows out."
  (mevedel-execution-person-test--with session
    (pcase-let ((`(,fail . ,gate) (mevedel-execution-mailbox-test--background session "oops" nil "builder"))
                (`(,ok . ,gate2) (mevedel-execution-mailbox-test--background session "fine" nil "lint")))
      (mevedel-execution-panel-test--with-panel session panel
        (save-window-excursion
          (set-window-buffer (selected-window) panel)
          (mevedel-execution-panel-redraw)
          (should (equal (mevedel-execution-panel-test--ids) (list fail ok)))
          ;; A panel on screen with live rows redraws its runtimes; one
          ;; that is hidden does not.
          (should (timerp mevedel-execution-panel--timer))
          (let ((timer mevedel-execution-panel--timer))
            (set-window-buffer (selected-window) (get-buffer-create "*scratch*"))
            (mevedel-execution-panel--hidden-check nil)
            (should-not mevedel-execution-panel--timer)
            (should-not (memq timer timer-list))
            (set-window-buffer (selected-window) panel)
            (mevedel-execution-panel-redraw)
            (should (timerp mevedel-execution-panel--timer)))
          (mevedel-execution-mailbox-test--open gate)
          (mevedel-execution-test--wait-until
           (lambda () (equal (mevedel-execution-panel-test--column fail "State") "completed 0"))
           "the finished row")
          ;; One more that fails.
          (let ((bad (pcase-let ((`(,id . ,g) (mevedel-execution-person-test--gated
                                                 session "echo broken; exit 2" "make")))
                       (mevedel-execution-mailbox-test--open g)
                       id)))
            (mevedel-execution-test--wait-until
             (lambda () (equal (mevedel-execution-panel-test--column bad "State") "failed 2"))
             "the failed row")
            ;; Its label, then the command as typed (behind its gate).
            (should (= 1 (cl-count-if
                          (lambda (m)
                            (string-match-p "\\`make [`‘]read -r _ < [^ ]+; echo broken; exit 2[’'] failed (exit code 2)\\'" m))
                          mevedel-execution-person-test--messages)))
            (should (equal (mevedel-execution-panel-test--ids) (list ok bad fail)))
            (let ((cell (aref (cadr (assoc bad tabulated-list-entries)) 4)))
              (should (eq (get-text-property 0 'face cell) 'mevedel-execution-panel-failed)))
            (let ((cell (aref (cadr (assoc bad tabulated-list-entries)) 3)))
              (should (eq (get-text-property 0 'face cell) 'mevedel-execution-panel-finished)))
            ;; Its output is still reachable.
            (mevedel-execution-panel-test--press "o" bad)
            (should (string-match-p "broken" (with-current-buffer
                                                  (format "*mevedel-exec output %s*" bad)
                                                (buffer-string))))
            ;; d on a live row refuses, on a finished one dismisses.
            (should-error (mevedel-execution-panel-test--press "d" ok) :type 'user-error)
            (mevedel-execution-panel-test--press "d" bad)
            (should (equal (mevedel-execution-panel-test--ids) (list ok fail)))
            (mevedel-execution-mailbox-test--open gate2)
            (mevedel-execution-test--wait-until
             (lambda () (equal (mevedel-execution-panel-test--column ok "State") "completed 0"))
             "the second finished row")
            ;; Nothing live: no clock.
            (should-not mevedel-execution-panel--timer)
            (call-interactively (key-binding (kbd "x")))
            (should-not (mevedel-execution-panel-test--ids))
            ;; The limit ages the oldest out.
            (let ((mevedel-execution-panel-finished-limit 1))
              (pcase-let ((`(,a . ,ga) (mevedel-execution-person-test--gated session "exit 3" "a")))
                (mevedel-execution-mailbox-test--open ga)
                (mevedel-execution-test--wait-until
                 (lambda () (equal (mevedel-execution-panel-test--column a "State") "failed 3")) "a")
                (pcase-let ((`(,b . ,gb) (mevedel-execution-person-test--gated session "exit 4" "b")))
                  (mevedel-execution-mailbox-test--open gb)
                  (mevedel-execution-test--wait-until
                   (lambda () (equal (mevedel-execution-panel-test--ids) (list b))) "b alone"))))))))))

(ert-deftest mevedel-execution-person-test-marks-and-columns ()
  "k on marked rows stops them all; columns fit 80 columns and sort."
  (mevedel-execution-person-test--with session
    (let ((a (mevedel-execution-mailbox-test--start-background session "sleep 300" "a"))
          (b (mevedel-execution-mailbox-test--start-background session "sleep 300" "b"))
          (c (mevedel-execution-mailbox-test--start-background session "sleep 300" "c")))
      (mevedel-execution-panel-test--with-panel session _panel
        (mevedel-execution-panel-test--press "m" a)
        (should (equal (tabulated-list-get-id) b))
        (mevedel-execution-panel-test--press "m" c)
        (should (equal mevedel-execution-panel-marked (list c a)))
        (goto-char (mevedel-execution-panel-row-start a))
        (should (looking-at "\\*"))
        (mevedel-execution-panel-test--press "k" b)
        (mevedel-execution-panel-test--wait-gone a "a to stop")
        (mevedel-execution-panel-test--wait-gone c "c to stop")
        (should (equal (mevedel-execution-panel-test--ids) (list b)))
        ;; Every column fits in 80 columns and in 60; Label takes the rest.
        (dolist (width '(80 60 160))
          (let* ((format (mevedel-execution-panel-format width))
                 (total (+ 2 (apply #'+ (mapcar (lambda (c) (1+ (nth 1 c))) format)))))
            (should (= (length format) 7))
            (should (<= total width))
            (should (>= (nth 1 (aref format 3)) 6))
            (when (>= width 80)
              ;; The label has the room, the id only its distinct part.
              (should (>= (nth 1 (aref format 3)) 24))
              (should (= (nth 1 (aref format 0)) 6))
              (should (>= (nth 1 (aref format 4)) 11)))))
        ;; Two labels alike in their first 20 characters still differ at 80.
        (let ((rows (list (list :execution-id "exec-abcde-000007" :label "npm run build:frontend" :state "running")
                          (list :execution-id "exec-abcde-000008" :label "npm run build:backend" :state "running"))))
          (let ((cells (mapcar (lambda (f) (cadr (mevedel-execution-panel-entry f))) rows))
                (w (nth 1 (aref (mevedel-execution-panel-format 80) 3))))
            (should (equal (mapcar (lambda (c) (substring-no-properties (aref c 0))) cells) '("000007" "000008")))
            (should (equal (get-text-property 0 'help-echo (aref (car cells) 0)) "exec-abcde-000007"))
            (should-not (equal (truncate-string-to-width (aref (nth 0 cells) 3) w nil nil t)
                               (truncate-string-to-width (aref (nth 1 cells) 3) w nil nil t)))))
        ;; Every column sorts, with S on it; off a column, S asks which.
        (let ((d (mevedel-execution-mailbox-test--start-background session "sleep 299" "d")))
          (mevedel-execution-test--wait-until
           (lambda () (member d (mevedel-execution-panel-test--ids))) "d's row")
          (dotimes (i 7)
            (let ((name (car (aref tabulated-list-format i))))
              (goto-char (mevedel-execution-panel-row-start b))
              (goto-char (next-single-property-change (point) 'tabulated-list-column-name))
              (while (not (equal (get-text-property (point) 'tabulated-list-column-name) name))
                (goto-char (next-single-property-change (point) 'tabulated-list-column-name)))
              (call-interactively (key-binding (kbd "S")))
              (should (equal (car tabulated-list-sort-key) name))
              (should (equal (sort (copy-sequence (mevedel-execution-panel-test--ids)) #'string<)
                             (sort (list b d) #'string<)))))
          (setq tabulated-list-sort-key nil)
          (mevedel-execution-panel-redraw)
          (should (equal (mevedel-execution-panel-test--ids) (list b d)))
          (mevedel-execution-panel-test--press "i" b)
          (goto-char (next-single-property-change (point-min) 'mevedel-execution-panel-inspector))
          (cl-letf (((symbol-function 'completing-read) (lambda (&rest _) "Label")))
            (call-interactively (key-binding (kbd "S"))))
          (should (equal tabulated-list-sort-key '("Label")))
          (should (equal (mevedel-execution-panel-test--ids) (list b d))))))))

;;;; Input goes to the row chosen when the key was pressed

(ert-deftest mevedel-execution-person-test-input-goes-to-the-chosen-row ()
  "s sends to the row under point when pressed, whatever moves during the prompt.
While the person types, A's row moves away and B's comes under point:
the line still reaches A.  When A ends while they type, the line is
not sent to B, and the message names A."
  (mevedel-execution-person-test--with session
    (let* ((reader "while :; do if read -r l; then echo \"%s got:$l\"; fi; done")
           (a (mevedel-execution-mailbox-test--start-background session (format reader "A") "A" :tty t))
           (b (mevedel-execution-mailbox-test--start-background session (format reader "B") "B" :tty t))
           (out (lambda (id) (plist-get (mevedel-execution-spool-read
                                         session (mevedel-execution-spool-address id) :as-user t)
                                        :text))))
      (mevedel-execution-panel-test--with-panel session _panel
        (cl-letf (((symbol-function 'read-string)
                   (lambda (prompt &rest _)
                     (should (equal prompt "Input to \"A\": "))
                     ;; The rows swap while the prompt is up.
                     (let ((sid (mevedel-execution-session-id session)))
                       (mevedel-execution-panel-test--changed
                        sid
                        ;; Rows come in exec/list order, by start: B first now.
                        (list :executionId b :owner "/root" :command "b" :label "B" :state "running" :tty t
                              :startedAt "2020-01-01T00:00:01.000Z")
                        (list :executionId a :owner "/root" :command "a" :label "A" :state "running" :tty t
                              :startedAt "2020-01-01T00:00:02.000Z")))
                     (should (equal (mevedel-execution-panel-test--ids) (list b a)))
                     (goto-char (mevedel-execution-panel-row-start b))
                     (should (equal (tabulated-list-get-id) b))
                     "first")))
          (mevedel-execution-panel-test--press "s" a))
        (mevedel-execution-test--wait-until
         (lambda () (string-match-p "A got:first" (or (funcall out a) ""))) "A's line")
        (should-not (string-match-p "got:" (or (funcall out b) "")))
        ;; Now A ends while the person types: nothing reaches B.
        (call-interactively (key-binding (kbd "g")))
        (cl-letf (((symbol-function 'read-string)
                   (lambda (&rest _)
                     (mevedel-execution-test--await
                      (lambda (cb) (mevedel-execution-stop-user session a cb)))
                     "second")))
          (mevedel-execution-panel-test--press "s" a))
        (mevedel-execution-test--wait-until
         (lambda () (cl-find-if (lambda (m) (string-match-p "\\`mevedel-exec: input to \"A\" not sent" m))
                                mevedel-execution-person-test--messages))
         "the message that A did not get the line")
        (should-not (string-match-p "got:" (or (funcall out b) "")))))))

;;;; Waiting and listening (rendering of the facts)

(ert-deftest mevedel-execution-person-test-waiting-and-listening ()
  "A row waiting for input shows so, with its prompt, and is said once;
the inspector lists listening ports, which w opens in a browser."
  (mevedel-execution-person-test--with session
    (let* ((sid (mevedel-execution-session-id session))
           (waiting (list :executionId "exec-fake0-000001" :sessionId sid :owner "/root"
                          :command "./deploy" :label "x" :state "running" :tty t :version 3
                          :waitingForInput t :waitingSince "2026-01-01T00:00:00.000Z"
                          :prompt "Password:"))
           (server (list :executionId "exec-fake0-000002" :sessionId sid :owner "/root"
                         :command "python3 -m http.server" :label "web" :state "running"
                         :version 2 :target "local" :ready t :readyLine "Serving HTTP on 0.0.0.0"
                         :listening (vector (list :address "127.0.0.1" :port 8000 :pid 42))))
           (remote (list :executionId "exec-fake0-000003" :sessionId sid :owner "/root"
                         :command "npm run dev" :label "dev" :state "running" :version 2
                         :target "ssh:me@build#22"
                         :listening (vector (list :address "0.0.0.0" :port 5173 :pid 7))))
           (urls nil))
      (mevedel-execution-panel-test--with-panel session _panel
        (mevedel-execution-panel-test--changed sid waiting server remote)
        (should (equal (mevedel-execution-panel-test--column "exec-fake0-000001" "State") "waiting"))
        (let ((cols (cadr (assoc "exec-fake0-000001" tabulated-list-entries))))
          (should (eq (get-text-property 0 'face (aref cols 4)) 'mevedel-execution-panel-waiting))
          (should (string-match-p "Password:" (aref cols 3))))
        (should (mevedel-execution-person-test--said-p
                 (format-message "x `./deploy' is waiting for input: Password:")))
        ;; Still waiting: not said again.
        (mevedel-execution-panel-test--changed sid waiting server remote)
        (should (= 1 (cl-count (format-message "x `./deploy' is waiting for input: Password:")
                               mevedel-execution-person-test--messages :test #'equal)))
        (mevedel-execution-panel-test--press "i" "exec-fake0-000002")
        (should (mevedel-execution-panel-test--shown-p "listening 127.0.0.1:8000 (pid 42)"))
        (should (mevedel-execution-panel-test--shown-p "ready: Serving HTTP on 0.0.0.0"))
        (mevedel-execution-panel-test--press "i" "exec-fake0-000001")
        (should (mevedel-execution-panel-test--shown-p "waiting for input: Password:"))
        (cl-letf (((symbol-function 'browse-url) (lambda (url &rest _) (push url urls))))
          (mevedel-execution-panel-test--press "w" "exec-fake0-000002")
          (should (equal urls '("http://127.0.0.1:8000")))
          ;; A remote one asks the helper to forward a port first.
          (let (sent)
            (cl-letf (((symbol-function 'mevedel-execution-request-async)
                       (lambda (_s method params &rest keys)
                         (setq sent (list method params))
                         (funcall (plist-get keys :on-result) '(:local-address "127.0.0.1:40123")))))
              (mevedel-execution-panel-test--press "w" "exec-fake0-000003"))
            (should (equal sent '(exec/forward (:execution-id "exec-fake0-000003" :port 5173))))
            (should (equal (car urls) "http://127.0.0.1:40123"))))))))

;;;; The panel keeps point on its execution; a dismissal can be undone

(ert-deftest mevedel-execution-person-test-panel-point-dismiss-undo ()
  "A row added above leaves point on its execution, whose row d dismisses.
u brings the dismissed row back, point on it; d on several marked
rows asks first."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((dir (mevedel-execution-person-test--project))
           (default-directory dir)
           (first (mevedel-execution-shell-command "echo one"))
           (person (mevedel-execution-person-session dir))
           (panel (mevedel-execution-panel person))
           (ids (lambda () (with-current-buffer panel (mevedel-execution-panel-test--ids))))
           ;; The rows IDS, in this order, none of them live: a command
           ;; may print and exit yet settle after one started later.
           (finished (lambda (&rest want)
                       (and (equal (funcall ids) want)
                            (with-current-buffer panel
                              (not (cl-some #'mevedel-execution-panel-live-p want))))))
           (id-of (lambda (buffer) (buffer-local-value 'mevedel-execution-spool--execution-id buffer)))
           (one (funcall id-of first)))
      (switch-to-buffer panel)
      (delete-other-windows)
      (mevedel-execution-test--wait-until (lambda () (funcall finished one))
                                          "the first finished row")
      (let ((two (funcall id-of (mevedel-execution-shell-command "echo two"))))
        (condition-case nil
            (mevedel-execution-test--wait-until (lambda () (funcall finished two one))
                                                "the second finished row, above")
          (ert-test-failed
           (ert-fail (list "no second finished row above the first" :rows (funcall ids)
                           :two two :one one
                           :finished-work (mapcar (lambda (f) (plist-get f :execution-id))
                                                  (mevedel-execution-finished-work
                                                   (mevedel-execution-session-id person)))))))
        ;; Point on "one", in the panel's window.
        (switch-to-buffer panel)
        (goto-char (mevedel-execution-panel-row-start one))
        (let* ((gate (mevedel-execution-mailbox-test--gate))
               (three (funcall id-of (mevedel-execution-shell-command
                                      (format "read -r _ < %s" (shell-quote-argument gate))))))
          (switch-to-buffer panel)
          (mevedel-execution-test--wait-until (lambda () (equal (funcall ids) (list three two one)))
                                              "a live row above the finished ones")
          (with-current-buffer panel
            (should (equal (tabulated-list-get-id) one))
            (should (equal (save-excursion (goto-char (window-point (get-buffer-window panel)))
                                           (tabulated-list-get-id))
                           one))
            ;; d acts on the row point is on: "one", not the line it was on.
            (call-interactively #'mevedel-execution-panel-dismiss)
            (should (equal (funcall ids) (list three two)))
            (should (mevedel-execution-person-test--said-p
                     (format "Dismissed \"echo one\"; %s brings it back"
                             (substitute-command-keys
                              "\\<mevedel-execution-panel-mode-map>\\[mevedel-execution-panel-unmark]"))))
            ;; u, on a row that is not marked, undoes it.
            (execute-kbd-macro (kbd "u"))
            (should (equal (funcall ids) (list three two one)))
            (should (equal (tabulated-list-get-id) one))
            ;; A panel opened later shows it again too.
            (should (member one (mapcar (lambda (f) (plist-get f :execution-id))
                                        (mevedel-execution-finished-work
                                         (mevedel-execution-session-id person)))))
            ;; Two marked: d asks, and a no dismisses nothing.
            (goto-char (mevedel-execution-panel-row-start two))
            (execute-kbd-macro (kbd "m m"))
            (let ((asked nil))
              (cl-letf (((symbol-function 'y-or-n-p)
                         (lambda (prompt) (push prompt asked) nil)))
                (should-error (call-interactively #'mevedel-execution-panel-dismiss)
                              :type 'user-error))
              (should (equal asked '("Dismiss 2 marked finished rows? ")))
              (should (equal (funcall ids) (list three two one)))
              (cl-letf (((symbol-function 'y-or-n-p) (lambda (_prompt) t)))
                (call-interactively #'mevedel-execution-panel-dismiss))
              (should (equal (funcall ids) (list three))))
            (execute-kbd-macro (kbd "u"))
            (should (equal (funcall ids) (list three two one))))
          (mevedel-execution-stop-all-user person))))))

(ert-deftest mevedel-execution-person-test-stop-from-elsewhere-is-the-persons ()
  "A person's stop made outside this Emacs is not announced; its row goes.
The stop comes with user authority but is not noted in Emacs, as
`mevedel-exec stop' at a shell makes it; the final facts say
`:stopped-by-user'.  A command that ends by itself is announced."
  (mevedel-execution-person-test--with session
    (ignore session)
    (let* ((dir (mevedel-execution-person-test--project))
           (default-directory dir)
           (gate (mevedel-execution-mailbox-test--gate))
           (command (format "read -r _ < %s" (shell-quote-argument gate)))
           (buffer (mevedel-execution-shell-command command))
           (id (buffer-local-value 'mevedel-execution-spool--execution-id buffer))
           (person (mevedel-execution-person-session dir))
           (panel (mevedel-execution-panel person)))
      (with-current-buffer panel
        (mevedel-execution-test--wait-until
         (lambda () (member id (mevedel-execution-panel-test--ids))) "the live row"))
      (let ((final nil))
        (mevedel-execution-stop-user person id (lambda (obs) (setq final obs)))
        (mevedel-execution-test--wait-until (lambda () final) "the stop's answer")
        (should (plist-get (plist-get final :facts) :stopped-by-user))
        (should (equal (plist-get (plist-get final :facts) :termination) "stopped")))
      (with-current-buffer panel
        (mevedel-execution-test--wait-until
         (lambda () (not (member id (mevedel-execution-panel-test--ids)))) "the row to go"))
      (mevedel-execution-test--wait-until
       (lambda () (equal (plist-get (buffer-local-value 'mevedel-execution-spool--facts buffer) :state)
                         "settled"))
       "the output buffer's end")
      (should-not (cl-find-if (lambda (m) (string-match-p "stopped\\|signal" m))
                              mevedel-execution-person-test--messages))
      (should-not (member id (mapcar (lambda (f) (plist-get f :execution-id))
                                     (mevedel-execution-finished-work
                                      (mevedel-execution-session-id person)))))
      ;; Its owner's stop, by contrast, carries no such mark.
      (let* ((done nil)
             (obs nil))
        (mevedel-execution-start-bash (lambda (o) (setq obs o)) :session session
                                      :command (format "read -r _ < %s" (shell-quote-argument gate))
                                      :yield-time-ms 0)
        (mevedel-execution-test--wait-until (lambda () obs) "the agent's start")
        (mevedel-execution-stop session nil (plist-get (plist-get obs :facts) :execution-id)
                                (lambda (o) (setq done o)))
        (mevedel-execution-test--wait-until (lambda () done) "the owner's stop")
        (should (equal (plist-get (plist-get done :facts) :termination) "stopped"))
        (should-not (plist-get (plist-get done :facts) :stopped-by-user))))))

(provide 'mevedel-execution-person-test)
;;; mevedel-execution-person-test.el ends here

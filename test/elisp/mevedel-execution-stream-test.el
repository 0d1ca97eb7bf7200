;;; mevedel-execution-stream-test.el --- ERT tests of output that comes as it is printed  -*- lexical-binding: t; -*-

;;; Commentary:

;; A followed execution's output comes in `exec/output' and goes into
;; its output buffer inside the process filter: a person's command, its
;; chunks taken only where they go on from the buffer's end, and a long
;; line trimmed from the queue.  Against the real helper; commands wait
;; at their gate (a fifo) and every wait is a bounded loop.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-person)

(defvar mevedel-execution-stream-test--messages nil
  "Messages shown during the running test, newest first.")

(defmacro mevedel-execution-stream-test--with (var &rest body)
  "Run BODY with VAR bound to a session on a fresh helper, as a person.
Messages are recorded in `mevedel-execution-stream-test--messages'."
  (declare (indent 1) (debug (symbolp body)))
  `(mevedel-execution-test--as-person ,var mevedel-execution-stream-test--messages
     ,@body))

(defun mevedel-execution-stream-test--project ()
  "Return a fresh directory to run a person's commands in."
  (file-name-as-directory (make-temp-file "mevedel-ert-project-" t)))

(defun mevedel-execution-stream-test--text (buffer)
  "Return BUFFER's text without properties."
  (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max))))

(defun mevedel-execution-stream-test--settled-p (buffer)
  "Return non-nil once the output BUFFER knows its command settled."
  (with-current-buffer buffer
    (equal (plist-get mevedel-execution-spool--facts :state) "settled")))

(ert-deftest mevedel-execution-stream-test-output-comes-without-asking ()
  "A person's command's output comes into its buffer without a request.
Its start follows it with output, so what it prints comes in
`exec/output': no follow request and no read; a character split
across two writes shows whole.  The buffer made during a start that
is refused does not stay."
  (mevedel-execution-stream-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-stream-test--project))
           (gates (list (mevedel-execution-mailbox-test--gate)
                        (mevedel-execution-mailbox-test--gate)
                        (mevedel-execution-mailbox-test--gate)))
           (sent nil)
           (note (lambda (_conn method &rest _) (push method sent)))
           (buffer nil))
      ;; The buffer made while a start is refused goes with it.
      (should-error (mevedel-execution-shell-command "sleep 5 &") :type 'user-error)
      (should-not (cl-find-if (lambda (b) (string-prefix-p "*mevedel-exec starting" (buffer-name b)))
                              (buffer-list)))
      (advice-add 'jsonrpc--async-request-1 :before note)
      (unwind-protect
          (progn
            (setq buffer (mevedel-execution-shell-command
                          (apply #'format "read -r _ < %s; printf ready; read -r _ < %s; printf ' set\\n'; read -r _ < %s; printf 'caf\\303'; sleep 0.2; printf '\\251!\\n'"
                                 (mapcar #'shell-quote-argument gates))))
            (mevedel-execution-mailbox-test--open (nth 0 gates))
            (mevedel-execution-test--wait-until
             (lambda () (equal (mevedel-execution-stream-test--text buffer) "ready"))
             "the first output")
            (mevedel-execution-mailbox-test--open (nth 1 gates))
            (mevedel-execution-test--wait-until
             (lambda () (equal (mevedel-execution-stream-test--text buffer) "ready set\n"))
             "the next line")
            (should-not (memq 'spool/read sent))
            (should-not (memq 'exec/follow sent))
            (mevedel-execution-mailbox-test--open (nth 2 gates))
            (mevedel-execution-test--wait-until
             (lambda () (and (mevedel-execution-stream-test--settled-p buffer)
                             (equal (mevedel-execution-stream-test--text buffer)
                                    "ready set\ncaf\u00e9!\n")))
             "the split character, whole, and the end"))
        (advice-remove 'jsonrpc--async-request-1 note)))))

(ert-deftest mevedel-execution-stream-test-output-before-the-buffer-is-not-read ()
  "Output that came before a person's buffer listened is shown, not read again.
The start was answered before the command printed; its output and
the growth announced with it came before Emacs made the buffer (a
busy Emacs).  The buffer shows the kept chunk and sends no read."
  (mevedel-execution-stream-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-stream-test--project))
           (gates (list (mevedel-execution-mailbox-test--gate)
                        (mevedel-execution-mailbox-test--gate)))
           (sent nil)
           (note (lambda (_conn method &rest _) (push method sent)))
           ;; The answer is handled once the output and its growth came.
           (late (lambda (open session id &rest args)
                   (let ((sid (mevedel-execution-session-id session)))
                     (mevedel-execution-mailbox-test--open (nth 0 gates))
                     (mevedel-execution-test--wait-until
                      (lambda ()
                        (and (gethash (cons sid id) mevedel-execution-stream--early)
                             (eql 5 (plist-get (mevedel-execution-live-facts sid id)
                                               :output-bytes))))
                      "the output and its growth, before the buffer")
                     (advice-add 'jsonrpc--async-request-1 :before note)
                     (apply open session id args))))
           (buffer nil))
      (advice-add 'mevedel-execution-spool-open-started :around late)
      (unwind-protect
          (setq buffer (mevedel-execution-shell-command
                        (apply #'format "read -r _ < %s; printf ready; read -r _ < %s"
                               (mapcar #'shell-quote-argument gates))))
        (advice-remove 'mevedel-execution-spool-open-started late)
        (advice-remove 'jsonrpc--async-request-1 note))
      (should (equal (mevedel-execution-stream-test--text buffer) "ready"))
      (should-not (memq 'spool/read sent))
      (mevedel-execution-mailbox-test--open (nth 1 gates))
      (mevedel-execution-test--wait-until
       (lambda () (mevedel-execution-stream-test--settled-p buffer)) "its end")
      (should (equal (mevedel-execution-stream-test--text buffer) "ready")))))

(ert-deftest mevedel-execution-stream-test-long-line-is-trimmed ()
  "A line longer than two pages that comes in chunks still keeps one page.
Cutting it needs a read, which waits for the helper: made from the
queue, not inside the process filter where the chunks are taken."
  (mevedel-execution-stream-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-stream-test--project))
           (mevedel-execution-spool-page-bytes 4096)
           (gate (mevedel-execution-mailbox-test--gate))
           (end (mevedel-execution-mailbox-test--gate))
           (buffer (mevedel-execution-shell-command
                    (format "read -r _ < %s; head -c 20000 /dev/zero | tr '\\0' a; read -r _ < %s"
                            (shell-quote-argument gate) (shell-quote-argument end)))))
      (mevedel-execution-mailbox-test--open gate)
      (mevedel-execution-test--wait-until
       (lambda () (with-current-buffer buffer
                    (and (= (+ (nth 2 mevedel-execution-spool--source)
                               (nth 4 mevedel-execution-spool--source))
                            20000)
                         (<= (buffer-size) (* 2 mevedel-execution-spool-page-bytes)))))
       "the long line, its last page kept")
      (should-not (cl-find-if (lambda (m) (string-match-p "error in an output sink" m))
                              mevedel-execution-stream-test--messages))
      (mevedel-execution-mailbox-test--open end))))

(ert-deftest mevedel-execution-stream-test-chunks-in-place ()
  "An output chunk is taken only where it goes on from the buffer's end.
One past the end or already shown changes nothing; one that overlaps
the end adds only what is new; one whose invalid bytes hide where to
cut it is left to reads.  Output of an execution no buffer shows yet
is kept until one asks for it."
  (mevedel-execution-stream-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-stream-test--project))
           (gate (mevedel-execution-mailbox-test--gate))
           (buffer (mevedel-execution-shell-command
                    (format "printf ready; read -r _ < %s" (shell-quote-argument gate))))
           (sid (mevedel-execution-session-id
                 (buffer-local-value 'mevedel-execution-buffer-session buffer)))
           (id (buffer-local-value 'mevedel-execution-spool--execution-id buffer))
           (chunk (lambda (offset length text)
                    (mevedel-execution-stream--receive
                     nil (list :sessionId sid :executionId id
                               :offset offset :length length :text text)))))
      (mevedel-execution-test--wait-until
       (lambda () (equal (mevedel-execution-stream-test--text buffer) "ready"))
       "the first output")
      (funcall chunk 7 2 "XY")
      (funcall chunk 0 3 "rea")
      (funcall chunk 3 3 "d\ufffdz")
      (should (equal (mevedel-execution-stream-test--text buffer) "ready"))
      (funcall chunk 3 4 "dy\u00e9")
      (should (equal (mevedel-execution-stream-test--text buffer) "ready\u00e9"))
      (mevedel-execution-stream--receive
       nil (list :sessionId sid :executionId "exec-unseen" :offset 0 :length 2 :text "hi"))
      (should (equal (mevedel-execution-take-early-output sid "exec-unseen") '(0 2 "hi")))
      (should-not (mevedel-execution-take-early-output sid "exec-unseen"))
      (mevedel-execution-mailbox-test--open gate))))

(ert-deftest mevedel-execution-stream-test-gap-is-read-as-far-as-the-chunks-go ()
  "Output the helper dropped is read as far as the chunk past it ends.
A burst larger than one `exec/output' carries leaves a gap in the
offsets.  The facts that say how far the log goes come only once a
second, so the buffer reads without them, up to where that chunk
ends: here no facts come at all, and it still shows the end."
  (mevedel-execution-stream-test--with session
    (ignore session)
    (let* ((default-directory (mevedel-execution-stream-test--project))
           (gates (list (mevedel-execution-mailbox-test--gate)
                        (mevedel-execution-mailbox-test--gate)))
           (buffer (mevedel-execution-shell-command
                    (apply #'format "printf ready; read -r _ < %s; head -c 4194304 /dev/zero | tr '\\0' a; printf end; read -r _ < %s"
                           (mapcar #'shell-quote-argument gates))))
           (size (+ 5 4194304 3)))
      (mevedel-execution-test--wait-until
       (lambda () (equal (mevedel-execution-stream-test--text buffer) "ready"))
       "the first output")
      (advice-add 'mevedel-execution-spool-note-facts :override #'ignore)
      (unwind-protect
          (progn
            (mevedel-execution-mailbox-test--open (nth 0 gates))
            (mevedel-execution-test--wait-until
             (lambda () (with-current-buffer buffer
                          (and (= (+ (nth 2 mevedel-execution-spool--source)
                                     (nth 4 mevedel-execution-spool--source))
                                  size)
                               (string-suffix-p "aaend" (mevedel-execution-stream-test--text buffer)))))
             "the burst, read past the gap, and the end"))
        (advice-remove 'mevedel-execution-spool-note-facts #'ignore))
      (mevedel-execution-mailbox-test--open (nth 1 gates)))))

(ert-deftest mevedel-execution-stream-test-parse-held-for-a-quarter-second ()
  "Output that follows a parse within 0.25 s waits for the next, in one.
Until then it is marked fontified, so redisplay does not parse it for
errors chunk by chunk; `next-error' still finds its errors; then it is
handed back to jit-lock whole."
  (with-current-buffer (generate-new-buffer "*mevedel-ert-parse*")
    (unwind-protect
        (progn
          (mevedel-execution-spool-output-mode)
          (mevedel-execution-spool--insert "first line\n")
          (should-not (get-text-property 1 'fontified))
          (let ((held (point-max)))
            (mevedel-execution-spool--insert "main.c:2:3: error: held\n")
            (mevedel-execution-spool--insert "another line\n")
            (should (eq (get-text-property held 'fontified) t))
            (should (eq (get-text-property (1- (point-max)) 'fontified) t))
            (compilation--ensure-parse (point-max))
            (should (get-text-property held 'compilation-message))
            (mevedel-execution-test--wait-until
             (lambda () (null (get-text-property held 'fontified)))
             "the held output handed back")
            (should-not (get-text-property (1- (point-max)) 'fontified))))
      (kill-buffer))))

(ert-deftest mevedel-execution-stream-test-parse-makes-no-rules ()
  "An output buffer finds the errors `compilation-mode' finds, making no rule anew.
With `omake' among the rules (as by default) each parse of
`compilation-mode' makes every rule's regexp again, and the sixty-odd
rules overflow Emacs's cache of compiled regexps; redisplay parses a
streaming buffer a few times a second.  Output buffers parse with the
rules made once, looking for all at once first, and find the same
errors, whether the text comes at once or a line at a time."
  (let ((text (concat "line one\nmain.c:2:3: error: missing semicolon\n"
                      "      lib.c:7:1: warning: indented, as omake prints\n"
                      "*** omake: file lib.ml changed\n"
                      "In file included from util.h:3,\n                 from app.c:1:\n"
                      "Traceback (most recent call last):\n"
                      "  File \"tool.py\", line 12, in <module>\n"
                      "File \"parse.ml\", line 4, characters 2-9:\n"
                      "Error: This expression has type int\n"
                      "lib/sum.rb:31:in `add': undefined method (NoMethodError)\n"
                      "\tat com.example.App.main(App.java:17)\n"
                      "C:\\src\\win.c(12) : error C2065: undeclared\n"
                      "Died at script.pl line 8.\n"
                      "[ERROR] /src/Main.java:[5,3] cannot find symbol\n"
                      "src/lib.rs:3:5: 3:9 error: unresolved\n"
                      "make: *** [Makefile:4: all] Error 1\n"
                      "make[1]: Entering directory '/tmp/proj'\n"
                      "nothing to see here, line 42 of a command\nlast line\n"))
        (found (lambda ()
                 (let (out (pos (point-min)))
                   (while (setq pos (next-single-property-change pos 'compilation-message))
                     (when (get-text-property pos 'compilation-message)
                       (push (list (line-number-at-pos pos) (buffer-substring pos (line-end-position))
                                   (get-text-property pos 'font-lock-face))
                             out)))
                   (nreverse out))))
        (strings (lambda (parse)
                   ;; Strings made by parsing the buffer's last line ten times.
                   (let ((before (nth 6 (memory-use-counts))))
                     (dotimes (_ 10)
                       (setq compilation--parsed (copy-marker (line-beginning-position 0)))
                       (funcall parse (point-max)))
                     (- (nth 6 (memory-use-counts)) before)))))
    (should (memq 'omake compilation-error-regexp-alist))
    (should (> (length compilation-error-regexp-alist) 20))
    (with-temp-buffer
      (compilation-mode)
      (let ((inhibit-read-only t)) (insert text))
      (font-lock-ensure)
      (let ((theirs (funcall found)))
        (should (>= (length theirs) 12))
        (dolist (at-once '(t nil))
          (with-current-buffer (generate-new-buffer "*mevedel-ert-parse*")
            (unwind-protect
                (progn
                  (mevedel-execution-spool-output-mode)
                  (if at-once
                      (let ((inhibit-read-only t)) (insert text))
                    ;; As it streams: each line parsed as it comes.
                    (dolist (line (split-string text "\n" t))
                      (let ((inhibit-read-only t)) (goto-char (point-max)) (insert line "\n"))
                      (mevedel-execution-stream--ensure-parse (point-max))))
                  (font-lock-ensure)
                  (should (equal (funcall found) theirs))
                  (when at-once
                    (goto-char (point-max))
                    (let ((compile-made (funcall strings #'compilation--ensure-parse))
                          (made (funcall strings #'mevedel-execution-stream--ensure-parse)))
                      ;; Three strings a rule a parse (two made, one the
                      ;; cache's copy), against a few in all.
                      (should (> compile-made (* 10 (length compilation-error-regexp-alist))))
                      (should (< made (* 10 5))))))
              (kill-buffer))))))))

(ert-deftest mevedel-execution-stream-test-refontify-above-the-parse ()
  "Text above where the error parse got to is fontified again without error.
A followed buffer is parsed to its end as it is drawn there; scrolled
back, or drawn in a second window, its earlier text is fontified
again, and that parse has nothing to read."
  (with-current-buffer (generate-new-buffer "*mevedel-ert-parse*")
    (unwind-protect
        (progn
          (mevedel-execution-spool-output-mode)
          (let ((inhibit-read-only t))
            (dotimes (i 50) (insert (format "plain line %d\n" i)))
            (insert "main.c:2:3: error: boom\n"))
          (mevedel-execution-stream--ensure-parse (point-max))
          (should (> compilation--parsed 200))
          (should-not (mevedel-execution-stream--ensure-parse 100))
          (font-lock-fontify-region 1 200)
          (font-lock-ensure)
          (goto-char (point-min))
          (should (text-property-search-forward 'compilation-message))
          (should (equal (buffer-substring (line-beginning-position) (line-end-position))
                         "main.c:2:3: error: boom")))
      (kill-buffer))))

(provide 'mevedel-execution-stream-test)
;;; mevedel-execution-stream-test.el ends here

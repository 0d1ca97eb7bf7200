;;; mevedel-execution-spool-test.el --- ERT tests of the spool facade  -*- lexical-binding: t; -*-

;;; Commentary:

;; The spool facade against the real helper, with the fixture of
;; mevedel-execution-test-support.el.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-spool)

(ert-deftest mevedel-execution-spool-test-read-grep-glob-stat ()
  "Reads, greps, globs and stats of an execution's log."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "seq 1 1000"))
           (id (plist-get (plist-get obs :facts) :execution-id))
           (addr (mevedel-execution-spool-address id)))
      (should (equal addr (plist-get (plist-get obs :facts) :output-address)))
      (let ((r (mevedel-execution-spool-read session addr :line 500 :lines 2)))
        (should (equal (plist-get r :text) "500\n501\n"))
        (should (eql (plist-get r :total-bytes) 3893))
        (should-not (plist-get r :eof)))
      (let ((r (mevedel-execution-spool-read session addr :offset 3888 :length 100)))
        (should (equal (plist-get r :text) "1000\n"))
        (should (eq (plist-get r :eof) t)))
      (let ((st (mevedel-execution-spool-stat session addr)))
        (should (equal (plist-get st :physical) "raw"))
        (should (eql (plist-get st :logical-bytes) 3893)))
      (should (member addr (mevedel-execution-spool-glob session)))
      (let ((g (mevedel-execution-spool-grep session "^99[0-9]$" :max-matches 5)))
        (should (= (length (plist-get g :matches)) 5))
        (should (eq (plist-get g :truncated) t))
        (should (equal (plist-get (car (plist-get g :matches)) :text) "990"))
        (should (eql (plist-get (car (plist-get g :matches)) :line) 990))))))

(ert-deftest mevedel-execution-spool-test-authority-and-escapes ()
  "An owner reads only its logs; closed addresses are refused."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "echo worker" :owner "/root/worker"))
           (addr (plist-get (plist-get obs :facts) :output-address)))
      (let ((err (should-error (mevedel-execution-spool-read session addr)
                               :type 'mevedel-execution-helper-error)))
        (should (equal (plist-get (nth 2 err) :kind) "not-found")))
      (should (equal (plist-get (mevedel-execution-spool-read session addr :owner "/root/worker") :text)
                     "worker\n"))
      (should-not (mevedel-execution-spool-glob session))
      (should (equal (mevedel-execution-spool-glob session :as-user t) (list addr)))
      (dolist (bad '("artifact://executions/../lock" "/etc/passwd" "file:///etc/passwd"))
        (let ((err (should-error (mevedel-execution-spool-read session bad :as-user t)
                                 :type 'mevedel-execution-helper-error)))
          (should (equal (plist-get (nth 2 err) :kind) "refused")))))))

(ert-deftest mevedel-execution-spool-test-output-buffer-pages ()
  "The output buffer is read-only and holds one page at a time."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "seq 1 1000"))
           (id (plist-get (plist-get obs :facts) :execution-id))
           (mevedel-execution-spool-page-bytes 1000)
           (buffer (mevedel-execution-spool-open-output session id)))
      (unwind-protect
          (with-current-buffer buffer
            (should buffer-read-only)
            (should (derived-mode-p 'mevedel-execution-spool-output-mode))
            (should (= (buffer-size) 1000))
            (should (string-prefix-p "1\n2\n3\n" (buffer-string)))
            (mevedel-execution-spool-next-page)
            (should (equal (buffer-string)
                           (substring (concat (mapconcat #'number-to-string (number-sequence 1 1000) "\n") "\n")
                                      1000 2000)))
            (mevedel-execution-spool-last-page)
            (should (string-suffix-p "999\n1000\n" (buffer-string)))
            (should-error (mevedel-execution-spool-next-page) :type 'user-error)
            (mevedel-execution-spool-first-page)
            (should (string-prefix-p "1\n2\n" (buffer-string))))
        (kill-buffer buffer)))))

(ert-deftest mevedel-execution-spool-test-output-buffer-found-in-one-look ()
  "An execution's output buffer is found without asking every buffer.
Killed, or put in another mode, it is not found any more."
  (mevedel-execution-test--with-helper session
    (let* ((sid (mevedel-execution-session-id session))
           (ids (mapcar (lambda (_)
                          (plist-get (plist-get (mevedel-execution-test--start session "echo hi")
                                                :facts)
                                     :execution-id))
                        '(1 2)))
           (buffers (mapcar (lambda (id) (mevedel-execution-spool-open-output session id)) ids))
           (asked 0)
           (count (lambda (&rest _) (cl-incf asked))))
      (unwind-protect
          (progn
            (advice-add 'buffer-list :before count)
            (unwind-protect
                (progn
                  (should (eq (mevedel-execution-spool-output-buffer sid (nth 0 ids)) (nth 0 buffers)))
                  (should (eq (mevedel-execution-spool-output-buffer sid (nth 1 ids)) (nth 1 buffers)))
                  (should-not (mevedel-execution-spool-output-buffer sid "exec-none"))
                  (should-not (mevedel-execution-spool-output-buffer "no-session" (nth 0 ids))))
              (advice-remove 'buffer-list count))
            (should (= asked 0))
            (kill-buffer (nth 0 buffers))
            (should-not (mevedel-execution-spool-output-buffer sid (nth 0 ids)))
            (with-current-buffer (nth 1 buffers) (fundamental-mode))
            (should-not (mevedel-execution-spool-output-buffer sid (nth 1 ids))))
        (mapc (lambda (b) (when (buffer-live-p b) (kill-buffer b))) buffers)))))

(ert-deftest mevedel-execution-spool-test-followed-output-streams ()
  "An output buffer on a live command shows its growth several times a second.
The buffer follows the execution, so the helper announces its
output ten times a second, not once."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start
                 session "for i in $(seq 60); do echo line $i; sleep 0.02; done"
                 :yield-time-ms 0))
           (id (plist-get (plist-get obs :facts) :execution-id))
           (buffer (mevedel-execution-spool-open-output session id t))
           (sizes nil))
      (unwind-protect
          (progn
            (mevedel-execution-test--wait-until
             (lambda ()
               (let ((n (buffer-size buffer)))
                 (unless (eql n (car sizes)) (push n sizes)))
               (with-current-buffer buffer
                 (string-match-p "^line 60$" (buffer-string))))
             "the last line")
            ;; About 1.2 s of output: a dozen steps followed, two or
            ;; three at a second's pace.
            (should (>= (length sizes) 6)))
        (kill-buffer buffer)))))

(defun mevedel-execution-spool-test--requests (thunk)
  "Call THUNK; return (VALUE . METHODS), the methods it sent the helper."
  (let* ((methods nil)
         (note (lambda (_conn method &rest _) (push method methods))))
    (advice-add 'jsonrpc--async-request-1 :before note)
    (unwind-protect
        (let ((value (funcall thunk)))
          (cons value (nreverse methods)))
      (advice-remove 'jsonrpc--async-request-1 note))))

(ert-deftest mevedel-execution-spool-test-open-from-the-start-answer ()
  "What a start answered shows in its output buffer at once, then follows.
No request waits for the helper: the text, multibyte and with a
carriage return rewriting its line, is the answer's; what comes
later is appended from the right byte.  An answer that is not the
log byte for byte (an invalid byte, shown as U+FFFD) is read from
the log instead."
  (mevedel-execution-test--with-helper session
    (let* ((gate (mevedel-execution-mailbox-test--gate))
           (obs (mevedel-execution-test--start
                 session (format "printf 'h\\303\\251llo\\nstep 1\\rstep 2\\nready\\n'; read -r _ < %s; echo more"
                                 (shell-quote-argument gate))
                 :yield-time-ms 20000 :ready-pattern "^ready$" :max-output-chars 4096))
           (facts (plist-get obs :facts))
           (id (plist-get facts :execution-id))
           (opened (mevedel-execution-spool-test--requests
                    (lambda ()
                      (mevedel-execution-spool-open-started
                       session id facts (plist-get obs :output)))))
           (buffer (car opened)))
      (unwind-protect
          (progn
            (should (equal (plist-get obs :output) "h\u00e9llo\nstep 1\rstep 2\nready\n"))
            ;; Only the follow, which waits for nothing.
            (should (equal (cdr opened) '(exec/follow)))
            (should (equal (with-current-buffer buffer (buffer-string))
                           "h\u00e9llo\nstep 2\nready\n"))
            (mevedel-execution-mailbox-test--open gate)
            (mevedel-execution-test--wait-until
             (lambda () (with-current-buffer buffer
                          (equal (plist-get mevedel-execution-spool--facts :state) "settled")))
             "the command's end")
            (mevedel-execution-test--wait-until
             (lambda () (equal (with-current-buffer buffer (buffer-string))
                               "h\u00e9llo\nstep 2\nready\nmore\n"))
             "the rest, appended once"))
        (kill-buffer buffer))
      ;; An invalid byte: the answer is not the log, which is read.
      (let* ((gate (mevedel-execution-mailbox-test--gate))
             (obs (mevedel-execution-test--start
                   session (format "printf 'a\\377b\\nready\\n'; read -r _ < %s; echo more"
                                   (shell-quote-argument gate))
                   :yield-time-ms 20000 :ready-pattern "^ready$" :max-output-chars 4096))
             (facts (plist-get obs :facts))
             (id (plist-get facts :execution-id))
             (opened (mevedel-execution-spool-test--requests
                      (lambda ()
                        (mevedel-execution-spool-open-started
                         session id facts (plist-get obs :output)))))
             (buffer (car opened)))
        (unwind-protect
            (progn
              (should (string-search "\ufffd" (plist-get obs :output)))
              (should (memq 'spool/read (cdr opened)))
              (mevedel-execution-mailbox-test--open gate)
              (mevedel-execution-test--wait-until
               (lambda () (with-current-buffer buffer
                            (string-suffix-p "ready\nmore\n" (buffer-string))))
               "the rest, from the log's own offset")
              (should (= 1 (with-current-buffer buffer
                             (how-many "^more$" (point-min) (point-max))))))
          (kill-buffer buffer))))))

(ert-deftest mevedel-execution-spool-test-header-made-when-it-changes ()
  "Redisplay gets the same header line until what it shows changes.
It asks at each redisplay, many times a second while output streams."
  (with-current-buffer (generate-new-buffer "*mevedel-ert-header*")
    (unwind-protect
        (progn
          (mevedel-execution-spool-output-mode)
          (setq mevedel-execution-spool--source (list nil "artifact://x.log" 0 nil 0)
                mevedel-execution-spool--tailing t
                mevedel-execution-spool--facts
                (list :execution-id "exec-zzzzz-000001" :command "make  -k\n all"
                      :state "running" :output-bytes 10))
          (let ((line (mevedel-execution-spool--header)))
            (should (string-match-p "make -k all · running" line))
            ;; Growth, and a page read further: nothing it shows.
            (plist-put mevedel-execution-spool--facts :output-bytes 20)
            (setq mevedel-execution-spool--source (list nil "artifact://x.log" 0 20 20))
            (should (eq (mevedel-execution-spool--header) line))
            (plist-put mevedel-execution-spool--facts :state "stopping")
            (should (string-match-p "stopping" (mevedel-execution-spool--header)))
            (setq mevedel-execution-spool--tailing nil)
            (should (string-match-p "bytes 0-20 of 20" (mevedel-execution-spool--header)))))
      (kill-buffer))))

(provide 'mevedel-execution-spool-test)
;;; mevedel-execution-spool-test.el ends here

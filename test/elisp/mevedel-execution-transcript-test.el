;;; mevedel-execution-transcript-test.el --- ERT tests of transcript lines and the panel  -*- lexical-binding: t; -*-

;;; Commentary:

;; Transcript rendering from literal records, the fold of records into
;; rows, and the background-work panel with its inspector, driven
;; against the real helper with the fixtures of mevedel-execution-test.el
;; and mevedel-execution-mailbox-test.el.
;; Every wait is a bounded loop on a condition; none sleeps.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-mailbox-test
         (expand-file-name "mevedel-execution-mailbox-test.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-transcript)

;;;; Helpers

(defun mevedel-execution-transcript-test--call-with-panel (session fn)
  "Call FN with the panel buffer of SESSION; kill the buffer after."
  (let ((buffer (mevedel-execution-panel session)))
    (unwind-protect
        (with-current-buffer buffer (funcall fn buffer))
      (when (buffer-live-p buffer) (kill-buffer buffer)))))

(defmacro mevedel-execution-transcript-test--with-panel (session var &rest body)
  "Run BODY in the panel of SESSION, with VAR bound to its buffer."
  (declare (indent 2) (debug (form symbolp body)))
  `(mevedel-execution-transcript-test--call-with-panel ,session (lambda (,var) (ignore ,var) ,@body)))

(defun mevedel-execution-transcript-test--ids ()
  "Return the execution ids the current panel shows, in order."
  (mapcar #'car tabulated-list-entries))

(defun mevedel-execution-transcript-test--column (id name)
  "Return the column NAME of row ID in the current panel."
  (let ((cols (cadr (assoc id tabulated-list-entries)))
        (i (cl-position name (mapcar #'car tabulated-list-format) :test #'equal)))
    (and cols (substring-no-properties (aref cols i)))))

(defun mevedel-execution-transcript-test--shown-p (text)
  "Return non-nil if the current buffer shows TEXT."
  (save-excursion
    (goto-char (point-min))
    (search-forward text nil t)))

(defun mevedel-execution-transcript-test--press (key id)
  "Press KEY on the row of execution ID in the current panel."
  (goto-char (or (mevedel-execution-panel--row-start id)
                 (ert-fail (format "no row for %s" id))))
  (let ((command (key-binding (kbd key))))
    (should (commandp command))
    ;; A command that pops to another buffer leaves the panel current.
    (save-current-buffer (call-interactively command))))

(defun mevedel-execution-transcript-test--changed (session-id &rest live)
  "Dispatch an `exec/changed' for SESSION-ID with the wire facts LIVE.
The panel has handled it, as the queue's timer would, on return."
  (mevedel-execution--dispatch-notification
   mevedel-execution--current 'exec/changed (list :sessionId session-id :live (vconcat live)))
  (mevedel-execution--drain))

(defun mevedel-execution-transcript-test--wait-gone (id what)
  "Wait until the current panel has no row ID; WHAT names the wait.
A failure says what the panel and the system knew of the process."
  (let ((facts (mevedel-execution-panel--facts id)))
    (condition-case err
        (mevedel-execution-test--wait-until
         (lambda () (not (member id (mevedel-execution-transcript-test--ids)))) what)
      (ert-test-failed
       (let ((pid (plist-get facts :pid)))
         (ert-fail (list (cadr err) :facts (mevedel-execution-panel--facts id)
                         :process (and pid (process-attributes pid)))))))))

(defun mevedel-execution-transcript-test--face-p (face string &optional pos)
  "Return non-nil if FACE is among the faces of STRING at POS (default 0)."
  (let ((f (get-text-property (or pos 0) 'face string)))
    (memq face (if (listp f) f (list f)))))

;;;; Rendering and folding

(ert-deftest mevedel-execution-transcript-test-render-breadcrumb ()
  "A breadcrumb shows its text, a status face and a working [Show result]."
  (mevedel-execution-test--with-helper session
    (let* ((obs (mevedel-execution-test--start session "echo the-full-result"))
           (id (plist-get (plist-get obs :facts) :execution-id))
           (text "● Background command \"Run tests\" completed (exit code 0)")
           (record (list :seq 3 :type "breadcrumb" :execution-id id :owner "/root"
                         :status "completed" :exit-code 0 :label "Run tests"
                         :text text))
           (line (mevedel-execution-transcript-render record session))
           (output-buffer (format "*mevedel-exec output %s*" id)))
      (should (equal (substring-no-properties line)
                     (concat text " [Show result]")))
      (should (mevedel-execution-transcript-test--face-p
               'mevedel-execution-transcript-completed line))
      (should (equal (get-text-property 0 'mevedel-execution-id line) id))
      (should (eq (get-text-property 0 'mevedel-execution-record line) record))
      (unwind-protect
          (with-temp-buffer
            (insert "before\n" line "\n")
            (let ((button (next-button (point-min))))
              (should button)
              (should (equal (button-label button) "[Show result]"))
              (should (eq (button-type button) 'mevedel-execution-transcript-show-result))
              (should-not (get-buffer output-buffer))
              (button-activate button))
            (should (get-buffer output-buffer))
            (with-current-buffer output-buffer
              (should (derived-mode-p 'mevedel-execution-spool-output-mode))
              (should (equal (buffer-string) "the-full-result\n"))))
        (when (get-buffer output-buffer) (kill-buffer output-buffer)))
      ;; Without a session argument the button finds the session the
      ;; facts name.
      (let ((line (mevedel-execution-transcript-render
                   (list :type "breadcrumb" :execution-id id :status "failed" :exit-code 2
                         :text "● Background command \"x\" failed (exit code 2)"
                         :facts (list :session-id (mevedel-execution-session-id session))))))
        (should (mevedel-execution-transcript-test--face-p
                 'mevedel-execution-transcript-failed line))
        (unwind-protect
            (with-temp-buffer
              (insert line)
              (button-activate (next-button (point-min)))
              (should (get-buffer output-buffer)))
          (when (get-buffer output-buffer) (kill-buffer output-buffer))))
      ;; Once the session is gone, the button says so.
      (let ((line (mevedel-execution-transcript-render record session)))
        (mevedel-execution-teardown-session session)
        (with-temp-buffer
          (insert line)
          (should-error (button-activate (next-button (point-min))) :type 'user-error))))))

(ert-deftest mevedel-execution-transcript-test-render-notice-and-lost ()
  "Notices show their text only; lifecycle records have no line of their own."
  (let* ((notice (list :seq 9 :type "notice" :execution-id "exec-abcde-000004"
                       :owner "/root/worker" :status "completed" :exit-code 0
                       :text "● Background command \"build\"\ncompleted\e[2J (exit code 0)"
                       :attrs (list :output "SPOOFED OUTPUT")
                       :facts (list :status "completed")))
         (line (mevedel-execution-transcript-render notice)))
    (should (equal (substring-no-properties line)
                   "● Background command \"build\" completed [2J (exit code 0)"))
    (should-not (string-match-p "SPOOFED" line))
    (should-not (next-single-property-change 0 'button line))
    (should (mevedel-execution-transcript-test--face-p
             'mevedel-execution-transcript-completed line)))
  ;; A monitor's end: its status is among the attributes.
  (let ((line (mevedel-execution-transcript-render
               (list :seq 10 :type "notice" :execution-id "exec-abcde-000005"
                     :text "● Monitor \"ticker\" failed · 2 events"
                     :attrs (list :kind "MONITOR_TERMINAL" :status "failed" :events 2)))))
    (should (equal (substring-no-properties line) "● Monitor \"ticker\" failed · 2 events"))
    (should (mevedel-execution-transcript-test--face-p
             'mevedel-execution-transcript-failed line)))
  ;; A lost mark is the state of its row; the breadcrumb of a yielded
  ;; execution found lost is the line that says so.
  (should-not (mevedel-execution-transcript-render
               (list :seq 2 :type "lost" :execution-id "exec-abcde-000001"
                     :facts (list :label "Run tests" :status "lost"))))
  (let ((line (mevedel-execution-transcript-render
               (list :seq 3 :type "breadcrumb" :execution-id "exec-abcde-000001"
                     :status "lost" :label "Run tests"))))
    (should (equal (substring-no-properties line)
                   "● Background command \"Run tests\" lost (the helper restarted before it ended) [Show result]"))
    (should (mevedel-execution-transcript-test--face-p
             'mevedel-execution-transcript-lost line))
    (should (next-single-property-change 0 'button line)))
  (let ((line (mevedel-execution-transcript-render
               (list :type "breadcrumb" :execution-id "exec-abcde-000002"
                     :status "stopped" :signal "SIGTERM"
                     :facts (list :command "sleep 1000")))))
    (should (equal "● Background command \"sleep 1000\" stopped [Show result]"
                   (substring-no-properties line)))
    (should (mevedel-execution-transcript-test--face-p
             'mevedel-execution-transcript-stopped line)))
  (should-not (mevedel-execution-transcript-render (list :type "row" :execution-id "e")))
  (should-not (mevedel-execution-transcript-render (list :type "settled" :execution-id "e")))
  (with-temp-buffer
    (should (= 3 (mevedel-execution-transcript-insert
                  nil
                  (list (list :type "row" :execution-id "e1")
                        (list :type "breadcrumb" :execution-id "e1" :status "completed"
                              :text "● one")
                        (list :type "settled" :execution-id "e1")
                        (list :type "notice" :text "● two")
                        (list :type "lost" :execution-id "e2")
                        (list :type "breadcrumb" :execution-id "e2" :status "lost"
                              :text "● three")))))
    (should (equal (buffer-substring-no-properties (point-min) (point-max))
                   "● one [Show result]\n● two\n● three [Show result]\n"))))

(ert-deftest mevedel-execution-transcript-test-rows-fold ()
  "Records fold into the latest state of each execution, first seen first."
  (let* ((row-a (list :seq 1 :type "row" :execution-id "a" :owner "/root" :label "A"
                      :facts (list :execution-id "a" :state "running")))
         (row-b (list :seq 2 :type "row" :execution-id "b" :owner "/root/w"
                      :facts (list :execution-id "b" :state "running" :label "B")))
         (settled-a (list :seq 3 :type "settled" :execution-id "a"
                          :facts (list :execution-id "a" :state "settled" :status "completed"
                                       :exit-code 0)))
         (crumb-a (list :seq 4 :type "breadcrumb" :execution-id "a" :status "completed"
                        :exit-code 0 :text "● Background command \"A\" completed (exit code 0)"))
         (lost-b (list :seq 5 :type "lost" :execution-id "b"
                       :facts (list :execution-id "b" :state "settled" :termination "lost")))
         (notice (list :seq 6 :type "notice" :text "● Something"))
         (late-row-a (list :seq 7 :type "row" :execution-id "a"
                           :facts (list :execution-id "a" :state "running")))
         (crumb-c (list :seq 8 :type "breadcrumb" :execution-id "c" :status "failed"))
         (rows (mevedel-execution-transcript-rows
                (list row-a row-b settled-a crumb-a lost-b notice late-row-a crumb-c))))
    (should (equal (mapcar (lambda (r) (plist-get r :execution-id)) rows) '("a" "b" "c")))
    (pcase-let ((`(,a ,b ,c) rows))
      (should (equal (plist-get a :type) "settled"))
      (should (equal (plist-get a :status) "completed"))
      (should (eql (plist-get a :exit-code) 0))
      (should (equal (plist-get a :label) "A"))
      (should (equal (plist-get a :owner) "/root"))
      (should (eq (plist-get a :facts) (plist-get settled-a :facts)))
      (should (eq (plist-get a :breadcrumb) crumb-a))
      (should (eql (plist-get a :seq) 3))
      (should (equal (plist-get b :type) "lost"))
      (should (equal (plist-get b :status) "lost"))
      (should (equal (plist-get b :label) "B"))
      (should-not (plist-get b :breadcrumb))
      (should-not (plist-get c :type))
      (should (eq (plist-get c :breadcrumb) crumb-c)))
    ;; The records themselves are left alone.
    (should (equal (plist-get row-a :type) "row"))
    (should-not (mevedel-execution-transcript-rows nil))))

(ert-deftest mevedel-execution-transcript-test-records-call ()
  "The helper's journal gives rows, settlements and one breadcrumb per yield."
  (mevedel-execution-mailbox-test--with-helper mevedel-execution-test--limits session _seen
    (let* ((mevedel-execution-mailbox-delivery-function
            #'mevedel-execution-mailbox-test--acking-sink)
           (settled nil)
           (mevedel-execution-event-functions
            (list (lambda (type plist)
                    (when (eq type 'settled)
                      (push (plist-get (plist-get plist :facts) :execution-id) settled)))))
           (fg (plist-get (plist-get (mevedel-execution-test--start
                                      session "echo fg" :label "Foreground")
                                     :facts)
                          :execution-id))
           (started (mevedel-execution-mailbox-test--background session "bg" nil "Run tests"))
           (bg (car started))
           (breadcrumb nil)
           (all nil)
           (next nil))
      (mevedel-execution-mailbox-test--open (cdr started))
      (mevedel-execution-test--wait-until (lambda () (member bg settled)) "the background end")
      ;; The breadcrumb may wait for the delivery to be durable: the sink
      ;; above acknowledges it.
      (mevedel-execution-test--wait-until
       (lambda ()
         (let ((batch (mevedel-execution-transcript-records session next)))
           (when (car batch)
             (setq all (append all (car batch)) next (cdr batch)))
           (setq breadcrumb (cl-find "breadcrumb" all :key (lambda (r) (plist-get r :type))
                                     :test #'equal))))
       "the breadcrumb")
      (should (equal (plist-get breadcrumb :execution-id) bg))
      (should (equal (plist-get breadcrumb :text)
                     "● Background command \"Run tests\" completed (exit code 0)"))
      (should (equal (plist-get breadcrumb :status) "completed"))
      (should (eql (plist-get breadcrumb :exit-code) 0))
      (should (= 1 (cl-count "breadcrumb" all :key (lambda (r) (plist-get r :type)) :test #'equal)))
      (let ((seqs (mapcar (lambda (r) (plist-get r :seq)) all)))
        (should (cl-every #'integerp seqs))
        (should (equal seqs (sort (copy-sequence seqs) #'<))))
      ;; Caught up: nothing after NEXT.
      (should-not (car (mevedel-execution-transcript-records session next)))
      ;; Paging with a limit gives the same records.
      (let ((first (mevedel-execution-transcript-records session nil 1)))
        (should (= 1 (length (car first))))
        (should (equal (car (car first)) (car all))))
      ;; Everything read so far is on disk once the checkpoint answers.
      (let ((durable (mevedel-execution-transcript-checkpoint session)))
        (should (integerp durable))
        (should (>= durable (plist-get (car (last all)) :seq))))
      (let ((rows (mevedel-execution-transcript-rows all)))
        (should (equal (mapcar (lambda (r) (plist-get r :execution-id)) rows) (list fg bg)))
        (should (equal (plist-get (car rows) :type) "settled"))
        (should (equal (plist-get (car rows) :label) "Foreground"))
        (should (equal (plist-get (car rows) :status) "completed"))
        (should-not (plist-get (car rows) :breadcrumb))
        (should (equal (plist-get (cadr rows) :type) "settled"))
        (should (equal (plist-get (cadr rows) :status) "completed"))
        (should (eq (plist-get (cadr rows) :breadcrumb) breadcrumb)))
      (with-temp-buffer
        (should (= 1 (mevedel-execution-transcript-insert session all)))
        (should (equal (buffer-substring-no-properties (point-min) (point-max))
                       "● Background command \"Run tests\" completed (exit code 0) [Show result]\n"))))))

;;;; The panel

(ert-deftest mevedel-execution-transcript-test-panel-follows-events ()
  "The panel lists live work and follows exec/changed, never polling."
  (mevedel-execution-test--with-helper session
    (let ((a (mevedel-execution-mailbox-test--start-background session "sleep 300" "sleeper"))
          (b (mevedel-execution-mailbox-test--start-background
              session "sleep 301" nil :owner "/root/worker")))
      (mevedel-execution-transcript-test--with-panel session panel
        (should (equal (buffer-name) "*mevedel background*"))
        (should (derived-mode-p 'mevedel-execution-panel-mode))
        (should (memq mevedel-execution-panel--listener mevedel-execution-event-functions))
        (should (equal (mevedel-execution-transcript-test--ids) (list a b)))
        (should (equal (mevedel-execution-transcript-test--column a "Label") "sleeper"))
        (should (equal (mevedel-execution-transcript-test--column b "Label") "sleep 301"))
        (should (equal (mevedel-execution-transcript-test--column a "Owner") "/root"))
        (should (equal (mevedel-execution-transcript-test--column b "Owner") "/root/worker"))
        (dolist (id (list a b))
          (should (equal (mevedel-execution-transcript-test--column id "State") "running"))
          (should (equal (mevedel-execution-transcript-test--column id "Kind") "command"))
          (should (equal (mevedel-execution-transcript-test--column id "Output") "0 B"))
          (should (string-match-p "\\`[0-9]+s\\'"
                                  (mevedel-execution-transcript-test--column id "Runtime"))))
        (should (mevedel-execution-transcript-test--shown-p "sleeper"))
        ;; The mode line says how much runs, and when the runtimes were taken.
        (should (string-match-p ": 2 live, as of [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\'"
                                mode-line-process))
        ;; From here on, only events may change the rows.
        (cl-letf (((symbol-function 'mevedel-execution-list-user)
                   (lambda (&rest _) (ert-fail "the panel polled the helper"))))
          (let ((c (mevedel-execution-mailbox-test--start-background
                    session "echo hi; sleep 302" "third")))
            (mevedel-execution-test--wait-until
             (lambda () (member c (mevedel-execution-transcript-test--ids)))
             "the third row")
            (should (equal (mevedel-execution-transcript-test--ids) (list a b c)))
            (mevedel-execution-test--wait-until
             (lambda () (equal (mevedel-execution-transcript-test--column c "Output") "3 B"))
             "the third row's output size")))
        (should-not (cl-find-if (lambda (timer)
                                  (string-match-p "mevedel-execution-panel"
                                                  (prin1-to-string (timer--function timer))))
                                (append timer-list timer-idle-list)))
        ;; A monitor's execution shows as one.
        (mevedel-execution-transcript-test--changed
         (mevedel-execution-session-id session)
         (list :executionId "exec-zzzzz-000009" :monitorId "mon-1" :owner "/root"
               :command "tail -f log" :label "ticker" :state "running" :outputBytes 2048))
        (should (equal (mevedel-execution-transcript-test--ids) '("exec-zzzzz-000009")))
        (should (equal (mevedel-execution-transcript-test--column "exec-zzzzz-000009" "Kind")
                       "monitor"))
        (should (equal (mevedel-execution-transcript-test--column "exec-zzzzz-000009" "Output")
                       "2 KiB"))
        (should (equal (mevedel-execution-transcript-test--column "exec-zzzzz-000009" "Runtime")
                       "-"))
        ;; Another session's change is not ours.
        (mevedel-execution-transcript-test--changed "some-other-session")
        (should (equal (mevedel-execution-transcript-test--ids) '("exec-zzzzz-000009")))
        (mevedel-execution-transcript-test--changed (mevedel-execution-session-id session))
        (should-not (mevedel-execution-transcript-test--ids))
        (should (mevedel-execution-transcript-test--shown-p "No background work"))
        ;; g asks the helper again.
        (call-interactively (key-binding (kbd "g")))
        (should (= 3 (length (mevedel-execution-transcript-test--ids))))
        (let ((listener mevedel-execution-panel--listener))
          (kill-buffer panel)
          (should-not (memq listener mevedel-execution-event-functions)))))))

(ert-deftest mevedel-execution-transcript-test-panel-stop-and-interrupt ()
  "k stops the row at point, I interrupts it; each row goes when it settles."
  (mevedel-execution-test--with-helper session
    (let ((keep (mevedel-execution-mailbox-test--start-background session "sleep 300" "keeper"))
          (stop (mevedel-execution-mailbox-test--start-background session "sleep 300" "stopper"))
          (intr (mevedel-execution-mailbox-test--start-background session "sleep 300" "interrupted"))
          (ctlc (mevedel-execution-mailbox-test--start-background session "sleep 300" "ctrl-c")))
      (mevedel-execution-transcript-test--with-panel session _panel
        (should (equal (mevedel-execution-transcript-test--ids) (list keep stop intr ctlc)))
        (mevedel-execution-transcript-test--press "k" stop)
        (mevedel-execution-transcript-test--wait-gone stop "the stopped row to go")
        (should (equal (mevedel-execution-transcript-test--ids) (list keep intr ctlc)))
        (mevedel-execution-transcript-test--press "I" intr)
        (mevedel-execution-transcript-test--wait-gone intr "the interrupted row to go")
        (should (equal (mevedel-execution-transcript-test--ids) (list keep ctlc)))
        (mevedel-execution-transcript-test--press "C-c C-c" ctlc)
        (mevedel-execution-transcript-test--wait-gone ctlc "the row interrupted with C-c C-c to go")
        (should (equal (mevedel-execution-transcript-test--ids) (list keep)))
        (should (equal (mevedel-execution-transcript-test--column keep "State") "running"))
        (should (equal (tabulated-list-get-id) keep))
        (should-error (mevedel-execution-transcript-test--press "s" keep) :type 'user-error)))))

(ert-deftest mevedel-execution-transcript-test-panel-input-inspector-output ()
  "The inspector expands and collapses; s types into a terminal; o opens output."
  (mevedel-execution-test--with-helper session
    (let* ((id (mevedel-execution-mailbox-test--start-background
                session "while :; do if read -r -t 1 l; then echo \"got:$l\"; fi; echo tick; done"
                "chatty" :tty t))
           (output-buffer (format "*mevedel-exec output %s*" id)))
      (mevedel-execution-transcript-test--with-panel session _panel
        (mevedel-execution-transcript-test--press "i" id)
        (should (equal mevedel-execution-panel--expanded (list id)))
        (let ((facts (mevedel-execution-panel--facts id)))
          (dolist (text (list "state running" (format "pid %s" (plist-get facts :pid))
                              (format "cwd %s" (plist-get facts :cwd))
                              (format "log artifact://executions/%s.log" id)
                              "command while :;"))
            (should (mevedel-execution-transcript-test--shown-p text))))
        (mevedel-execution-test--wait-until
         (lambda () (mevedel-execution-transcript-test--shown-p "| tick"))
         "the output tail in the inspector")
        ;; The inspector belongs to its row: keys work on it too.
        (should (search-forward "| tick" nil t))
        (should (equal (tabulated-list-get-id) id))
        (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "hello")))
          (call-interactively (key-binding (kbd "s"))))
        (mevedel-execution-test--wait-until
         (lambda () (mevedel-execution-transcript-test--shown-p "| got:hello"))
         "the typed line in the inspector")
        ;; Point stayed in the inspector of its row across refreshes.
        (should (equal (tabulated-list-get-id) id))
        (unwind-protect
            (progn
              (mevedel-execution-transcript-test--press "o" id)
              (should (get-buffer output-buffer))
              (with-current-buffer output-buffer
                (should (derived-mode-p 'mevedel-execution-spool-output-mode))
                (should (string-match-p "got:hello" (buffer-string)))))
          (when (get-buffer output-buffer) (kill-buffer output-buffer)))
        (mevedel-execution-transcript-test--press "RET" id)
        (should-not mevedel-execution-panel--expanded)
        (should-not (text-property-any (point-min) (point-max)
                                       'mevedel-execution-panel-inspector id))
        (should-not (mevedel-execution-transcript-test--shown-p "| tick"))
        (should (equal (tabulated-list-get-id) id))))))

(ert-deftest mevedel-execution-transcript-test-panel-monitor ()
  "A monitor of the real helper shows as one row of kind monitor; k stops it."
  (mevedel-execution-test--with-helper session
    (let* ((mevedel-execution-mailbox-delivery-function
            #'mevedel-execution-mailbox-test--acking-sink)
           (monitor (mevedel-execution-monitor-start
                     session :owner "/root/watcher" :label "ticks"
                     :command "while :; do echo tick; sleep 0.2; done"
                     :persistent t))
           (id (plist-get monitor :execution-id)))
      (should (stringp id))
      (mevedel-execution-transcript-test--with-panel session _panel
        (should (equal (mevedel-execution-transcript-test--ids) (list id)))
        (should (equal (mevedel-execution-transcript-test--column id "Kind") "monitor"))
        (should (equal (mevedel-execution-transcript-test--column id "Label") "ticks"))
        (should (equal (mevedel-execution-transcript-test--column id "Owner") "/root/watcher"))
        (mevedel-execution-transcript-test--press "k" id)
        (mevedel-execution-transcript-test--wait-gone id "the monitor's row to go")
        (should (mevedel-execution-transcript-test--shown-p "No background work")))
      ;; Its end is one notice in the transcript, without a button.
      (let (notice)
        (mevedel-execution-test--wait-until
         (lambda ()
           (setq notice (cl-find-if (lambda (r) (and (equal (plist-get r :type) "notice")
                                                     (equal (plist-get r :execution-id) id)))
                                    (car (mevedel-execution-transcript-records session)))))
         "the monitor's notice")
        (let ((line (mevedel-execution-transcript-render notice session)))
          (should (string-match-p "\\`● Monitor \"ticks\" stopped · [0-9]+ events?\\'"
                                  (substring-no-properties line)))
          (should (mevedel-execution-transcript-test--face-p
                   'mevedel-execution-transcript-stopped line))
          (should-not (next-single-property-change 0 'button line)))))))

;;;; Helper death and recovery

(defun mevedel-execution-transcript-test--gone-p (pid)
  "Return non-nil if PID has exited (a zombie counts as exited)."
  (let ((attrs (process-attributes pid)))
    (or (null attrs) (equal (alist-get 'state attrs) "Z"))))

(ert-deftest mevedel-execution-transcript-test-helper-death-and-recovery ()
  "A dead helper empties the panel, which says so; g reopens the session,
whose journal marks the work it left lost, kills what it left running,
and gives the transcript one line saying so."
  (mevedel-execution-test--with-helper session
    (let* ((id (mevedel-execution-mailbox-test--start-background session "sleep 300" "sleeper"))
           (messages nil))
      (mevedel-execution-transcript-test--with-panel session _panel
        (should (equal (mevedel-execution-transcript-test--ids) (list id)))
        (let ((pid (plist-get (mevedel-execution-panel--facts id) :pid)))
          (should (integerp pid))
          ;; The row must be on disk before the crash to be recovered.
          (mevedel-execution-transcript-checkpoint session)
          (signal-process (jsonrpc--process mevedel-execution--current) 'KILL)
          (mevedel-execution-test--wait-until
           (lambda () (mevedel-execution-transcript-test--shown-p
                       "The mevedel-exec helper exited (status 9)"))
           "the panel to say the helper exited")
          (should-not (mevedel-execution-transcript-test--ids))
          (should (mevedel-execution-transcript-test--shown-p
                   "g starts it again and shows what is live"))
          (cl-letf* ((orig (symbol-function 'message))
                     ((symbol-function 'message)
                      (lambda (fmt &rest args)
                        (when fmt (push (apply #'format fmt args) messages))
                        (apply orig fmt args))))
            (call-interactively (key-binding (kbd "g"))))
          (should (mevedel-execution-transcript-test--shown-p "No background work"))
          (should (cl-find-if (lambda (m) (and (string-match-p "marked lost" m)
                                               (string-match-p (regexp-quote id) m)
                                               (string-match-p "sleeper" m)))
                              messages))
          (let ((recovered (mevedel-execution-session-recovered session)))
            (should (equal (mapcar (lambda (f) (plist-get f :execution-id)) recovered)
                           (list id)))
            (should (equal (plist-get (car recovered) :termination) "lost"))
            (should (equal (plist-get (car recovered) :status) "lost")))
          ;; What the dead helper left running does not outlive the reopen.
          (mevedel-execution-test--wait-until
           (lambda () (mevedel-execution-transcript-test--gone-p pid))
           "the leftover command to be killed")))
      (let* ((all (car (mevedel-execution-transcript-records session)))
             (rows (mevedel-execution-transcript-rows all))
             (lost (cl-find "lost" all :key (lambda (r) (plist-get r :type)) :test #'equal)))
        (should (equal (plist-get lost :execution-id) id))
        (should (equal (mapcar (lambda (r) (plist-get r :execution-id)) rows) (list id)))
        (should (equal (plist-get (car rows) :type) "lost"))
        (should (equal (plist-get (car rows) :status) "lost"))
        (should (equal (plist-get (car rows) :label) "sleeper"))
        (with-temp-buffer
          (should (= 1 (mevedel-execution-transcript-insert session all)))
          (should (equal (buffer-substring-no-properties (point-min) (point-max))
                         "● Background command \"sleeper\" lost (the helper restarted before it ended) [Show result]\n"))
          (should (mevedel-execution-transcript-test--face-p
                   'mevedel-execution-transcript-lost (buffer-string))))))))

;;;; Point and sessions

(ert-deftest mevedel-execution-transcript-test-panel-point-and-sessions ()
  "Point stays on its execution across refreshes; panels of sessions are apart."
  (mevedel-execution-test--with-helper session
    (let* ((sid (mevedel-execution-session-id session))
           (f (lambda (id label)
                (list :executionId id :owner "/root" :command label :label label
                      :state "running" :startedAt "2020-01-01T00:00:00.000Z"))))
      (mevedel-execution-transcript-test--with-panel session _panel
        (mevedel-execution-transcript-test--changed
         sid (funcall f "e1" "one") (funcall f "e2" "two") (funcall f "e3" "three"))
        (goto-char (mevedel-execution-panel--row-start "e2"))
        (forward-char 5)
        (let ((column (current-column)))
          (mevedel-execution-transcript-test--changed
           sid (funcall f "e3" "three") (funcall f "e2" "two") (funcall f "e1" "one"))
          (should (equal (mevedel-execution-transcript-test--ids) '("e3" "e2" "e1")))
          (should (equal (tabulated-list-get-id) "e2"))
          (should (= (current-column) column)))
        ;; When its row goes, point moves to the row that followed it.
        (mevedel-execution-transcript-test--changed
         sid (funcall f "e3" "three") (funcall f "e1" "one"))
        (should (equal (tabulated-list-get-id) "e1"))
        (should (string-match-p "\\`[0-9]+h[0-9][0-9]m\\'"
                                (mevedel-execution-transcript-test--column "e1" "Runtime"))))
      ;; Two sessions, two panels, each with its own rows and listener.
      (let* ((state2 (make-temp-file "mevedel-ert-state2-" t))
             (session2 (mevedel-execution-open-session (concat sid "-2") state2)))
        (unwind-protect
            (let ((a (mevedel-execution-mailbox-test--start-background session "sleep 300" "first"))
                  (b (mevedel-execution-mailbox-test--start-background session2 "sleep 300" "second")))
              (mevedel-execution-transcript-test--with-panel session p1
                (mevedel-execution-transcript-test--with-panel session2 p2
                  (should-not (eq p1 p2))
                  (should (equal (buffer-name p2)
                                 (format "*mevedel background*<%s-2>" sid)))
                  (should (equal (with-current-buffer p1 (mevedel-execution-transcript-test--ids))
                                 (list a)))
                  (should (equal (mevedel-execution-transcript-test--ids) (list b)))
                  (let ((c (mevedel-execution-mailbox-test--start-background session2 "sleep 300" "third")))
                    (mevedel-execution-test--wait-until
                     (lambda () (member c (mevedel-execution-transcript-test--ids)))
                     "the second panel's new row")
                    (should (equal (with-current-buffer p1 (mevedel-execution-transcript-test--ids))
                                   (list a))))
                  ;; The same session's panel is reused, not duplicated.
                  (should (eq (mevedel-execution-panel session2) p2))
                  (let ((l1 (buffer-local-value 'mevedel-execution-panel--listener p1)))
                    (kill-buffer p1)
                    (should-not (memq l1 mevedel-execution-event-functions))
                    (should (memq mevedel-execution-panel--listener
                                  mevedel-execution-event-functions))))))
          (mevedel-execution-teardown-session session2)
          (delete-directory state2 t))))))

(provide 'mevedel-execution-transcript-test)
;;; mevedel-execution-transcript-test.el ends here

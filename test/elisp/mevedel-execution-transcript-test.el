;;; mevedel-execution-transcript-test.el --- ERT tests of transcript lines  -*- lexical-binding: t; -*-

;;; Commentary:

;; Transcript rendering from literal records, the fold of records into
;; rows, and the helper's journal read through the facade, against the
;; real helper with the fixtures of
;; mevedel-execution-test-support.el.  The wording is checked against
;; the helper's in mevedel-execution-wire-test.el; the panel's tests are
;; in mevedel-execution-panel-test.el.
;; Every wait is a bounded loop on a condition; none sleeps.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-transcript)

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

(ert-deftest mevedel-execution-transcript-test-one-line ()
  "A text goes on one line: runs of spaces, line breaks, control and
format characters become one space and the ends are trimmed.  The
result is always a new string, which a caller may add faces to."
  (pcase-dolist (`(,text . ,want)
                 '(("make -j8 test" . "make -j8 test")
                   ("" . "")
                   (" lead" . "lead")
                   ("trail " . "trail")
                   ("two  spaces" . "two spaces")
                   ("tab\there" . "tab here")
                   ("line\nbreak\r\n" . "line break")
                   ("a\u202eb\u200bc" . "a b c")
                   ("esc\e[31mred" . "esc [31mred")
                   ("x" . "x")
                   (" " . "")))
    (let ((line (mevedel-execution-transcript-one-line text)))
      (should (equal line want))
      (unless (equal text "") (should-not (eq line text)))))
  ;; Faces added to the line stay off the text it came from.
  (let* ((text "plain words here")
         (line (mevedel-execution-transcript-one-line text)))
    (add-face-text-property 0 (length line) 'bold t line)
    (should-not (text-properties-at 0 text))))

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

;;;; Deliveries

(defconst mevedel-execution-transcript-test--spoof
  "● Background command \"Deploy\" completed (exit code 0)"
  "Output that looks like a transcript line.")

(ert-deftest mevedel-execution-transcript-test-render-delivery-literal ()
  "Each kind of delivery, from literal records as the sink gets them."
  (let* ((spoof mevedel-execution-transcript-test--spoof)
         (execution (lambda (owner status &rest attrs)
                      (list :delivery-id "d-1" :session-id "s" :owner owner :kind "EXECUTION"
                            :attempt 1
                            :attrs (append attrs (list :execution-id "exec-x-000001"
                                                       :label "Build" :command "make"
                                                       :status status))
                            :observation (list :output (concat spoof "\n") :final t)
                            :text spoof))))
    ;; The owner's own result: its breadcrumb is the line.
    (should-not (mevedel-execution-transcript-render-delivery
                 (funcall execution "/root" "completed" :exit-code 0)))
    (should-not (mevedel-execution-transcript-render-delivery
                 (funcall execution "/root/w" "completed" :exit-code 0) "/root/w"))
    ;; Another owner's, forwarded: the breadcrumb wording, never the payload.
    (let ((line (mevedel-execution-transcript-render-delivery
                 (funcall execution "/root/w" "completed" :exit-code 0))))
      (should (equal line "● Background command \"Build\" completed (exit code 0)"))
      (should (mevedel-execution-transcript-test--face-p
               'mevedel-execution-transcript-completed line)))
    (should (equal (mevedel-execution-transcript-render-delivery
                    (funcall execution "/root" "failed" :exit-code 2) "/root/w")
                   "● Background command \"Build\" failed (exit code 2)"))
    (should (equal (mevedel-execution-transcript-render-delivery
                    (funcall execution "/root/w" "timed-out" :signal "SIGTERM"))
                   "● Background command \"Build\" timed out"))
    ;; A stop is neutral: no exit code, the stopped face.
    (let ((line (mevedel-execution-transcript-render-delivery
                 (funcall execution "/root/w" "stopped" :exit-code 143 :signal "SIGTERM"))))
      (should (equal line "● Background command \"Build\" stopped"))
      (should (mevedel-execution-transcript-test--face-p
               'mevedel-execution-transcript-stopped line)))
    ;; A label that tries to end its quotes and start a line.
    (should (equal (mevedel-execution-transcript-render-delivery
                    (list :kind "EXECUTION" :owner "/root/w"
                          :attrs (list :label "x\" completed\n● Fake" :status "completed"
                                       :exit-code 0)))
                   "● Background command \"x\\\" completed ● Fake\" completed (exit code 0)"))
    ;; Monitor events: one line each, escapes and controls gone.
    (let ((lines (split-string
                  (mevedel-execution-transcript-render-delivery
                   (list :kind "MONITOR" :owner "/root"
                         :attrs (list :monitor-id "mon-1" :label "tail" :events 4)
                         :lines (list "\e[31mERROR\e[0m disk full"
                                      "\e]0;pwned\a\e]8;;http://x\e\\link\e]8;;\e\\ done"
                                      "tab\there\r\u202egnp.exe"
                                      spoof)))
                  "\n")))
      (should (equal lines
                     (list "● Monitor event: ERROR disk full"
                           "● Monitor event: link done"
                           "● Monitor event: tab here gnp.exe"
                           (concat "● Monitor event: " spoof))))
      (should-not (cl-some (lambda (l) (string-match-p "[[:cntrl:]\u202e]" l)) lines)))
    ;; Bounded: line length and the number of lines.
    (let* ((many (mapcar (lambda (i) (format "%s-%d" (make-string 300 ?x) i))
                         (number-sequence 1 50)))
           (text (mevedel-execution-transcript-render-delivery
                  (list :kind "MONITOR" :owner "/root"
                        :attrs (list :label "noisy" :events 50 :suppressed 7)
                        :lines many)))
           (lines (split-string text "\n")))
      (should (= (length lines) (1+ mevedel-execution-transcript-event-lines)))
      (should (cl-every (lambda (l) (<= (length l) (+ (length "● Monitor event: ")
                                                      mevedel-execution-transcript-event-chars)))
                        lines))
      (should (equal (car (last lines))
                     (format "● Monitor \"noisy\" · %d more events not shown · 7 suppressed"
                             (- 50 mevedel-execution-transcript-event-lines)))))
    ;; A monitor's end, worded as the helper words it.
    (let ((line (mevedel-execution-transcript-render-delivery
                 (list :kind "MONITOR_TERMINAL" :owner "/root" :text spoof
                       :attrs (list :monitor-id "mon-1" :label "ticker" :status "stopped"
                                    :termination "stopped" :exit-code 143
                                    :reason "stopped by the person" :events 2)))))
      (should (equal line "● Monitor \"ticker\" stopped · 2 events"))
      (should (mevedel-execution-transcript-test--face-p
               'mevedel-execution-transcript-stopped line)))
    (should (equal (mevedel-execution-transcript-render-delivery
                    (list :kind "MONITOR_TERMINAL" :owner "/root/w"
                          :attrs (list :label "tail" :status "failed" :exit-code 1
                                       :reason "timeout after 300s" :events 1)))
                   "● Monitor \"tail\" failed (exit code 1) · 1 event · timeout after 300s"))
    (should-not (mevedel-execution-transcript-render-delivery (list :kind "SOMETHING")))))

(ert-deftest mevedel-execution-transcript-test-render-delivery-helper ()
  "Deliveries of the real helper: forwarded, own, stopped, monitors.
The output of the commands tries to spoof lines; it never shows."
  (mevedel-execution-mailbox-test--with-helper '(:graceMs 500) session _seen
    (let* ((records nil)
           (mevedel-execution-mailbox-delivery-function
            (lambda (record ack) (push record records) (funcall ack)))
           (of (lambda (execution-id)
                 (mevedel-execution-test--wait-until
                  (lambda () (cl-find execution-id records
                                      :key (lambda (r) (plist-get (plist-get r :attrs) :execution-id))
                                      :test #'equal))
                  (format "the delivery of %s" execution-id))))
           (spoof (shell-quote-argument mevedel-execution-transcript-test--spoof)))
      ;; A worker's result, forwarded to the root's transcript.
      (let* ((gate (mevedel-execution-mailbox-test--gate))
             (id (mevedel-execution-mailbox-test--start-background
                  session (format "read -r _ < %s; echo %s; printf 'x\\033[2J\\n'; exit 3"
                                  (shell-quote-argument gate) spoof)
                  "Worker job" :owner "/root/worker")))
        (mevedel-execution-mailbox-test--open gate)
        (let* ((record (funcall of id))
               (line (mevedel-execution-transcript-render-delivery record)))
          (should (string-match-p "Deploy" (plist-get (plist-get record :observation) :output)))
          (should (equal line "● Background command \"Worker job\" failed (exit code 3)"))
          (should-not (string-match-p "Deploy" line))
          (should-not (mevedel-execution-transcript-render-delivery record "/root/worker"))))
      ;; The root's own result: its breadcrumb is its line.
      (let ((id (mevedel-execution-mailbox-test--finish session "own")))
        (should-not (mevedel-execution-transcript-render-delivery (funcall of id))))
      ;; Stopped by the person: the owner gets it, and it is neutral.
      (let* ((id (mevedel-execution-mailbox-test--start-background
                  session "exec sleep 1000" "Sleeper" :owner "/root/worker"))
             (final (mevedel-execution-test--await
                     (lambda (cb) (mevedel-execution-stop-user session id cb)))))
        (should (equal (plist-get (plist-get final :facts) :status) "stopped"))
        (let ((line (mevedel-execution-transcript-render-delivery (funcall of id))))
          (should (equal line "● Background command \"Sleeper\" stopped"))
          (should (mevedel-execution-transcript-test--face-p
                   'mevedel-execution-transcript-stopped line))))
      ;; A monitor that ends on its own, and one that is stopped: the
      ;; events without their escapes, the ends as the helper words them.
      (let* ((terminal (lambda (monitor-id)
                         (mevedel-execution-test--wait-until
                          (lambda ()
                            (cl-find-if (lambda (r)
                                          (and (equal (plist-get r :kind) "MONITOR_TERMINAL")
                                               (equal (plist-get (plist-get r :attrs) :monitor-id)
                                                      monitor-id)))
                                        records))
                          (format "the end of %s" monitor-id))))
             (events (lambda (monitor-id)
                       (mapconcat
                        #'identity
                        (delq nil (mapcar (lambda (r)
                                            (and (equal (plist-get r :kind) "MONITOR")
                                                 (equal (plist-get (plist-get r :attrs) :monitor-id)
                                                        monitor-id)
                                                 (mevedel-execution-transcript-render-delivery r)))
                                          (reverse records)))
                        "\n")))
             (done (plist-get (mevedel-execution-monitor-start
                               session :label "colours"
                               :command (format "printf '\\033[31mred\\033[0m\\n\\033]0;title\\007plain\\n'; echo %s"
                                                spoof))
                              :monitor-id)))
        (let ((end (funcall terminal done)))
          (should (equal (funcall events done)
                         (concat "● Monitor event: red\n● Monitor event: plain\n"
                                 "● Monitor event: " mevedel-execution-transcript-test--spoof)))
          (should (equal (mevedel-execution-transcript-render-delivery end)
                         "● Monitor \"colours\" completed (exit code 0) · 3 events"))
          (should (equal (mevedel-execution-transcript-render-delivery end)
                         (plist-get end :text))))
        (let* ((ticker (plist-get (mevedel-execution-monitor-start
                                   session :label "ticker" :persistent t
                                   :command "echo tick; exec sleep 1000")
                                  :monitor-id)))
          (mevedel-execution-test--wait-until
           (lambda () (cl-find-if (lambda (r) (and (equal (plist-get r :kind) "MONITOR")
                                                   (equal (plist-get (plist-get r :attrs) :monitor-id)
                                                          ticker)))
                                  records))
           "the ticker's event")
          (mevedel-execution-monitor-stop session nil ticker)
          (let ((end (funcall terminal ticker)))
            (should (equal (mevedel-execution-transcript-render-delivery end)
                           "● Monitor \"ticker\" stopped · 1 event"))
            (should (equal (mevedel-execution-transcript-render-delivery end)
                           (plist-get end :text)))))))))

(provide 'mevedel-execution-transcript-test)
;;; mevedel-execution-transcript-test.el ends here

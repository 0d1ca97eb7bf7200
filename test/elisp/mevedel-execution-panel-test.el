;;; mevedel-execution-panel-test.el --- ERT tests of the background-work panel  -*- lexical-binding: t; -*-

;;; Commentary:

;; The background-work panel with its inspector, driven against the
;; real helper with the fixtures of mevedel-execution-test-support.el.
;; Every wait is a bounded loop on a condition; none sleeps.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-panel)

;;;; The panel

(ert-deftest mevedel-execution-panel-test-follows-events ()
  "The panel lists live work and follows exec/changed, never polling."
  (mevedel-execution-test--with-helper session
    (let ((a (mevedel-execution-mailbox-test--start-background session "sleep 300" "sleeper"))
          (b (mevedel-execution-mailbox-test--start-background
              session "sleep 301" nil :owner "/root/worker")))
      (mevedel-execution-panel-test--with-panel session panel
        (should (equal (buffer-name) "*mevedel background*"))
        (should (derived-mode-p 'mevedel-execution-panel-mode))
        (should (memq mevedel-execution-panel--listener mevedel-execution-event-functions))
        (should (equal (mevedel-execution-panel-test--ids) (list a b)))
        (should (equal (mevedel-execution-panel-test--column a "Label") "sleeper"))
        (should (equal (mevedel-execution-panel-test--column b "Label") "sleep 301"))
        (should (equal (mevedel-execution-panel-test--column a "Owner") "/root"))
        (should (equal (mevedel-execution-panel-test--column b "Owner") "/root/worker"))
        (dolist (id (list a b))
          (should (equal (mevedel-execution-panel-test--column id "State") "running"))
          (should (equal (mevedel-execution-panel-test--column id "Kind") "command"))
          (should (equal (mevedel-execution-panel-test--column id "Output") "0 B"))
          (should (string-match-p "\\`[0-9]+s\\'"
                                  (mevedel-execution-panel-test--column id "Runtime"))))
        (should (mevedel-execution-panel-test--shown-p "sleeper"))
        ;; The mode line says how much runs, and when the runtimes were taken.
        (should (string-match-p ": 2 live, as of [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\'"
                                mode-line-process))
        ;; From here on, only events may change the rows.
        (cl-letf (((symbol-function 'mevedel-execution-list-user)
                   (lambda (&rest _) (ert-fail "the panel polled the helper"))))
          (let ((c (mevedel-execution-mailbox-test--start-background
                    session "echo hi; sleep 302" "third")))
            (mevedel-execution-test--wait-until
             (lambda () (member c (mevedel-execution-panel-test--ids)))
             "the third row")
            (should (equal (mevedel-execution-panel-test--ids) (list a b c)))
            (mevedel-execution-test--wait-until
             (lambda () (eql (plist-get (mevedel-execution-panel-facts c) :output-bytes) 3))
             "the third row's output size")
            ;; Off screen, the panel keeps no timer: its growth is drawn
            ;; when it comes on screen, in a window not selected too.
            (should-not (cl-find-if (lambda (timer)
                                      (string-match-p "mevedel-execution-panel"
                                                      (prin1-to-string (timer--function timer))))
                                    (append timer-list timer-idle-list)))
            (let ((window (split-window)))
              (set-window-buffer window panel)
              (mevedel-execution-panel-test--redisplay window)
              (should (equal (mevedel-execution-panel-test--column c "Output") "3 B"))
              (delete-window window)
              (mevedel-execution-panel-test--redisplay))))
        (should-not mevedel-execution-panel--timer)
        ;; A monitor's execution shows as one.
        (mevedel-execution-panel-test--changed
         (mevedel-execution-session-id session)
         (list :executionId "exec-zzzzz-000009" :monitorId "mon-1" :owner "/root"
               :command "tail -f log" :label "ticker" :state "running" :outputBytes 2048))
        (should (equal (mevedel-execution-panel-test--ids) '("exec-zzzzz-000009")))
        (should (equal (mevedel-execution-panel-test--column "exec-zzzzz-000009" "Kind")
                       "monitor"))
        (should (equal (mevedel-execution-panel-test--column "exec-zzzzz-000009" "Output")
                       "2 KiB"))
        (should (equal (mevedel-execution-panel-test--column "exec-zzzzz-000009" "Runtime")
                       "-"))
        ;; Another session's change is not ours.
        (mevedel-execution-panel-test--changed "some-other-session")
        (should (equal (mevedel-execution-panel-test--ids) '("exec-zzzzz-000009")))
        (mevedel-execution-panel-test--changed (mevedel-execution-session-id session))
        (should-not (mevedel-execution-panel-test--ids))
        (should (mevedel-execution-panel-test--shown-p "No background work"))
        ;; g asks the helper again.
        (call-interactively (key-binding (kbd "g")))
        (should (= 3 (length (mevedel-execution-panel-test--ids))))
        (let ((listener mevedel-execution-panel--listener))
          (kill-buffer panel)
          (should-not (memq listener mevedel-execution-event-functions)))))))

(ert-deftest mevedel-execution-panel-test-stop-and-interrupt ()
  "k stops the row at point, I interrupts it; each row goes when it settles."
  (mevedel-execution-test--with-helper session
    (let ((keep (mevedel-execution-mailbox-test--start-background session "sleep 300" "keeper"))
          (stop (mevedel-execution-mailbox-test--start-background session "sleep 300" "stopper"))
          (intr (mevedel-execution-mailbox-test--start-background session "sleep 300" "interrupted"))
          (ctlc (mevedel-execution-mailbox-test--start-background session "sleep 300" "ctrl-c")))
      (mevedel-execution-panel-test--with-panel session _panel
        (should (equal (mevedel-execution-panel-test--ids) (list keep stop intr ctlc)))
        (mevedel-execution-panel-test--press "k" stop)
        (mevedel-execution-panel-test--wait-gone stop "the stopped row to go")
        (should (equal (mevedel-execution-panel-test--ids) (list keep intr ctlc)))
        (mevedel-execution-panel-test--press "I" intr)
        (mevedel-execution-panel-test--wait-gone intr "the interrupted row to go")
        (should (equal (mevedel-execution-panel-test--ids) (list keep ctlc)))
        (mevedel-execution-panel-test--press "C-c C-c" ctlc)
        (mevedel-execution-panel-test--wait-gone ctlc "the row interrupted with C-c C-c to go")
        (should (equal (mevedel-execution-panel-test--ids) (list keep)))
        (should (equal (mevedel-execution-panel-test--column keep "State") "running"))
        (should (equal (tabulated-list-get-id) keep))
        (should-error (mevedel-execution-panel-test--press "s" keep) :type 'user-error)))))

(ert-deftest mevedel-execution-panel-test-input-inspector-output ()
  "The inspector expands and collapses; s types into a terminal; o opens output."
  (mevedel-execution-test--with-helper session
    (let* ((id (mevedel-execution-mailbox-test--start-background
                session "while :; do if read -r -t 1 l; then echo \"got:$l\"; fi; echo tick; done"
                "chatty" :tty t))
           (output-buffer (format "*mevedel-exec output %s*" id)))
      (mevedel-execution-panel-test--with-panel session _panel
        (mevedel-execution-panel-test--press "i" id)
        (should (equal mevedel-execution-panel-expanded (list id)))
        (let ((facts (mevedel-execution-panel-facts id)))
          (dolist (text (list "state running" (format "pid %s" (plist-get facts :pid))
                              (format "cwd %s" (plist-get facts :cwd))
                              (format "log artifact://executions/%s.log" id)
                              "command while :;"))
            (should (mevedel-execution-panel-test--shown-p text))))
        (mevedel-execution-test--wait-until
         (lambda () (mevedel-execution-panel-test--shown-p "| tick"))
         "the output tail in the inspector")
        ;; The inspector belongs to its row: keys work on it too.
        (should (search-forward "| tick" nil t))
        (should (equal (tabulated-list-get-id) id))
        (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "hello")))
          (call-interactively (key-binding (kbd "s"))))
        (mevedel-execution-test--wait-until
         (lambda () (mevedel-execution-panel-test--shown-p "| got:hello"))
         "the typed line in the inspector")
        ;; Point stayed in the inspector of its row across refreshes.
        (should (equal (tabulated-list-get-id) id))
        (unwind-protect
            (progn
              (mevedel-execution-panel-test--press "o" id)
              (should (get-buffer output-buffer))
              (with-current-buffer output-buffer
                (should (derived-mode-p 'mevedel-execution-spool-output-mode))
                (should (string-match-p "got:hello" (buffer-string)))))
          (when (get-buffer output-buffer) (kill-buffer output-buffer)))
        (mevedel-execution-panel-test--press "RET" id)
        (should-not mevedel-execution-panel-expanded)
        (should-not (text-property-any (point-min) (point-max)
                                       'mevedel-execution-panel-inspector id))
        (should-not (mevedel-execution-panel-test--shown-p "| tick"))
        (should (equal (tabulated-list-get-id) id))))))

(ert-deftest mevedel-execution-panel-test-growth-drawn-within-a-second ()
  "A row that only grew is drawn within a second; one that changed state at once.
With hundreds of live commands the helper reports output growth many
times a second: the panel does not redraw every row on each, and
draws growth cell by cell, never the whole listing."
  (mevedel-execution-test--with-helper session
    (mevedel-execution-panel-test--with-panel session panel
      (switch-to-buffer panel)
      (let* ((sid (mevedel-execution-session-id session))
             (id "exec-zzzzz-000007")
             (facts (list :executionId id :owner "/root" :command "make" :label "build"
                          :state "running" :outputBytes 0))
             (redraws 0)
             (count (lambda (&rest _) (cl-incf redraws))))
        (mevedel-execution-panel-test--changed sid facts)
        (should (equal (mevedel-execution-panel-test--column id "Output") "0 B"))
        (advice-add 'mevedel-execution-panel-redraw :before count)
        (unwind-protect
            (progn
              (dotimes (i 5)
                (mevedel-execution-panel-test--changed
                 sid (plist-put (copy-sequence facts) :outputBytes (* 1024 (1+ i)))))
              (should (= redraws 0))
              (should (equal (mevedel-execution-panel-test--column id "Output") "0 B"))
              (mevedel-execution-test--wait-until
               (lambda () (equal (mevedel-execution-panel-test--column id "Output") "5 KiB"))
               "the last size")
              (should (= redraws 0))
              ;; Waiting for input is news: drawn at once.
              (mevedel-execution-panel-test--changed
               sid (append (list :waitingForInput t :prompt "Password:")
                           (plist-put (copy-sequence facts) :outputBytes 6000)))
              (should (= redraws 1))
              (should (string-match-p "Password:"
                                      (mevedel-execution-panel-test--column id "Label"))))
          (advice-remove 'mevedel-execution-panel-redraw count))))))

;; Emacs 28's `equal-including-properties' compares property values with
;; `eq': a row is compared as its text and each run's properties.
(defun mevedel-execution-panel-test--row (id)
  "Return the row of ID in the current panel as its text and property runs."
  (let* ((start (mevedel-execution-panel-row-start id))
         (end (save-excursion (goto-char start) (line-end-position)))
         (runs nil))
    (cl-loop for pos = start then (next-property-change pos nil end)
             while (< pos end)
             do (push (cons (- pos start) (text-properties-at pos)) runs))
    (cons (buffer-substring-no-properties start end) (nreverse runs))))

(ert-deftest mevedel-execution-panel-test-cell-as-wide-rewritten-in-place ()
  "An Output cell as wide as the one shown is rewritten in place, as printed.
The rows on screen change it each second: the row then reads, text
and properties, as printing the panel anew would make it, and no
cell was printed anew."
  (mevedel-execution-test--with-helper session
    (mevedel-execution-panel-test--with-panel session panel
      (switch-to-buffer panel)
      (let* ((sid (mevedel-execution-session-id session))
             (id "exec-zzzzz-000005")
             (printed 0)
             (count (lambda (&rest _) (cl-incf printed))))
        (mevedel-execution-panel-test--changed
         sid (list :executionId id :owner "/root" :command "yes" :state "running"
                   :outputBytes 2048 :version 1))
        (should (equal (mevedel-execution-panel-test--column id "Output") "2 KiB"))
        (advice-add 'tabulated-list-set-col :before count)
        (unwind-protect
            (progn
              (mevedel-execution--dispatch-notification
               mevedel-execution--current 'exec/changed
               (list :sessionId sid :changed [] :grown (vector (vector id 10 3072 60 0 3072 2))))
              (mevedel-execution-drain)
              (mevedel-execution-flush-changed)
              (mevedel-execution-panel--draw-growth)
              (should (equal (mevedel-execution-panel-test--column id "Output") "3 KiB"))
              (should (= printed 0))
              (let ((in-place (mevedel-execution-panel-test--row id)))
                (mevedel-execution-panel-redraw)
                (should (equal (mevedel-execution-panel-test--row id) in-place))))
          (advice-remove 'tabulated-list-set-col count))))))

(ert-deftest mevedel-execution-panel-test-growth-only-on-screen ()
  "Growth rewrites the cells of the rows on screen only, and no row else.
A row scrolled into view shows its growth by the next tick; a panel
that comes on screen shows it at once."
  (mevedel-execution-test--with-helper session
    (mevedel-execution-panel-test--with-panel session panel
      (switch-to-buffer panel)
      (delete-other-windows)
      (let* ((sid (mevedel-execution-session-id session))
             (n (+ 20 (window-body-height)))
             (ids (cl-loop for i from 1 to n collect (format "exec-zzzzz-%06d" i)))
             (redraws 0)
             (count (lambda (&rest _) (cl-incf redraws)))
             (grow (lambda (bytes)
                     (mevedel-execution--dispatch-notification
                      mevedel-execution--current 'exec/changed
                      (list :sessionId sid :changed []
                            :grown (vconcat (cl-loop for id in ids
                                                     collect (vector id 10 bytes 1 0 bytes bytes)))))
                     (mevedel-execution-drain)
                     (mevedel-execution-flush-changed))))
        (apply #'mevedel-execution-panel-test--changed sid
               (cl-loop for id in ids
                        collect (list :executionId id :owner "/root" :command "yes" :state "running"
                                      :startedAt "2026-12-06T03:00:00Z" :outputBytes 0 :version 1)))
        (should (equal (mevedel-execution-panel-test--ids) ids))
        (advice-add 'mevedel-execution-panel-redraw :before count)
        (unwind-protect
            (progn
              (funcall grow 2048)
              (mevedel-execution-test--wait-until
               (lambda () (equal (mevedel-execution-panel-test--column (car ids) "Output") "2 KiB"))
               "the growth of the first row")
              (should (= redraws 0))
              ;; The last row is off screen: not rewritten.
              (should (equal (mevedel-execution-panel-test--column (car (last ids)) "Output") "0 B"))
              ;; Scrolled into view, the clock brings it up to date.
              (set-window-start (selected-window)
                                (mevedel-execution-panel-row-start (car (last ids))))
              (mevedel-execution-test--wait-until
               (lambda () (equal (mevedel-execution-panel-test--column (car (last ids)) "Output")
                                 "2 KiB"))
               "the growth of the last row, by the clock")
              ;; Off screen, nothing, and no timer to draw it; shown
              ;; again, at once, in a window that is not selected too.
              (switch-to-buffer (get-buffer-create " other"))
              (mevedel-execution-panel-test--redisplay)
              (funcall grow 4096)
              (with-current-buffer panel
                (should-not mevedel-execution-panel--timer)
                (should-not mevedel-execution-panel--later)
                (mevedel-execution-panel--draw-stale panel)
                (should (equal (mevedel-execution-panel-test--column (car (last ids)) "Output")
                               "2 KiB")))
              (let ((window (split-window)))
                (set-window-buffer window panel)
                (mevedel-execution-panel-test--redisplay window)
                (with-current-buffer panel
                  (should (equal (mevedel-execution-panel-test--column (car (last ids)) "Output")
                                 "4 KiB"))
                  (should mevedel-execution-panel--timer))
                (delete-window window))
              (should (= redraws 0)))
          (advice-remove 'mevedel-execution-panel-redraw count))))))

(ert-deftest mevedel-execution-panel-test-growth-while-hidden ()
  "A row whose only growth came while the panel was hidden shows it when shown.
The helper may name a command first as running, then with newer facts
that differ only where the row shows none (its pid), and its output in
`grown': the panel draws none of it off screen, and all of it once it
is in a window, one not selected too."
  (mevedel-execution-test--with-helper session
    (mevedel-execution-panel-test--with-panel session panel
      (let* ((sid (mevedel-execution-session-id session))
             (id "exec-zzzzz-000003")
             (facts (list :executionId id :owner "/root" :command "echo hi; sleep 302"
                          :label "third" :state "running" :outputBytes 0 :version 2)))
        (mevedel-execution-panel-test--changed sid facts)
        (should (equal (mevedel-execution-panel-test--column id "Output") "0 B"))
        (dolist (params (list (list :sessionId sid
                                    :changed (vector (append (list :pid 4242 :version 4)
                                                             facts)))
                              (list :sessionId sid :changed []
                                    :grown (vector (vector id 10 3 1 0 3 5)))))
          (mevedel-execution--dispatch-notification
           mevedel-execution--current 'exec/changed params))
        (mevedel-execution-drain)
        (mevedel-execution-flush-changed)
        (should (eql (plist-get (mevedel-execution-panel-facts id) :output-bytes) 3))
        (should-not mevedel-execution-panel--later)
        (should-not mevedel-execution-panel--timer)
        (let ((window (split-window)))
          (set-window-buffer window panel)
          (mevedel-execution-panel-test--redisplay window)
          (should (equal (mevedel-execution-panel-test--column id "Output") "3 B"))
          (should mevedel-execution-panel--timer)
          (delete-window window)
          (mevedel-execution-panel-test--redisplay)
          (should-not mevedel-execution-panel--timer))))))

(ert-deftest mevedel-execution-panel-test-monitor ()
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
      (mevedel-execution-panel-test--with-panel session _panel
        (should (equal (mevedel-execution-panel-test--ids) (list id)))
        (should (equal (mevedel-execution-panel-test--column id "Kind") "monitor"))
        (should (equal (mevedel-execution-panel-test--column id "Label") "ticks"))
        (should (equal (mevedel-execution-panel-test--column id "Owner") "/root/watcher"))
        (mevedel-execution-panel-test--press "k" id)
        (mevedel-execution-panel-test--wait-gone id "the monitor's row to go")
        (should (mevedel-execution-panel-test--shown-p "No background work")))
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

(ert-deftest mevedel-execution-panel-test-helper-death-and-recovery ()
  "A dead helper empties the panel, which says so; g reopens the session,
whose journal marks the work it left lost, kills what it left running,
and gives the transcript one line saying so; the panel shows it lost."
  (mevedel-execution-test--with-helper session
    (let* ((id (mevedel-execution-mailbox-test--start-background session "sleep 300" "sleeper"))
           (messages nil))
      (mevedel-execution-panel-test--with-panel session _panel
        (should (equal (mevedel-execution-panel-test--ids) (list id)))
        (let ((pid (plist-get (mevedel-execution-panel-facts id) :pid)))
          (should (integerp pid))
          ;; The row must be on disk before the crash to be recovered.
          (mevedel-execution-transcript-checkpoint session)
          (signal-process (jsonrpc--process mevedel-execution--current) 'KILL)
          (mevedel-execution-test--wait-until
           (lambda () (mevedel-execution-panel-test--shown-p
                       "The mevedel-exec helper exited (status 9)"))
           "the panel to say the helper exited")
          (should-not (mevedel-execution-panel-test--ids))
          (should (mevedel-execution-panel-test--shown-p
                   "g starts it again and shows what is live"))
          (cl-letf* ((orig (symbol-function 'message))
                     ((symbol-function 'message)
                      (lambda (fmt &rest args)
                        (when fmt (push (apply #'format fmt args) messages))
                        (apply orig fmt args))))
            (call-interactively (key-binding (kbd "g"))))
          ;; Nothing runs; the session's history shows the work lost.
          (should (mevedel-execution-panel-test--shown-p "Nothing runs now"))
          (should (equal (mevedel-execution-panel-test--ids) (list id)))
          (should (equal (plist-get (mevedel-execution-panel-facts id) :status) "lost"))
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
           (lambda () (mevedel-execution-panel-test--gone-p pid))
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

(ert-deftest mevedel-execution-panel-test-point-and-sessions ()
  "Point stays on its execution across refreshes; panels of sessions are apart."
  (mevedel-execution-test--with-helper session
    (let* ((sid (mevedel-execution-session-id session))
           ;; Rows come in exec/list order: by start, then by id.
           (f (lambda (id label &optional second)
                (list :executionId id :owner "/root" :command label :label label
                      :state "running"
                      :startedAt (format "2020-01-01T00:00:%02d.000Z" (or second 0))))))
      (mevedel-execution-panel-test--with-panel session _panel
        (mevedel-execution-panel-test--changed
         sid (funcall f "e1" "one") (funcall f "e2" "two") (funcall f "e3" "three"))
        (goto-char (mevedel-execution-panel-row-start "e2"))
        (forward-char 5)
        (let ((column (current-column)))
          (mevedel-execution-panel-test--changed
           sid (funcall f "e3" "three" 1) (funcall f "e2" "two" 2) (funcall f "e1" "one" 3))
          (should (equal (mevedel-execution-panel-test--ids) '("e3" "e2" "e1")))
          (should (equal (tabulated-list-get-id) "e2"))
          (should (= (current-column) column)))
        ;; When its row goes, point moves to the row that followed it.
        (mevedel-execution-panel-test--changed
         sid (funcall f "e3" "three" 1) (funcall f "e1" "one" 3))
        (should (equal (tabulated-list-get-id) "e1"))
        (should (string-match-p "\\`[0-9]+h[0-9][0-9]m\\'"
                                (mevedel-execution-panel-test--column "e1" "Runtime"))))
      ;; Two sessions, two panels, each with its own rows and listener.
      (let* ((state2 (make-temp-file "mevedel-ert-state2-" t))
             (session2 (mevedel-execution-open-session (concat sid "-2") state2)))
        (unwind-protect
            (let ((a (mevedel-execution-mailbox-test--start-background session "sleep 300" "first"))
                  (b (mevedel-execution-mailbox-test--start-background session2 "sleep 300" "second")))
              (mevedel-execution-panel-test--with-panel session p1
                (mevedel-execution-panel-test--with-panel session2 p2
                  (should-not (eq p1 p2))
                  (should (equal (buffer-name p2)
                                 (format "*mevedel background*<%s-2>" sid)))
                  (should (equal (with-current-buffer p1 (mevedel-execution-panel-test--ids))
                                 (list a)))
                  (should (equal (mevedel-execution-panel-test--ids) (list b)))
                  (let ((c (mevedel-execution-mailbox-test--start-background session2 "sleep 300" "third")))
                    (mevedel-execution-test--wait-until
                     (lambda () (member c (mevedel-execution-panel-test--ids)))
                     "the second panel's new row")
                    (should (equal (with-current-buffer p1 (mevedel-execution-panel-test--ids))
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

(ert-deftest mevedel-execution-panel-test-kind-column ()
  "The Kind column shows a one-shot's and a helper's kind from their facts."
  (mevedel-execution-test--with-helper session
    (mevedel-execution-start-one-shot #'ignore :name "one" :command '("sleep" "300")
                                      :session session)
    (mevedel-execution-start-helper #'ignore "two" '("sleep" "301") nil nil :session session)
    (mevedel-execution-panel-test--with-panel session panel
      (mevedel-execution-test--wait-until
       (lambda () (= (length (mevedel-execution-panel-test--ids)) 2)) "two rows")
      (should (equal (sort (mapcar (lambda (id) (mevedel-execution-panel-test--column id "Kind"))
                                   (mevedel-execution-panel-test--ids))
                           #'string<)
                     '("helper" "one-shot"))))))

(provide 'mevedel-execution-panel-test)
;;; mevedel-execution-panel-test.el ends here

(ert-deftest mevedel-execution-panel-test-rows-printed-as-tabulated-list-does ()
  "The panel prints its rows as `tabulated-list-print-entry' would: the
same text and the same properties, cell for cell, in wide and narrow
windows, with cells cut, right-aligned, borrowing room, or with faces."
  (let ((segments
         (lambda ()
           ;; Each run of text with its properties, sorted by name.
           (let ((pos (point-min)) out)
             (while (< pos (point-max))
               (let ((next (next-property-change pos nil (point-max)))
                     (props nil))
                 (cl-loop for (k v) on (text-properties-at pos) by #'cddr
                          do (push (cons k v) props))
                 (push (list (buffer-substring-no-properties pos next)
                             (sort props (lambda (a b) (string< (car a) (car b)))))
                       out)
                 (setq pos next)))
             (nreverse out))))
        (rows
         (list
          (list "a" (vector "000001" "command" "/root"
                            "for i in $(seq 200); do echo \"line $i of a long command\"; sleep 0.1; done"
                            (propertize "running" 'face 'bold) "7s" "1.2 KiB"))
          (list "b" (vector "000002" "one-shot" "/home/someone/agent"
                            (propertize "short" 'face 'shadow) "waiting for input now" "1h 2m" "532 B"))
          (list "c" (vector "000003" "helper" "/root" "עברית and text" "exit 2" "12m 30s" "10.5 MiB"))
          (list "d" (vector "000004" "monitor" "/root"
                            (propertize "has its own help" 'help-echo "mine") "stopping" "0s" "0 B")))))
    (dolist (width '(160 100 60 30))
      (let (theirs ours)
        (dolist (printer (list #'tabulated-list-print-entry #'mevedel-execution-panel--print-row))
          (with-temp-buffer
            (setq tabulated-list-format (mevedel-execution-panel-format width)
                  tabulated-list-padding 2
                  tabulated-list-entries rows
                  tabulated-list-printer printer
                  tabulated-list-sort-key nil)
            (tabulated-list-print)
            (if (eq printer #'tabulated-list-print-entry)
                (setq theirs (funcall segments))
              (setq ours (funcall segments)))))
        (should (> (length theirs) 40))
        (should (equal ours theirs))))))

(ert-deftest mevedel-execution-panel-test-finished-order ()
  "Finished rows go newest end first; two that ended in the same
millisecond, the one started later first, whatever order they came in."
  (let* ((row (lambda (id started ended)
                (list :execution-id id :state "settled" :started-at started :ended-at ended)))
         (a (funcall row "exec-x-000001" "2026-01-01T00:00:01.000Z" "2026-01-01T00:00:05.000Z"))
         (b (funcall row "exec-x-000002" "2026-01-01T00:00:02.000Z" "2026-01-01T00:00:05.000Z"))
         (c (funcall row "exec-x-000003" "2026-01-01T00:00:03.000Z" "2026-01-01T00:00:04.000Z"))
         (d (funcall row "exec-x-000004" "2026-01-01T00:00:03.000Z" "2026-01-01T00:00:04.000Z"))
         (unended (list :execution-id "exec-x-000005" :state "settled")))
    (dolist (order (list (list a b c d unended) (list unended d c b a) (list c a unended d b)))
      (should (equal (mapcar (lambda (f) (plist-get f :execution-id))
                             (mevedel-execution-panel-sort-finished (copy-sequence order)))
                     '("exec-x-000002" "exec-x-000001" "exec-x-000004" "exec-x-000003"
                       "exec-x-000005"))))))

(ert-deftest mevedel-execution-panel-test-inspector-follows-ports ()
  "An open inspector follows its row: a port the command starts to listen
on shows although the command prints nothing; closing it stops that."
  (mevedel-execution-test--with-helper session
    (let* ((mevedel-execution-mailbox-delivery-function
            #'mevedel-execution-mailbox-test--acking-sink)
           (dir (make-temp-file "mevedel-follow" t))
           (go (expand-file-name "go" dir))
           (id (mevedel-execution-mailbox-test--start-background
                session
                (format "exec python3 -c 'import os, socket, time
while not os.path.exists(%S): time.sleep(0.02)
s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); time.sleep(100)' >/dev/null 2>&1"
                        go)
                "quiet server")))
      (unwind-protect
          (mevedel-execution-panel-test--with-panel session _panel
            (mevedel-execution-panel-test--press "RET" id)
            (should (member id mevedel-execution-panel-expanded))
            ;; The port comes only once the inspector is open.
            (write-region "" nil go)
            (mevedel-execution-test--wait-until
             (lambda () (mevedel-execution-panel-test--shown-p "listening 127.0.0.1:"))
             "the port in the inspector")
            (mevedel-execution-panel-test--press "RET" id)
            (should-not mevedel-execution-panel-expanded)
            (mevedel-execution-panel-test--press "k" id)
            (mevedel-execution-panel-test--wait-gone id "the server's row to go"))
        (delete-directory dir t)))))

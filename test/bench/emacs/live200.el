;;; live200.el --- Emacs with 200 live commands: facade against make-process  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by test/bench/emacs/tty.sh in an `emacs -nw' under tmux (make
;; bench-live200), so that redisplay runs as it does for a person.
;;
;; A 10 ms heartbeat timer records `float-time' stamps; the largest gap
;; between two says how long Emacs could not run timers.  Three phases
;; of `live200-bench--seconds' each, measured from the command loop:
;;
;;   idle     the heartbeat alone;
;;   facade   `live200-bench--count' commands, each printing a line every
;;            100 ms, started with `mevedel-execution-start-bash' (yielded
;;            at once) in one session, the panel of that session open in
;;            one window and the first command's output buffer followed
;;            in another;
;;   make     the same commands under `make-process', each with its own
;;            buffer (the default filter inserts), the first one shown.
;;
;; Emacs's CPU over a phase is `get-internal-run-time'; its garbage
;; collections in the phase are counted and timed (`gcs-done',
;; `gc-elapsed'), since one is often the largest gap, and the helper's
;; notifications in the facade phase by method, since each costs Emacs
;; a few KB of allocation to read.  After the facade phase five forced
;; collections of the same heap are timed while the commands still run
;; and again once they have ended: what their load alone adds to a
;; collection, the usual largest gap.  The helper's CPU over the phase
;; is reported too.  The goals: the
;; facade's CPU at most half the make-process side's, and its largest gap
;; at most the idle one plus 5 ms.  The report goes to $MEVEDEL_BENCH_OUT.

;;; Code:

(require 'cl-lib)
(require 'subr-x)

(require 'bench-common) ; the Makefile's targets and tty.sh put it on the load path
(bench-common-use-compiled-facade)
(require 'mevedel-execution)

(defconst live200-bench--count 200 "Live commands in each busy phase.")
(defconst live200-bench--seconds 20.0 "Length of each phase.")
(defconst live200-bench--beat 0.01 "Period of the heartbeat.")

(defconst live200-bench--command
  "for i in $(seq 200); do echo \"line $i of a command that prints every 100 ms\"; sleep 0.1; done"
  "Each command of the busy phases: a line every 100 ms for 20 s.")

(defvar live200-bench--stamps nil "Heartbeat stamps of the phase, newest first.")
(defvar live200-bench--results nil "Alist of (PHASE CPU-MS MAX-GAP-MS GCS GC-MS MB OTHER-GAP-MS).")

(defun live200-bench--consed ()
  "Bytes of Lisp data allocated so far, by `memory-use-counts'."
  ;; Conses, floats, vector slots, symbols, string bytes, intervals, strings.
  (cl-loop for n in (memory-use-counts) for size in '(16 16 8 48 1 56 32) sum (* n size)))
(defvar live200-bench--timer nil "The heartbeat.")
(defvar live200-bench--procs nil "The make-process side's processes.")
(defvar live200-bench--notes nil
  "The helper's notifications in the facade phase: ((METHOD . COUNT) ...).")

(defun live200-bench--count-note (_conn method _params)
  "Count the notification METHOD; each costs Emacs a few KB to read."
  (cl-incf (alist-get method live200-bench--notes 0)))

(defun live200-bench--cpu-ms ()
  "Emacs's CPU time so far, in ms."
  (* 1000 (float-time (get-internal-run-time))))

(defun live200-bench--measure (phase then)
  "Measure PHASE for `live200-bench--seconds', then call THEN."
  (garbage-collect)
  (setq live200-bench--stamps (list (cons (float-time) gcs-done)))
  (let ((cpu0 (live200-bench--cpu-ms))
        (gcs0 gcs-done)
        (gc0 gc-elapsed)
        (consed0 (live200-bench--consed)))
    (setq live200-bench--timer
          (run-at-time live200-bench--beat live200-bench--beat
                       (lambda () (push (cons (float-time) gcs-done) live200-bench--stamps))))
    (run-at-time
     live200-bench--seconds nil
     (live200-bench--guard
      (lambda ()
       (cancel-timer live200-bench--timer)
       (let* ((stamps (reverse live200-bench--stamps))
              (gap (cl-loop for (a b) on stamps while b maximize (- (car b) (car a))))
              ;; The largest with no collection in it: what else stalls.
              (other (cl-loop for (a b) on stamps while b
                              when (= (cdr a) (cdr b)) maximize (- (car b) (car a)))))
         (push (list phase (- (live200-bench--cpu-ms) cpu0) (* 1000 gap)
                     (- gcs-done gcs0) (* 1000 (- gc-elapsed gc0))
                     (/ (- (live200-bench--consed) consed0) 1e6) (* 1000 (or other 0)))
               live200-bench--results))
       (funcall then))))))

(defvar live200-bench--forced nil
  "Forced collections of the facade's heap: ((WHEN WALL-MS CPU-MS) ...).")

(defvar live200-bench--helper-cpu nil "The helper's CPU in the facade phase, in ms.")

(defun live200-bench--forced-gcs (when)
  "Time five forced collections of this heap, noted as WHEN: the p50s."
  (let (walls cpus)
    (dotimes (_ 5)
      (let ((t0 (float-time))
            (c0 (live200-bench--cpu-ms)))
        (garbage-collect)
        (push (* 1000 (- (float-time) t0)) walls)
        (push (- (live200-bench--cpu-ms) c0) cpus)))
    (push (list when (bench-common-percentile walls 50) (bench-common-percentile cpus 50))
          live200-bench--forced)))

(defun live200-bench--process-cpu-ms (pid)
  "CPU time of process PID so far (user and system), in ms."
  (let ((a (process-attributes pid)))
    (* 1000 (+ (float-time (alist-get 'utime a)) (float-time (alist-get 'stime a))))))

(defun live200-bench--when-children-gone (pid then)
  "Call THEN once process PID has no children left (at most 20 s on)."
  (let ((deadline (+ (float-time) 20))
        timer)
    (setq timer
          (run-at-time
           0 0.1
           (live200-bench--guard
            (lambda ()
              (when (or (> (float-time) deadline)
                        (not (cl-some (lambda (p)
                                        (eql pid (alist-get 'ppid (process-attributes p))))
                                      (list-system-processes))))
                (cancel-timer timer)
                (funcall then))))))))

(defvar live200-bench--first-draw-ms nil "Wall ms of the panel's first draw.")

(defun live200-bench--first-draw ()
  "Redisplay now, as the windows were just set up; return its wall ms."
  (let ((t0 (float-time)))
    (redisplay t)
    (* 1000 (- (float-time) t0))))

(defun live200-bench--facade (then)
  "Run the facade phase, then call THEN."
  (let* ((state (make-temp-file "live200-state-" t))
         (session (mevedel-execution-open-session
                   "live200" state (list :maxLive (+ 16 live200-bench--count))))
         (started 0)
         (first nil))
    (dotimes (_ live200-bench--count)
      (mevedel-execution-start-bash
       (lambda (obs)
         (cl-incf started)
         (unless first
           (setq first (plist-get (plist-get obs :facts) :execution-id))))
       :session session :command live200-bench--command :yield-time-ms 0))
    (let ((deadline (+ (float-time) 60)))
      (while (and (< started live200-bench--count) (< (float-time) deadline))
        (accept-process-output nil 0.05)))
    (unless (= started live200-bench--count)
      (live200-bench--finish (format "error: %d of %d commands started" started live200-bench--count)))
    ;; On screen, as a person has it: off screen a panel draws nothing.
    (switch-to-buffer (mevedel-execution-panel session))
    (delete-other-windows)
    (let ((below (split-window-below)))
      (set-window-buffer below (mevedel-execution-spool-open-output session first t)))
    ;; Their first draw (all 200 rows) is the opening's, reported on
    ;; its own, not part of living with them.
    (setq live200-bench--first-draw-ms (live200-bench--first-draw))
    (setq live200-bench--notes nil)
    (advice-add 'mevedel-execution--dispatch-notification :before #'live200-bench--count-note)
    (let* ((helper (process-id (bench-common-helper-process mevedel-execution-program)))
           (cpu0 (live200-bench--process-cpu-ms helper)))
      (live200-bench--measure
       'facade
       (lambda ()
         (advice-remove 'mevedel-execution--dispatch-notification #'live200-bench--count-note)
         (setq live200-bench--helper-cpu (- (live200-bench--process-cpu-ms helper) cpu0))
         ;; The same heap collected with the commands running and after
         ;; they end: what their load alone adds to a collection.
         (live200-bench--forced-gcs 'loaded)
         (mevedel-execution-stop-all-user session)
         (live200-bench--when-children-gone
          helper
          (lambda ()
            (live200-bench--forced-gcs 'quiet)
            (funcall then))))))))

(defun live200-bench--make-process (then)
  "Run the make-process phase, then call THEN."
  (delete-other-windows)
  (dotimes (i live200-bench--count)
    (push (make-process :name (format "live200-%d" i)
                        :buffer (generate-new-buffer (format "*live200 %d*" i))
                        :command (list "bash" "-c" live200-bench--command)
                        :noquery t)
          live200-bench--procs))
  (switch-to-buffer (process-buffer (car (last live200-bench--procs))))
  (live200-bench--first-draw)
  (live200-bench--measure
   'make
   (lambda ()
     (dolist (p live200-bench--procs) (delete-process p))
     (funcall then))))

(defun live200-bench--finish (&optional error)
  "Write the report (or ERROR) and exit."
  (with-temp-file (getenv "MEVEDEL_BENCH_OUT")
    (if error
        (insert error "\n")
      (pcase-let ((`(,_ ,icpu ,igap . ,igc) (assq 'idle live200-bench--results))
                  (`(,_ ,fcpu ,fgap . ,fgc) (assq 'facade live200-bench--results))
                  (`(,_ ,mcpu ,mgap . ,mgc) (assq 'make live200-bench--results)))
        (insert (format "Emacs with %d live commands, a line every 100 ms each, %.0f s a phase, %s\n"
                        live200-bench--count live200-bench--seconds (emacs-version)))
        (insert (format "  idle          CPU %7.0f ms  largest heartbeat gap %6.1f ms\n" icpu igap))
        (insert (format "  facade        CPU %7.0f ms  largest heartbeat gap %6.1f ms  (panel open, one output followed)\n" fcpu fgap))
        (insert (format "  make-process  CPU %7.0f ms  largest heartbeat gap %6.1f ms  (a buffer each, one shown)\n" mcpu mgap))
        (insert (format "  garbage collections: idle %d in %.0f ms, facade %d in %.0f ms, make-process %d in %.0f ms\n"
                        (nth 0 igc) (nth 1 igc) (nth 0 fgc) (nth 1 fgc) (nth 0 mgc) (nth 1 mgc)))
        (insert (format "  Lisp data allocated: idle %.1f MB, facade %.1f MB, make-process %.1f MB\n"
                        (nth 2 igc) (nth 2 fgc) (nth 2 mgc)))
        (insert (format "  largest gap with no collection in it: idle %.1f ms, facade %.1f ms, make-process %.1f ms\n"
                        (nth 3 igc) (nth 3 fgc) (nth 3 mgc)))
        (pcase-let ((`(,_ ,lwall ,lcpu) (assq 'loaded live200-bench--forced))
                    (`(,_ ,qwall ,qcpu) (assq 'quiet live200-bench--forced)))
          (insert (format "  the facade's heap collected by force, p50 of 5: %.1f ms (CPU %.1f ms) with the commands running, %.1f ms (CPU %.1f ms) after they ended\n"
                          lwall lcpu qwall qcpu)))
        (insert (format "  the helper's CPU in the facade phase: %.0f ms\n" live200-bench--helper-cpu))
        (insert (format "  the panel's first draw, 200 rows, before the phase: %.1f ms\n"
                        live200-bench--first-draw-ms))
        (insert (format "  notifications in the facade phase: %d (%s)\n"
                        (apply #'+ (mapcar #'cdr live200-bench--notes))
                        (mapconcat (lambda (n) (format "%s %d" (car n) (cdr n)))
                                   (sort (copy-sequence live200-bench--notes)
                                         (lambda (a b) (> (cdr a) (cdr b))))
                                   ", ")))
        (insert (format "  CPU over idle (the heartbeat's own): facade %+.0f ms, make-process %+.0f ms\n"
                        (- fcpu icpu) (- mcpu icpu)))
        (insert (format "  CPU facade/make-process %.2fx (goal <= 0.5x: %s); gap facade - idle %+.1f ms (goal <= +5 ms: %s)\n"
                        (/ fcpu (max mcpu 1.0)) (if (<= fcpu (* 0.5 mcpu)) "PASS" "MISS")
                        (- fgap igap) (if (<= fgap (+ igap 5)) "PASS" "MISS"))))))
  (kill-emacs (if error 1 0)))

(setq mevedel-execution-program
      (or (getenv "MEVEDEL_EXEC_PROGRAM") mevedel-execution-program))
;; On a loaded machine the panel's listing, answered behind the
;; notifications of 200 commands, can take longer than the default.
(setq mevedel-execution-request-timeout 60)
(defun live200-bench--guard (fn)
  "Return FN wrapped so that an error ends the benchmark with a report."
  (lambda (&rest args)
    (condition-case err
        (apply fn args)
      (error (live200-bench--finish (format "error: %s" (error-message-string err)))))))

(run-at-time
 0.5 nil
 (live200-bench--guard
  (lambda ()
    (live200-bench--measure
     'idle
     (live200-bench--guard
      (lambda ()
        (live200-bench--facade
         (live200-bench--guard
          (lambda ()
            (live200-bench--make-process #'live200-bench--finish))))))))))

;;; live200.el ends here

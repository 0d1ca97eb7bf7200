;;; replay200.el --- What 200 live commands' exec/changed cost Emacs, replayed  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by `make bench-replay200' in a batch Emacs against the real
;; helper, with no commands running: the load of 200 commands does not
;; blur what Emacs itself spends.  A panel of 200 live rows is open; each
;; second, the `exec/changed' traffic of 200 commands that each grow once
;; a second is dispatched, and the panel's clock draws it once: first as
;; the helper sent it before growth had a form of its own (ten
;; notifications of twenty whole facts, 100 ms apart), then as it sends
;; it now (one notification of 200 `grown' entries).
;; The figures are Emacs's CPU over the replay and its garbage
;; collections; `bench-live200' is the same traffic with real commands.
;; The facade is byte-compiled first, as a package install leaves it.

;;; Code:

(require 'cl-lib)
(require 'bench-common) ; the Makefile's targets and tty.sh put it on the load path
;; Byte-compiled, as a package install leaves it: interpreted, each
;; function call and `let' allocates, which no installed package does.
(bench-common-use-compiled-facade)
(require 'mevedel-execution)
(require 'mevedel-execution-panel)

(defconst replay200-seconds
  (string-to-number (or (getenv "REPLAY_SECONDS") "20"))
  "Seconds of traffic replayed.")

(setq mevedel-execution-program
      (or (getenv "MEVEDEL_EXEC_PROGRAM") mevedel-execution-program))

(defvar replay200-session
  (mevedel-execution-open-session "replay200" (make-temp-file "replay200-" t)))

(defvar replay200-sid (mevedel-execution-session-id replay200-session))

(defun replay200-facts (i bytes)
  "Wire facts of the Ith command, grown to BYTES."
  (list :executionId (format "exec-zzzzz-%06d" i) :sessionId replay200-sid :owner "/root"
        :command "for i in $(seq 200); do echo \"line $i of a command that prints every 100 ms\"; sleep 0.1; done"
        :kind "command" :cwd "/root/" :target "local" :state "running" :lane "shared" :yielded t
        :queuedAt "2026-12-06T03:00:00.123456Z" :startedAt "2026-12-06T03:00:00.133456Z"
        :wallMs 0 :outputBytes bytes :outputLines (/ bytes 50) :omittedBytes 0 :unreadBytes bytes
        :outputAddress (format "artifact://executions/exec-zzzzz-%06d.log" i)
        :pid 12345 :pgid 12345 :version (+ 3 (/ bytes 50))))

(defun replay200-note (facts-list)
  "Dispatch an `exec/changed' of FACTS-LIST as the helper's would be."
  (mevedel-execution--dispatch-notification
   mevedel-execution--current 'exec/changed
   (list :sessionId replay200-sid :changed (vconcat facts-list)))
  (mevedel-execution-drain))

;; After the table's seeding.
(mevedel-execution-list-user replay200-session)
(defvar replay200-panel (mevedel-execution-panel replay200-session))
(replay200-note (cl-loop for i from 1 to 200 collect (replay200-facts i 0)))
(defun replay200-grown (bytes)
  "Dispatch what the helper sends now: 200 grown to BYTES in one."
  (mevedel-execution--dispatch-notification
   mevedel-execution--current 'exec/changed
   (list :sessionId replay200-sid :changed []
         :grown (vconcat (cl-loop for i from 1 to 200
                                  collect (vector (format "exec-zzzzz-%06d" i) (* 1000 (/ bytes 500))
                                                  bytes (/ bytes 50) 0 bytes (+ 3 (/ bytes 50)))))))
  (mevedel-execution-drain))

(defun replay200-run (form)
  "Replay traffic in FORM, `facts' or `grown', and print its cost."
  (garbage-collect)
  (let ((cpu0 (float-time (get-internal-run-time)))
        (gcs gcs-done)
        (t0 (float-time)))
    (dotimes (sec replay200-seconds)
      (dotimes (k 10)
        (if (eq form 'facts)
            (replay200-note (cl-loop for i from (1+ (* k 20)) to (* (1+ k) 20)
                                     collect (replay200-facts i (* 500 (1+ sec)))))
          (when (= k 9) (replay200-grown (* 500 (1+ sec)))))
        (let ((until (+ t0 sec (* (1+ k) 0.1))))
          (while (< (float-time) until)
            (accept-process-output nil (max 0.001 (- until (float-time)))))))
      (with-current-buffer replay200-panel (mevedel-execution-panel--draw-growth t)))
    (princ (format "  %s: Emacs CPU %.0f ms, %d garbage collections (took %.1f s)\n"
                   (if (eq form 'facts)
                       "whole facts, ten notifications of twenty a second (the wire before)"
                     "one notification of 200 grown entries a second (the wire now)")
                   (* 1000 (- (float-time (get-internal-run-time)) cpu0))
                   (- gcs-done gcs) (- (float-time) t0)))))

(princ (format "exec/changed of 200 live commands replayed for %d s each way, %s\n"
               replay200-seconds (emacs-version)))
(replay200-run 'facts)
(replay200-run 'grown)
(kill-emacs 0)

;;; replay200.el ends here

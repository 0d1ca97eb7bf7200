;;; panel-driver.el --- Open the background-work panel on a terminal  -*- lexical-binding: t; -*-

;;; Commentary:

;; Loaded by panel.sh into `emacs -nw -Q' inside tmux: opens a session in
;; $MEVEDEL_TUI_STATE, starts two background commands ("ticker", which
;; prints, and "sleeper", which does not) and shows their panel in the
;; only window.  The script then reads the screen and types keys as a
;; person would.  When Emacs exits, the helper's stderr is saved next to
;; the screen captures in $MEVEDEL_TUI_ARTIFACTS.

;;; Code:

(require 'mevedel-execution-panel)

(setq mevedel-execution-program (getenv "MEVEDEL_EXEC_PROGRAM"))

(defvar mevedel-tui--artifacts (getenv "MEVEDEL_TUI_ARTIFACTS")
  "Where the artifacts of this run go.")

(defun mevedel-tui--note (name text)
  "Write TEXT to the artifact file NAME."
  (when mevedel-tui--artifacts
    (with-temp-file (expand-file-name name mevedel-tui--artifacts)
      (insert text))))

(defun mevedel-tui--started (obs)
  "Report a background command that did not start, as OBS says."
  (when (plist-get obs :error)
    (message "mevedel-tui: start failed: %S" (plist-get obs :error))
    (mevedel-tui--note "driver-error.txt" (format "%S\n" (plist-get obs :error)))))

(defun mevedel-tui--start ()
  "Open the session, start the two commands and show their panel."
  (condition-case err
      (let ((session (mevedel-execution-open-session
                      "tui" (getenv "MEVEDEL_TUI_STATE") '(:graceMs 500))))
        (mevedel-execution-start-bash
         #'mevedel-tui--started :session session :label "ticker" :yield-time-ms 0
         :command "while :; do echo tick; sleep 0.2; done")
        (mevedel-execution-start-bash
         #'mevedel-tui--started :session session :label "sleeper" :yield-time-ms 0
         :command "sleep 300")
        (switch-to-buffer (mevedel-execution-panel session))
        (delete-other-windows))
    (error
     (mevedel-tui--note "driver-error.txt" (format "%S\n" err))
     (message "mevedel-tui: %s" (error-message-string err)))))

(defun mevedel-tui--save-stderr ()
  "Keep what the helper wrote to stderr, for the test to check."
  (let ((buffer (get-buffer mevedel-execution-stderr-buffer)))
    (mevedel-tui--note "helper-stderr.txt"
                       (if buffer (with-current-buffer buffer (buffer-string)) ""))))

(add-hook 'emacs-startup-hook #'mevedel-tui--start)
;; After the facade's own hook has shut the helper down.
(add-hook 'kill-emacs-hook #'mevedel-tui--save-stderr 90)

;;; panel-driver.el ends here

;;; person-driver.el --- A person's Emacs on a terminal  -*- lexical-binding: t; -*-

;;; Commentary:

;; Loaded by person.sh into `emacs -nw -Q' inside tmux, in a project
;; directory.  It only does what the README asks of a person: require
;; the core and say where the helper is.  Everything else the script
;; types, as a person would.  The person's sessions live in
;; $MEVEDEL_TUI_STATE; when Emacs exits, the helper's stderr is saved
;; next to the screen captures in $MEVEDEL_TUI_ARTIFACTS.

;;; Code:

(require 'mevedel-execution)

(setq mevedel-execution-program (getenv "MEVEDEL_EXEC_PROGRAM"))
(setq mevedel-execution-person-directory
      (file-name-as-directory (getenv "MEVEDEL_TUI_STATE")))

(defun mevedel-tui--save-stderr ()
  "Keep what the helper wrote to stderr, for the test to check."
  (let ((dir (getenv "MEVEDEL_TUI_ARTIFACTS"))
        (buffer (get-buffer mevedel-execution-stderr-buffer)))
    (when dir
      (with-temp-file (expand-file-name "helper-stderr.txt" dir)
        (when buffer (insert-buffer-substring buffer))))))

;; After the facade's own hook has shut the helper down.
(add-hook 'kill-emacs-hook #'mevedel-tui--save-stderr 90)

;;; person-driver.el ends here

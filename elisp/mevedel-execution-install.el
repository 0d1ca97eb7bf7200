;;; mevedel-execution-install.el --- Finding and building the mevedel-exec helper  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; Where the helper is (`mevedel-execution-program', else the build of
;; `mevedel-execution-install-helper') and what version it is.

;;; Code:

(require 'subr-x)
(require 'mevedel-execution-wire)

(defcustom mevedel-execution-install-directory
  (locate-user-emacs-file "mevedel-exec/")
  "Where `mevedel-execution-install-helper' puts the helper it builds."
  :type 'directory
  :group 'mevedel-execution)

(defconst mevedel-execution--source-file
  (or load-file-name (bound-and-true-p byte-compile-current-file) buffer-file-name)
  "Where this file was loaded from.
In a checkout, the helper's sources are above it.")

(defun mevedel-execution--source-directory ()
  "Return the helper's source tree (the directory holding go.mod), or nil."
  (when mevedel-execution--source-file
    (let ((dir (locate-dominating-file mevedel-execution--source-file "go.mod")))
      (and dir (expand-file-name dir)))))

(defun mevedel-execution--installed-program ()
  "Return the helper built by `mevedel-execution-install-helper'."
  (expand-file-name "mevedel-exec" mevedel-execution-install-directory))

(defun mevedel-execution-program-file ()
  "Return the helper's executable, or signal that it is missing."
  (let ((program mevedel-execution-program))
    (or (and (file-name-absolute-p program) (file-executable-p program) program)
        (and (not (file-name-absolute-p program)) (executable-find program))
        (let ((installed (mevedel-execution--installed-program)))
          (and (file-executable-p installed) installed))
        (signal 'mevedel-execution-helper-missing
                (list (format "%s is not on exec-path; M-x mevedel-execution-install-helper builds it"
                              program))))))

(defun mevedel-execution-program-version (program)
  "Return PROGRAM's own version (from its --version), or nil."
  (with-temp-buffer
    (when (eql 0 (ignore-errors (call-process program nil t nil "--version")))
      (goto-char (point-min))
      (and (looking-at "mevedel-exec \\([^ \n]+\\)") (match-string 1)))))

;;;; Installing the helper

;;;###autoload
(defun mevedel-execution-install-helper (&optional src-dir)
  "Build the helper with `go build' into `mevedel-execution-install-directory'.
SRC-DIR is the helper's source tree (default: the one this file
came from).  The build runs in the background."
  (interactive)
  (let* ((src (or src-dir (mevedel-execution--source-directory)
                  (user-error "No mevedel-exec source tree found above %s"
                              mevedel-execution--source-file)))
         (out (mevedel-execution--installed-program))
         (go (or (executable-find "go") (user-error "Go is not on exec-path")))
         (default-directory (file-name-as-directory src))
         (buffer (get-buffer-create "*mevedel-exec build*")))
    (make-directory (file-name-directory out) t)
    (with-current-buffer buffer (let ((inhibit-read-only t)) (erase-buffer)))
    (make-process
     :name "mevedel-exec-build"
     :buffer buffer
     :command (list go "build" "-o" out "./cmd/mevedel-exec")
     :noquery t
     :sentinel (lambda (proc _event)
                 (unless (process-live-p proc)
                   (if (zerop (process-exit-status proc))
                       (message "mevedel-exec: built %s" out)
                     (message "mevedel-exec: the build failed; see %s"
                              (buffer-name buffer))))))
    (message "mevedel-exec: building %s..." out)))

(provide 'mevedel-execution-install)
;;; mevedel-execution-install.el ends here

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

(require 'cl-lib)
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
  "Return the helper's executable, or signal that it is missing.
That is `mevedel-execution-program', else the helper
`mevedel-execution-install-helper' built."
  (let ((program mevedel-execution-program)
        (installed (mevedel-execution--installed-program)))
    (or (and (file-name-absolute-p program) (file-executable-p program) program)
        (and (not (file-name-absolute-p program)) (executable-find program))
        (and (file-executable-p installed) installed)
        (signal 'mevedel-execution-helper-missing
                (list (format "%s is not on exec-path and %s is not built; M-x mevedel-execution-install-helper builds it from its Go sources"
                              program (abbreviate-file-name installed)))))))

(defun mevedel-execution-program-version (program)
  "Return PROGRAM's own version (from its --version), or nil."
  (with-temp-buffer
    (when (eql 0 (ignore-errors (call-process program nil t nil "--version")))
      (goto-char (point-min))
      (and (looking-at "mevedel-exec \\([^ \n]+\\)") (match-string 1)))))

;;;; Installing the helper

(defcustom mevedel-execution-source-directory nil
  "The helper's Go sources, for `mevedel-execution-install-helper'.
nil means the checkout this package was loaded from, when it was
loaded from one (the directory above it that holds go.mod): a
package installed from a tarball has no sources, so set this to
the checkout it was built from."
  :type '(choice (const :tag "The checkout the package was loaded from" nil)
                 (directory :tag "Directory holding go.mod"))
  :group 'mevedel-execution)

(defconst mevedel-execution-install-buffer "*mevedel-exec build*"
  "The buffer showing the output of the last build of the helper.")

(defun mevedel-execution--go-requirement (src)
  "Return the Go version the go.mod of SRC asks for, as a string, or nil."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "go.mod" src))
    (and (re-search-forward "^go \\([0-9.]+\\)" nil t) (match-string 1))))

(defconst mevedel-execution--go-elsewhere '("/usr/local/go/bin/go")
  "Where Go's own installer puts the go command, which is often not on PATH.")

(defun mevedel-execution--go-program ()
  "Return the go command, or nil when Go is not installed."
  (or (executable-find "go")
      (cl-find-if #'file-executable-p mevedel-execution--go-elsewhere)))

(defun mevedel-execution--source-version (src)
  "Return the version a helper built from SRC should report.
In a git checkout that is what `git describe' says (as `make build'
uses it), else the package's version."
  (or (and (file-exists-p (expand-file-name ".git" src))
           (executable-find "git")
           (with-temp-buffer
             (let ((default-directory (file-name-as-directory src)))
               (and (eql 0 (call-process "git" nil t nil
                                         "describe" "--always" "--dirty"))
                    (string-trim (buffer-string))))))
      mevedel-execution-package-version))

(defun mevedel-execution--read-source-directory ()
  "Return the helper's sources: the option, the checkout, or the person's answer."
  (let ((src (or mevedel-execution-source-directory
                 (mevedel-execution--source-directory))))
    (cond
     (src (expand-file-name src))
     ((not noninteractive)
      (read-directory-name "mevedel-exec sources (the checkout holding go.mod): "))
     (t (user-error "No mevedel-exec sources found: set `mevedel-execution-source-directory' to the checkout (the directory holding go.mod)")))))

(defun mevedel-execution--after-install (out version interactive)
  "Tell what the build of OUT, VERSION, means for the helper in use.
A helper of another version that `mevedel-execution-program' finds
first, or one running now, is named with both versions; when
INTERACTIVE, the running one is replaced if the person agrees."
  (let* ((used (ignore-errors (mevedel-execution-program-file)))
         (used-version (and used (not (file-equal-p used out))
                            (mevedel-execution-program-version used)))
         (running (and (fboundp 'mevedel-execution-running-version)
                       (mevedel-execution-running-version))))
    (message "mevedel-exec: built %s, version %s" (abbreviate-file-name out) version)
    (when (and used-version (not (equal used-version version)))
      (message "mevedel-exec: `mevedel-execution-program' finds %s first, version %s, not the %s just built; set it to %s to use the new one"
               used used-version version out))
    (when (and running (not (equal running version)))
      (if (and interactive
               (y-or-n-p (format "The running helper is version %s, the one just built %s.  Replace it now? "
                                 running version)))
          (if (and (fboundp 'mevedel-execution-daemon-p) (mevedel-execution-daemon-p))
              (call-interactively 'mevedel-execution-restart-daemon)
            (call-interactively 'mevedel-execution-restart-helper))
        (message "mevedel-exec: the running helper is version %s, the one just built %s; M-x mevedel-execution-restart-helper replaces it"
                 running version)))))

;;;###autoload
(defun mevedel-execution-install-helper (&optional src-dir callback)
  "Build the mevedel-exec helper from its Go sources.
The build goes to `mevedel-execution-install-directory', where the
package finds it when `mevedel-execution-program' is not on the
variable `exec-path'.  SRC-DIR is the sources (default
`mevedel-execution-source-directory', else the checkout this
package was loaded from; interactively, asked when neither is
known).  Without Go, say which version to install.  The build runs
in the background, its output in `mevedel-execution-install-buffer';
once done, a helper of another version found first or running is
named with both versions, and interactively the running one is
replaced if you agree.  CALLBACK, when given, receives the built
program's file name, or nil when the build failed.  Return the
build process."
  (interactive)
  (let* ((src (file-name-as-directory
               (expand-file-name (or src-dir (mevedel-execution--read-source-directory)))))
         (_ (unless (file-exists-p (expand-file-name "cmd/mevedel-exec" src))
              (user-error "%s holds no mevedel-exec sources (no cmd/mevedel-exec)" src)))
         (go (or (mevedel-execution--go-program)
                 (user-error "Building the helper needs Go %s or later, which is not installed: install it and put `go' on PATH (or `exec-path'), or put a built mevedel-exec there"
                             (or (mevedel-execution--go-requirement src) "1.26"))))
         (out (mevedel-execution--installed-program))
         (tmp (concat out ".new"))
         (version (mevedel-execution--source-version src))
         (interactive (called-interactively-p 'any))
         (default-directory src)
         (buffer (get-buffer-create mevedel-execution-install-buffer)))
    (make-directory (file-name-directory out) t)
    (with-current-buffer buffer (let ((inhibit-read-only t)) (erase-buffer)))
    (message "mevedel-exec: building %s (version %s)..." (abbreviate-file-name out) version)
    (make-process
     :name "mevedel-exec-build"
     :buffer buffer
     :command (list go "build"
                    "-ldflags" (concat "-X github.com/mevedel/mevedel-exec/rpc.ServerVersion="
                                       version)
                    "-o" tmp "./cmd/mevedel-exec")
     :noquery t
     :sentinel
     (lambda (proc _event)
       (unless (process-live-p proc)
         (let ((ok (zerop (process-exit-status proc))))
           ;; Renamed into place: a helper running from OUT keeps its file.
           (if ok
               (progn (rename-file tmp out t)
                      (mevedel-execution--after-install out version interactive))
             (ignore-errors (delete-file tmp))
             (message "mevedel-exec: the build failed; see %s" (buffer-name buffer)))
           (when callback (funcall callback (and ok out)))))))))

(provide 'mevedel-execution-install)
;;; mevedel-execution-install.el ends here

;;; mevedel-execution-install-test.el --- A person installs the package and its helper  -*- lexical-binding: t; -*-

;;; Commentary:

;; What a person does on a fresh account, in a fresh `emacs --batch'
;; whose HOME is empty: `package-install-file' of the tarball that
;; scripts/package.el builds, `require', `mevedel-execution-install-helper'
;; from the checkout's Go sources, and a command run through the
;; installed package by the helper it built.  The README's `use-package'
;; snippet is read from the README and run as written.  Go's caches are
;; the machine's (the build needs no network), everything else is the
;; fresh HOME's.  Slow: it builds the helper.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun mevedel-execution-install-test--go-env (go)
  "The environment that gives GO the machine's caches under another HOME."
  (with-temp-buffer
    (should (eql 0 (call-process go nil t nil "env" "GOCACHE" "GOMODCACHE" "GOROOT")))
    (pcase-let ((`(,cache ,modcache ,goroot) (split-string (buffer-string) "\n" t)))
      (list (concat "GOCACHE=" cache) (concat "GOMODCACHE=" modcache)
            (concat "GOROOT=" goroot) "GOTOOLCHAIN=local" "GOPROXY=off" "GOFLAGS=-mod=mod"))))

(defun mevedel-execution-install-test--run-emacs (home script &rest args)
  "Run SCRIPT in a fresh batch Emacs with HOME; return (STATUS . OUTPUT).
ARGS go before SCRIPT on its command line."
  (let* ((go (or (executable-find "go") "/usr/local/go/bin/go"))
         (process-environment
          (append (list (concat "HOME=" home)
                        (concat "PATH=" (file-name-directory go) ":/usr/bin:/bin")
                        "MEVEDEL_EXEC_PROGRAM=")
                  (mevedel-execution-install-test--go-env go)
                  process-environment)))
    (with-temp-buffer
      (let ((status (apply #'call-process
                           (expand-file-name invocation-name invocation-directory)
                           nil t nil "--batch"
                           (append args
                                   ;; Its waits have no bound of their own:
                                   ;; this one ends it, and the test fails.
                                   (list "--eval" "(run-at-time 300 nil (lambda () (princ \"TIMEOUT\\n\") (kill-emacs 2)))"
                                         "-l" script)))))
        (cons status (buffer-string))))))

(defun mevedel-execution-install-test--result (output)
  "The plist SCRIPT printed last in OUTPUT after a RESULT: mark."
  (should (string-match "^RESULT: " output))
  (car (read-from-string output (match-end 0))))

(defconst mevedel-execution-install-test--run-command
  "(let* ((session (mevedel-execution-open-session
                  \"install-test\" (expand-file-name \"state\" (getenv \"HOME\"))))
         (obs nil))
    (mevedel-execution-start-bash (lambda (o) (setq obs o)) :session session
                                  :command \"echo run-through-the-installed-package\")
    (while (not obs) (accept-process-output nil 0.1))
    obs)"
  "A form that runs a command through the package and returns its Observation.")

(ert-deftest mevedel-execution-install-test-tarball-then-helper ()
  "A fresh HOME installs the tarball and the helper, and a command runs."
  :tags '(:slow)
  (let* ((root (make-temp-file "mevedel-install-" t))
         (home (expand-file-name "home/" root))
         (script (expand-file-name "install.el" root))
         (src mevedel-execution-test--root))
    (unwind-protect
        (progn
          (make-directory home)
          (with-temp-buffer
            (should (eql 0 (call-process (expand-file-name invocation-name invocation-directory)
                                         nil t nil "-Q" "--batch" "-l"
                                         (expand-file-name "scripts/package.el" src)
                                         (expand-file-name "dist" root)))))
          (with-temp-file script
            (insert
             (format "%S"
                     `(progn
                        (require 'package)
                        (package-initialize)
                        (package-install-file ,(expand-file-name "dist/mevedel-execution-0.1.0.tar" root))
                        (require 'mevedel-execution)
                        (let* ((missing (condition-case err (progn (mevedel-execution-program-file) nil)
                                          (mevedel-execution-helper-missing (error-message-string err))))
                               (built 'waiting)
                               (said nil))
                          (mevedel-execution-install-helper ,src (lambda (file) (setq built file)))
                          (while (eq built 'waiting) (accept-process-output nil 0.1))
                          (let ((obs ,(car (read-from-string mevedel-execution-install-test--run-command))))
                            ;; A helper of another version than the running one.
                            (cl-letf (((symbol-function 'message)
                                       (lambda (fmt &rest args) (push (apply #'format fmt args) said))))
                              (mevedel-execution--after-install built "0.0.0-other" nil))
                            (princ (format "RESULT: %S\n"
                                           (list :library (locate-library "mevedel-execution")
                                                 :missing missing
                                                 :built built
                                                 :running (mevedel-execution-running-version)
                                                 :output (plist-get obs :output)
                                                 :said said)))
                            (mevedel-execution-teardown-all)))))))
          (pcase-let* ((`(,status . ,output)
                        (mevedel-execution-install-test--run-emacs home script "-Q"))
                       (result (progn (unless (eql status 0) (message "%s" output))
                                      (should (eql status 0))
                                      (mevedel-execution-install-test--result output))))
            ;; Loaded from the fresh HOME's packages, not the checkout.
            (should (string-prefix-p (expand-file-name ".emacs.d/elpa/mevedel-execution-0.1.0/" home)
                                     (plist-get result :library)))
            ;; Before the build: the error says what to do.
            (should (string-match-p "M-x mevedel-execution-install-helper" (plist-get result :missing)))
            (should (equal (plist-get result :built)
                           (expand-file-name ".emacs.d/mevedel-exec/mevedel-exec" home)))
            (should (equal (plist-get result :output) "run-through-the-installed-package\n"))
            ;; The helper reports the checkout's version, as `make build' does.
            (should (equal (plist-get result :running)
                           (string-trim (shell-command-to-string
                                         (format "git -C %s describe --always --dirty"
                                                 (shell-quote-argument src))))))
            (should (cl-find-if (lambda (line)
                                  (and (string-match-p (regexp-quote (plist-get result :running)) line)
                                       (string-match-p "0\\.0\\.0-other" line)))
                                (plist-get result :said)))))
      (delete-directory root t))))

(ert-deftest mevedel-execution-install-test-version-is-the-header ()
  "The version the package tells the helper is its main file's header."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "elisp/mevedel-execution.el"
                                            mevedel-execution-test--root))
    (should (re-search-forward "^;; Version: \\(.*\\)$" nil t))
    (should (equal (match-string 1) mevedel-execution-package-version))))

(ert-deftest mevedel-execution-install-test-without-go-says-what-to-install ()
  "Without Go, install-helper says which version to install, and builds nothing."
  (let ((exec-path nil)
        (mevedel-execution--go-elsewhere nil)
        (mevedel-execution-install-directory (make-temp-file "mevedel-install-" t)))
    (unwind-protect
        (let ((err (should-error (mevedel-execution-install-helper mevedel-execution-test--root)
                                 :type 'user-error)))
          (should (string-match-p "needs Go 1\\.26[.0-9]* or later, which is not installed"
                                  (cadr err)))
          (should-not (directory-files mevedel-execution-install-directory nil "mevedel-exec")))
      (delete-directory mevedel-execution-install-directory t))))

;; The README's snippet, run as written but for the checkout's place.

(defun mevedel-execution-install-test--readme-snippet ()
  "The README's `use-package' snippet, as text."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "README.md" mevedel-execution-test--root))
    (should (re-search-forward "^ *```elisp\n\\( *(use-package mevedel-execution\n\\(?:.*\n\\)*?\\) *```" nil t))
    (match-string 1)))

(ert-deftest mevedel-execution-install-test-use-package-snippet ()
  "The README's use-package snippet loads the package, sets its options, runs a command."
  :tags '(:slow)
  (let* ((root (make-temp-file "mevedel-use-package-" t))
         (home (expand-file-name "home/" root))
         (snippet (mevedel-execution-install-test--readme-snippet))
         (checkout (directory-file-name mevedel-execution-test--root))
         (script (expand-file-name "init.el" root)))
    (unwind-protect
        (progn
          (make-directory home)
          (should (string-match-p "~/src/mevedel-exec" snippet))
          (with-temp-file script
            ;; What the README asks first on Emacs 28; built in from 29.
            (insert "(require 'use-package)\n")
            (insert (replace-regexp-in-string "~/src/mevedel-exec" checkout snippet t t))
            (insert
             (format "\n%S\n"
                     `(progn
                        ;; Loaded by the command, not by the snippet.
                        (princ (format "LOADED-BEFORE: %S\n" (featurep 'mevedel-execution)))
                        (setq mevedel-execution-program ,mevedel-execution-test--program)
                        (let* ((default-directory (file-name-as-directory (getenv "HOME")))
                               (buffer (mevedel-execution-shell-command "echo via-use-$((1+1))")))
                          (while (not (with-current-buffer buffer
                                        (save-excursion
                                          (goto-char (point-min))
                                          (search-forward "via-use-2\n" nil t))))
                            (accept-process-output nil 0.1))
                          (princ (format "RESULT: %S\n"
                                         (list :connection mevedel-execution-connection
                                               :source mevedel-execution-source-directory
                                               :library (locate-library "mevedel-execution"))))
                          (mevedel-execution-teardown-all))))))
          ;; Not -Q: a person's Emacs, whose site files make use-package
          ;; available on Emacs 28 (Debian's elpa-use-package).
          (pcase-let* ((`(,status . ,output)
                        (mevedel-execution-install-test--run-emacs home script))
                       (result (progn (unless (eql status 0) (message "%s" output))
                                      (should (eql status 0))
                                      (mevedel-execution-install-test--result output))))
            (should (string-match-p "^LOADED-BEFORE: nil$" output))
            (should (eq (plist-get result :connection) 'child))
            (should (equal (plist-get result :source) checkout))
            (should (string-prefix-p (expand-file-name "elisp/" checkout)
                                     (plist-get result :library)))))
      (delete-directory root t))))

(provide 'mevedel-execution-install-test)
;;; mevedel-execution-install-test.el ends here

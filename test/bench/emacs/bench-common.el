;;; bench-common.el --- Helpers shared by the Emacs benchmarks  -*- lexical-binding: t; -*-

;;; Commentary:

;; Loaded by ack.el and heartbeat.el in this directory, which see.

;;; Code:

(require 'cl-lib)

(defconst bench-common-root
  (file-name-as-directory
   (expand-file-name "../../.."
                     (file-name-directory
                      (or load-file-name
                          (bound-and-true-p byte-compile-current-file)
                          buffer-file-name))))
  "The repository's root.")

(defun bench-common-say (fmt &rest args)
  "Print FMT with ARGS and a newline on standard output."
  (princ (concat (apply #'format fmt args) "\n")))

(defun bench-common-percentile (values p)
  "Return the nearest-rank P-th percentile (0 < P <= 100) of VALUES."
  (let* ((sorted (sort (copy-sequence values) #'<))
         (n (length sorted)))
    (when (> n 0)
      (nth (max 0 (1- (ceiling (* n (/ p 100.0))))) sorted))))

(defun bench-common-helper-process (program)
  "Return the live process running PROGRAM, the helper."
  (or (cl-find-if (lambda (p)
                    (and (process-live-p p)
                         (equal (car-safe (process-command p)) program)))
                  (process-list))
      (error "No live helper process")))

(declare-function comp-async-runnings "comp")
(defvar comp-files-queue)

(defun bench-common-no-native-compilation ()
  "Compile nothing to native code from now on, and wait for what started.
An Emacs with native compilation compiles each library it loads that
has none yet, in Emacs processes of its own; with a fresh HOME, that
is every library but the preloaded ones.  The terminal's own library
is loaded before any option takes effect: its compilation, about a
second of CPU, would run beside the first measurements."
  (when (boundp 'native-comp-deferred-compilation)
    (setq native-comp-deferred-compilation nil))
  ;; What is queued and not started stays byte code.
  (when (boundp 'comp-files-queue)
    (setq comp-files-queue nil))
  (when (fboundp 'comp-async-runnings)
    (let ((deadline (+ (float-time) 120)))
      (while (and (> (comp-async-runnings) 0) (< (float-time) deadline))
        (accept-process-output nil 0.05)))))

(defun bench-common-use-compiled-facade ()
  "Put the facade byte-compiled, as a package install leaves it, first on `load-path'.
It is copied to a temporary directory and compiled there by another
Emacs (compiling here would load the sources it requires
uncompiled).  Call it before requiring the facade."
  (let ((src (expand-file-name "elisp" bench-common-root))
        (dir (make-temp-file "bench-elc-" t)))
    (add-hook 'kill-emacs-hook (lambda () (delete-directory dir t)))
    (bench-common-no-native-compilation)
    (dolist (file (directory-files src t "\\`mevedel-execution.*\\.el\\'"))
      (copy-file file (expand-file-name (file-name-nondirectory file) dir)))
    (unless (eql 0 (apply #'call-process (expand-file-name invocation-name invocation-directory)
                          nil nil nil "--batch" "-Q" "-L" dir "-f" "batch-byte-compile"
                          (directory-files dir t "\\.el\\'")))
      (error "The facade did not compile"))
    (push dir load-path)))

(provide 'bench-common)

;;; bench-common.el ends here

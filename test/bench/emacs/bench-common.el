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

(provide 'bench-common)

;;; bench-common.el ends here

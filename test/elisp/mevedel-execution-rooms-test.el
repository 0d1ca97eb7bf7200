;;; mevedel-execution-rooms-test.el --- Each file keeps its private names  -*- lexical-binding: t; -*-

;;; Commentary:

;; The package is cut into files by concern, none much over 800 lines.
;; A file's private names (a `--' in them) are its own: another file
;; that needs one uses the owner's public API instead.  This reads the sources as data, so it
;; needs no helper.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'subr-x)

(defconst mevedel-execution-rooms-test--dir
  (expand-file-name "../../elisp/"
                    (file-name-directory (or load-file-name buffer-file-name)))
  "The package's source directory.")

(defun mevedel-execution-rooms-test--files ()
  "The package's source files."
  (directory-files mevedel-execution-rooms-test--dir t "\\`mevedel-execution.*\\.el\\'"))

(defun mevedel-execution-rooms-test--forms (file)
  "The top-level forms of FILE."
  (with-temp-buffer
    (insert-file-contents file)
    (let (forms)
      (condition-case nil
          (while t (push (read (current-buffer)) forms))
        (end-of-file nil))
      (nreverse forms))))

(defun mevedel-execution-rooms-test--private-p (symbol)
  "Non-nil if SYMBOL is a private name of the package."
  (and (symbolp symbol)
       (string-match-p "\\`mevedel-execution[a-z-]*?--" (symbol-name symbol))))

(defun mevedel-execution-rooms-test--defined (file)
  "The private names FILE defines; a struct's name stands for its accessors."
  (let (names)
    (dolist (form (mevedel-execution-rooms-test--forms file))
      (when (consp form)
        (pcase form
          (`(,(or 'defun 'defmacro 'defvar 'defvar-local 'defconst 'defcustom
                  'cl-defun 'cl-defmacro 'defsubst 'cl-defgeneric)
             ,name . ,_)
           (when (mevedel-execution-rooms-test--private-p name) (push name names)))
          (`(cl-defstruct (,name . ,options) . ,_)
           (when (mevedel-execution-rooms-test--private-p name) (push name names))
           (dolist (opt options)
             (when (and (consp opt) (eq (car opt) :constructor)
                        (mevedel-execution-rooms-test--private-p (cadr opt)))
               (push (cadr opt) names)))))))
    names))

(ert-deftest mevedel-execution-rooms-test-private-names-stay-home ()
  "No file uses a private name another file defines."
  (let* ((files (mevedel-execution-rooms-test--files))
         (owners (make-hash-table :test #'equal))
         (crossings nil))
    (should (> (length files) 5))
    (dolist (file files)
      (dolist (name (mevedel-execution-rooms-test--defined file))
        (puthash (symbol-name name) (file-name-nondirectory file) owners)))
    (should (> (hash-table-count owners) 50))
    (dolist (file files)
      (with-temp-buffer
        (insert-file-contents file)
        (goto-char (point-min))
        (while (re-search-forward "mevedel-execution[a-z-]*?--[a-z0-9-]+" nil t)
          (let* ((used (match-string 0))
                 ;; A struct accessor's name begins with the struct's.
                 (owner (or (gethash used owners)
                            (cl-loop for name being the hash-keys of owners
                                     using (hash-values home)
                                     when (string-prefix-p (concat name "-") used)
                                     return home))))
            (when (and owner (not (equal owner (file-name-nondirectory file))))
              (cl-pushnew (format "%s uses %s of %s"
                                  (file-name-nondirectory file) used owner)
                          crossings :test #'equal))))))
    (should (equal crossings nil))))

(ert-deftest mevedel-execution-rooms-test-files-stay-small ()
  "No file of the package is much over 800 lines."
  (let (long)
    (dolist (file (mevedel-execution-rooms-test--files))
      (with-temp-buffer
        (insert-file-contents file)
        (when (> (count-lines (point-min) (point-max)) 850)
          (push (file-name-nondirectory file) long))))
    (should (equal long nil))))

(provide 'mevedel-execution-rooms-test)
;;; mevedel-execution-rooms-test.el ends here

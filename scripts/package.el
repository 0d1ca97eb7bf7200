;;; package.el --- Build the package's tarball for package-install-file  -*- lexical-binding: t; -*-

;;; Commentary:

;; emacs -Q --batch -l scripts/package.el [DIR] writes
;; DIR/mevedel-execution-VERSION.tar (DIR defaults to dist/): the
;; files of elisp/ and a -pkg.el made from the main file's headers, as
;; `package-install-file' takes it.  `eask package' builds the same
;; with package-build, which only a package archive provides; this
;; uses Emacs's own package.el.

;;; Code:

(require 'package)

(let* ((root (file-name-directory
              (directory-file-name (file-name-directory load-file-name))))
       (lisp (expand-file-name "elisp/" root))
       (out-dir (file-name-as-directory
                 (expand-file-name (or (pop command-line-args-left) "dist") root)))
       (desc (with-temp-buffer
               (insert-file-contents (expand-file-name "mevedel-execution.el" lisp))
               (package-buffer-info)))
       (name (package-desc-full-name desc))
       (stage (make-temp-file "mevedel-package" t))
       (dir (expand-file-name name stage))
       (tar (expand-file-name (concat name ".tar") out-dir)))
  (unwind-protect
      (progn
        (make-directory dir)
        (dolist (file (directory-files lisp t "\\`mevedel-execution.*\\.el\\'"))
          (copy-file file (expand-file-name (file-name-nondirectory file) dir)))
        (package-generate-description-file
         desc (expand-file-name (format "%s-pkg.el" (package-desc-name desc)) dir))
        (make-directory out-dir t)
        (unless (eql 0 (call-process "tar" nil nil nil "-cf" tar "-C" stage name))
          (error "Tar failed for %s" tar))
        (message "%s" tar))
    (delete-directory stage t)))

;;; package.el ends here

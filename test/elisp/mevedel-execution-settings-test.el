;;; mevedel-execution-settings-test.el --- Options set before loading hold  -*- lexical-binding: t; -*-

;;; Commentary:

;; A person sets options in init.el before the package loads, with
;; `setq' or `custom-set-variables'.  Every option of every file must keep
;; that value once the files load: no class, function or face may share
;; an option's name and reset it.  Each check runs a fresh `emacs -Q
;; --batch', as an init file would.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'cus-edit)
(require 'wid-edit)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'mevedel-execution-spool)
(require 'mevedel-execution-transcript)
(require 'mevedel-execution-panel)
(require 'mevedel-execution-person)

(defconst mevedel-execution-settings-test--features
  '(mevedel-execution mevedel-execution-spool mevedel-execution-transcript
    mevedel-execution-panel mevedel-execution-person)
  "Every file of the package, as a feature.")

(defun mevedel-execution-settings-test--other (type default)
  "A list of one value of custom TYPE other than DEFAULT, or nil if none."
  (pcase type
    ('boolean (list (not default)))
    ((or 'natnum 'integer 'number) (list (+ (if (numberp default) default 0) 7)))
    ((or 'string 'file) (list "mevedel-settings-test"))
    ('directory (list "/tmp/mevedel-settings-test/"))
    (`(repeat string) (list '("mevedel" "settings")))
    ;; A simple type with keyword arguments: (directory :tag "...").
    (`(,(and simple (pred symbolp)) ,(pred keywordp) . ,_)
     (mevedel-execution-settings-test--other simple default))
    (`(choice . ,alternatives)
     (cl-loop for alt in alternatives
              for other = (pcase alt
                            (`(const . ,rest)
                             (let ((value (car (last rest))))
                               (unless (equal value default) (list value))))
                            (_ (mevedel-execution-settings-test--other alt default)))
              when other return other))))

(defun mevedel-execution-settings-test--options ()
  "Every option of the package with a value other than its default."
  (let (out)
    (mapatoms
     (lambda (sym)
       (when (and (get sym 'custom-type)
                  (string-prefix-p "mevedel-execution" (symbol-name sym)))
         (let ((other (mevedel-execution-settings-test--other
                       (get sym 'custom-type)
                       (eval (car (get sym 'standard-value)) t))))
           (should other)
           (push (cons sym (car other)) out)))))
    (sort out (lambda (a b) (string< (car a) (car b))))))

(defun mevedel-execution-settings-test--run (set-form options)
  "Load the package in a fresh Emacs after SET-FORM; OPTIONS' values then."
  (let ((script
         `(progn
            ,set-form
            (dolist (f ',mevedel-execution-settings-test--features)
              (require f))
            (prin1 (mapcar (lambda (s) (cons s (symbol-value s)))
                           ',(mapcar #'car options))))))
    (with-temp-buffer
      (let ((status (call-process
                     (expand-file-name invocation-name invocation-directory)
                     nil t nil "-Q" "--batch"
                     "-L" (expand-file-name "elisp" mevedel-execution-test--root)
                     "--eval" (prin1-to-string script))))
        (unless (eql status 0)
          (ert-fail (list "emacs failed" status (buffer-string))))
        (goto-char (point-max))
        (backward-sexp)
        (read (current-buffer))))))

(ert-deftest mevedel-execution-settings-test-values-survive-loading ()
  "Every option set before loading, by setq or customize, keeps its value."
  (let ((options (mevedel-execution-settings-test--options)))
    ;; The package's options, all of them: a new one is covered too.
    (should (>= (length options) 18))
    (should (assq 'mevedel-execution-connection options))
    (dolist (set-form
             (list `(setq ,@(cl-loop for (sym . value) in options
                                     append (list sym (list 'quote value))))
                   `(custom-set-variables
                     ,@(cl-loop for (sym . value) in options
                                collect (list 'quote (list sym (list 'quote value)))))))
      (should (equal (mevedel-execution-settings-test--run set-form options)
                     options)))))

(ert-deftest mevedel-execution-settings-test-one-customize-group ()
  "Every option is in `customize-group' mevedel-execution, editable there.
Its type's widget takes the default value, and the group's buffer
shows every option."
  (let ((members (mapcar #'car (get 'mevedel-execution 'custom-group)))
        (options nil))
    (mapatoms (lambda (sym)
                (when (and (custom-variable-p sym)
                           (string-prefix-p "mevedel-execution" (symbol-name sym)))
                  (push sym options))))
    (should (> (length options) 15))
    (dolist (sym options)
      (should (memq sym members))
      (should (widget-apply (widget-convert (get sym 'custom-type)) :match (default-value sym))))
    (save-window-excursion
      (customize-group 'mevedel-execution)
      (unwind-protect
          (dolist (sym options)
            (should (save-excursion
                      (goto-char (point-min))
                      (re-search-forward
                       (concat "^Show Value " (regexp-quote (custom-unlispify-tag-name sym)) " *$")
                       nil t))))
        (kill-buffer)))))

(ert-deftest mevedel-execution-settings-test-commands-say-what-they-do ()
  "C-h f of every command: one line saying what it does, then details."
  (let ((commands nil))
    (mapatoms (lambda (sym)
                (when (and (commandp sym)
                           (string-prefix-p "mevedel-execution" (symbol-name sym))
                           ;; Not a menu: `easy-menu-define' makes a command too.
                           (not (and (boundp sym) (keymapp (symbol-value sym)))))
                  (push sym commands))))
    (should (> (length commands) 30))
    (dolist (sym commands)
      (let* ((doc (documentation sym))
             (lines (split-string doc "\n")))
        (should (string-match-p "\\`[A-Z].*[.)]\\'" (car lines)))
        (should (<= (length (car lines)) 80))
        (should (cl-some (lambda (l) (not (string-blank-p l))) (cdr lines)))))))

(provide 'mevedel-execution-settings-test)
;;; mevedel-execution-settings-test.el ends here

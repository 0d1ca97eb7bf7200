;;; mevedel-execution-sandbox-test.el --- Confinement arguments  -*- lexical-binding: t; -*-

;;; Commentary:

;; The client's confinement arguments (writable-roots, read-paths,
;; additional-permissions, sandbox-permissions) as the sandbox object
;; the helper gets, and what a confined command can and cannot do,
;; against the real helper.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest mevedel-execution-sandbox-test-mapping ()
  "The client's arguments become the wire policy."
  (let ((mevedel-execution-sandbox-mode 'best-effort))
    ;; None given: the session's default applies.
    (should-not (mevedel-execution-sandbox-params nil nil nil))
    (should (equal (mevedel-execution-sandbox-params '("/w") nil nil)
                   '(:mode "best-effort" :writableRoots ["/w"])))
    (should (equal (mevedel-execution-sandbox-params '("/w") nil "use_default" '("/r"))
                   '(:mode "best-effort" :writableRoots ["/w"] :readOnlyPaths ["/r"])))
    (should (equal (mevedel-execution-sandbox-params '("/w") nil 'require_escalated)
                   '(:mode "off" :writableRoots ["/w"])))
    (should (equal (mevedel-execution-sandbox-params
                    nil '(:network t :file-system ((:path "/x" :access write)
                                                   (:path "/y" :access read)
                                                   (:path "/z" :access none)))
                    "with_additional_permissions")
                   '(:mode "best-effort" :writableRoots ["/x"] :readOnlyPaths ["/y"]
                           :inaccessiblePaths ["/z"] :network "allow")))
    (should (equal (plist-get (mevedel-execution-sandbox-params nil '(:network nil) nil) :network)
                   "deny"))
    (let ((mevedel-execution-sandbox-mode 'required))
      (should (equal (plist-get (mevedel-execution-sandbox-params '("/w") nil nil) :mode) "required")))
    (should-error (mevedel-execution-sandbox-params nil nil "sometimes")
                  :type 'wrong-type-argument)
    (should-error (mevedel-execution-sandbox-params nil '(:file-system ((:path "/x" :access all))) nil)
                  :type 'wrong-type-argument)))

(ert-deftest mevedel-execution-sandbox-test-confined-bash ()
  "A confined command writes in its roots only; the facts say why."
  (mevedel-execution-test--with-helper session
    (let* ((mevedel-execution-sandbox-mode 'required)
           (work (make-temp-file "mevedel-sandbox-work" t))
           (outside (make-temp-file "mevedel-sandbox-out" t))
           (obs (mevedel-execution-test--start
                 session (format "echo in > in.txt; echo out > %s/out.txt" outside)
                 :workdir work :writable-roots (list work) :yield-time-ms nil))
           (facts (plist-get obs :facts)))
      (unwind-protect
          (progn
            (should (file-exists-p (expand-file-name "in.txt" work)))
            (should-not (file-exists-p (expand-file-name "out.txt" outside)))
            (should (equal (plist-get (plist-get facts :sandbox) :backend) "bubblewrap"))
            (should (member (list :path (expand-file-name "out.txt" outside) :operation "write")
                            (plist-get facts :sandbox-denials)))
            ;; Escalated: unconfined, and the facts say there is no sandbox.
            (let* ((obs (mevedel-execution-test--start
                         session (format "echo out > %s/out.txt" outside)
                         :workdir work :writable-roots (list work)
                         :sandbox-permissions "require_escalated" :yield-time-ms nil))
                   (box (plist-get (plist-get obs :facts) :sandbox)))
              (should (equal (plist-get box :backend) "none"))
              (should (file-exists-p (expand-file-name "out.txt" outside)))))
        (delete-directory work t)
        (delete-directory outside t)))))

(ert-deftest mevedel-execution-sandbox-test-helper-read-paths ()
  "A helper program writes in its scratch directory, not in its read paths."
  (mevedel-execution-test--with-helper session
    (let* ((mevedel-execution-sandbox-mode 'required)
           (ro (make-temp-file "mevedel-sandbox-ro" t))
           (r (mevedel-execution-run-helper
               "confined" (list "sh" "-c" (format "echo s > made; echo x > %s/no; ls" ro))
               (list ro) nil :timeout 30 :session session)))
      (unwind-protect
          (progn
            (should (equal (plist-get r :output)
                           (format "sh: 1: cannot create %s/no: Read-only file system\nmade\n" ro)))
            (should-not (file-exists-p (expand-file-name "no" ro)))
            (should (member ro (plist-get (plist-get (plist-get (plist-get r :facts) :sandbox)
                                                     :policy)
                                          :read-only-paths))))
        (delete-directory ro t)))))

(provide 'mevedel-execution-sandbox-test)
;;; mevedel-execution-sandbox-test.el ends here

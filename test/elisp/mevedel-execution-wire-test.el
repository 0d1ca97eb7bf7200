;;; mevedel-execution-wire-test.el --- The Elisp names against the Go ones  -*- lexical-binding: t; -*-

;;; Commentary:

;; test/golden/wire.json is written by the Go test rpc/wire_golden_test.go
;; from the Go code: the root owner, each method's parameter keys, the
;; notifications and their payload keys, and how the helper words a set
;; of breadcrumbs and notices.  These tests check the facade against it,
;; so a change on the Go side alone (after `go test ./rpc -run Golden
;; -update') fails here, and a change on the Elisp side alone fails here
;; too.  Notification dispatch, which is keyed by the same names, is
;; tested here as well.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'mevedel-execution-test-support
         (expand-file-name "mevedel-execution-test-support.el"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'json)
(require 'mevedel-execution-transcript)

(defconst mevedel-execution-wire-test--golden
  (expand-file-name "test/golden/wire.json" mevedel-execution-test--root)
  "The golden file the Go tests write.")

(defun mevedel-execution-wire-test--doc ()
  "Return the golden file, objects as hash tables, arrays as lists."
  (with-temp-buffer
    (insert-file-contents mevedel-execution-wire-test--golden)
    (json-parse-buffer :object-type 'hash-table :array-type 'list
                       :null-object nil :false-object nil)))

(defun mevedel-execution-wire-test--get (table &rest keys)
  "Return the value at KEYS, one after the other, in the hash TABLE."
  (dolist (key keys table)
    (setq table (and table (gethash key table)))))

(defun mevedel-execution-wire-test--wire-plist (table)
  "Return the hash TABLE as the facade gets an object: a wire plist."
  (let (out)
    (maphash (lambda (k v) (push (intern (concat ":" k)) out) (push v out)) table)
    (nreverse out)))

(defun mevedel-execution-wire-test--keyword (name)
  "Return the keyword for the wire key NAME, a string."
  (intern (concat ":" name)))

(ert-deftest mevedel-execution-wire-test-root-owner ()
  "The facade's root owner is the helper's."
  (should (equal mevedel-execution-root-owner
                 (gethash "rootOwner" (mevedel-execution-wire-test--doc)))))

(defconst mevedel-execution-wire-test--coming
  '(exec/forward)
  "Methods the facade sends that the helper of this tree may not serve yet.
exec/forward comes with the helper's waiting and listening facts;
once the golden file names it, its keys are checked like any other.")

(ert-deftest mevedel-execution-wire-test-methods-and-keys ()
  "Every method the facade sends exists, with keys the helper accepts."
  (let ((methods (gethash "methods" (mevedel-execution-wire-test--doc))))
    (should (> (hash-table-count methods) 0))
    (dolist (entry (cl-remove-if (lambda (entry)
                                   (and (memq (car entry) mevedel-execution-wire-test--coming)
                                        (not (gethash (symbol-name (car entry)) methods))))
                                 mevedel-execution-wire-params))
      (let* ((method (symbol-name (car entry)))
             (shape (gethash method methods)))
        (should (equal (list method (and shape t)) (list method t)))
        (dolist (key (cdr entry))
          (let ((wire (substring (symbol-name (mevedel-execution-wire-key key)) 1)))
            (should (equal (list method key wire
                                 (and (member wire (gethash "keys" shape)) t))
                           (list method key wire t)))))))))

(ert-deftest mevedel-execution-wire-test-growth-in-order ()
  "A `grown' entry is read in the order of the helper's array.
Its execution id first, then each counter under the facts' own name."
  (let ((fields (mevedel-execution-wire-test--get
                 (mevedel-execution-wire-test--doc) "arrays" "exec/changed.grown")))
    (should (equal (car fields) "executionId"))
    (should (equal (mapcar (lambda (name)
                             (mevedel-execution-lisp-key (mevedel-execution-wire-test--keyword name)))
                           (cdr fields))
                   mevedel-execution--growth-keys))))

(ert-deftest mevedel-execution-wire-test-keys-round-trip ()
  "Every key of the helper becomes a Lisp key and back unchanged.
So what comes in (normalized once) and what goes out (derived from
Lisp keys) both match Go's spelling."
  (let ((doc (mevedel-execution-wire-test--doc))
        (seen 0))
    (dolist (group '("methods" "notifications"))
      (maphash
       (lambda (_name shape)
         (let ((keys (gethash "keys" shape)))
           (maphash (lambda (_path sub) (setq keys (append keys sub)))
                    (or (gethash "objects" shape) (make-hash-table)))
           (dolist (name keys)
             (let ((key (mevedel-execution-wire-test--keyword name)))
               (cl-incf seen)
               (should (eq (mevedel-execution-wire-key (mevedel-execution-lisp-key key))
                           key))))))
       (gethash group doc)))
    (should (> seen 50))))

(ert-deftest mevedel-execution-wire-test-notifications-handled ()
  "Each notification of the helper has a method; an unknown one warns once."
  (let ((mevedel-execution--unknown-notifications nil)
        (mevedel-execution-event-functions nil)
        (mevedel-execution-wake-functions nil)
        (mevedel-execution-mailbox-delivery-function nil)
        (notifications (gethash "notifications" (mevedel-execution-wire-test--doc))))
    (should (> (hash-table-count notifications) 0))
    (maphash (lambda (name _shape)
               (mevedel-execution-handle-notification nil (intern name) nil))
             notifications)
    (should-not mevedel-execution--unknown-notifications)
    ;; One the facade does not know: dispatched through the queue, as
    ;; from the helper, twice.  It is reported once and dropped.
    (let ((warnings (get-buffer-create "*Warnings*")))
      (with-current-buffer warnings
        (let ((inhibit-read-only t)) (erase-buffer)))
      (dotimes (_ 2)
        (mevedel-execution--dispatch-notification nil 'exec/brand-new (list :sessionId "s"))
        (mevedel-execution-drain))
      (should (equal mevedel-execution--unknown-notifications '(exec/brand-new)))
      (with-current-buffer warnings
        (should (= 1 (how-many "notification exec/brand-new" (point-min) (point-max))))))))

(ert-deftest mevedel-execution-wire-test-breadcrumb-wording ()
  "The facade words every breadcrumb case as the helper does."
  (let ((cases (gethash "breadcrumbs" (mevedel-execution-wire-test--doc))))
    (should (> (length cases) 10))
    (dolist (c cases)
      (let ((label (gethash "label" c))
            (command (gethash "command" c))
            (status (gethash "status" c))
            (exit-code (gethash "exitCode" c))
            (signal (gethash "signal" c))
            (text (gethash "text" c)))
        (should (equal (list c (mevedel-execution-transcript-breadcrumb-text
                                label command status exit-code signal))
                       (list c text)))
        ;; A record without the helper's text renders the same line.
        (should (equal (list c (substring-no-properties
                                (mevedel-execution-transcript-render
                                 (list :type "breadcrumb" :label label :status status
                                       :exit-code exit-code :signal signal
                                       :facts (list :command command)))))
                       (list c text)))))))

(ert-deftest mevedel-execution-wire-test-notice-wording ()
  "The facade words every notice case as the helper does."
  (let ((cases (gethash "notices" (mevedel-execution-wire-test--doc))))
    (should (> (length cases) 5))
    (dolist (c cases)
      (let ((attrs (mevedel-execution-normalize
                    (mevedel-execution-wire-test--wire-plist (gethash "attrs" c))))
            (text (gethash "text" c)))
        (should (equal (list attrs (mevedel-execution-transcript-notice-text attrs))
                       (list attrs text)))
        (should (equal (list attrs (substring-no-properties
                                    (mevedel-execution-transcript-render
                                     (list :type "notice" :attrs attrs))))
                       (list attrs text)))))))

(provide 'mevedel-execution-wire-test)
;;; mevedel-execution-wire-test.el ends here

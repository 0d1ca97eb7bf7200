;;; mevedel-execution-wire.el --- The protocol's names and values for mevedel-exec  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; The base of the package: the customization group every option
;; belongs to, the error symbols, and the protocol's names written once
;; on this side (the root owner, each method's parameter keys) with the
;; conversion of values to and from the wire.  test/golden/wire.json,
;; which the Go tests write, lets the ERT suite check these names
;; against the helper's.

;;; Code:

(require 'parse-time)
(require 'subr-x)

;;;; Customization

(defgroup mevedel-execution nil
  "Run shell commands through the mevedel-exec helper."
  :group 'tools
  :prefix "mevedel-execution-")


;;;; Errors

(define-error 'mevedel-execution-error "mevedel-exec error")
(define-error 'mevedel-execution-helper-missing
  "The mevedel-exec helper is not installed" 'mevedel-execution-error)
(define-error 'mevedel-execution-helper-error
  "The mevedel-exec helper answered with an error" 'mevedel-execution-error)

;; The protocol's names are written once per language: the root owner
;; here as in Go's `execution.RootOwner', and each method's parameters
;; in `mevedel-execution-wire-params'.  test/golden/wire.json, which the
;; Go tests write, lets the ERT suite check both against the helper.

(defconst mevedel-execution-package-version "0.1.0"
  "The version of this package, as its main file's header says.")

(defconst mevedel-execution-protocol-version 1
  "The version of the helper's wire protocol this package speaks.")

(defconst mevedel-execution-root-owner "/root"
  "The agent's top-level owner: the owner of a request that names none.")

;;;; Wire values

(defconst mevedel-execution-wire-params
  '((initialize :client-name :client-version :protocol-version)
    (shutdown)
    ($/cancelRequest :id)
    (session/open :session-id :state-dir :limits :role :target)
    (session/close :session-id)
    (session/unknownOutcome :session-id)
    (session/acknowledgeUnknown :session-id)
    (exec/start :session-id :owner :command :argv :stdin :cwd :yield-ms
                :timeout-ms :tty :lane :read-only :scratch :kind :env :label
                :tool-use-id :max-output-chars :ready-pattern :ready-port
                :sandbox :resources :follow :deliver)
    (exec/observe :session-id :owner :as :execution-id :chars :wait-ms
                  :max-output-chars)
    (exec/stop :session-id :owner :as :execution-id)
    (exec/interrupt :session-id :as :execution-id)
    (exec/list :session-id :owner :as :all)
    (exec/stopAll :session-id :owner :as)
    (exec/forward :session-id :execution-id :port)
    (exec/follow :session-id :owner :as :execution-id :follow :output)
    (spool/read :session-id :owner :as :address :offset :length :line :lines)
    (spool/grep :session-id :owner :as :pattern :glob :addresses :max-matches
                :context)
    (spool/glob :session-id :owner :as :pattern)
    (spool/stat :session-id :owner :as :address)
    (monitor/start :session-id :owner :command :cwd :label :filter :persistent
                   :timeout-ms :env)
    (monitor/stop :session-id :owner :monitor-id)
    (monitor/list :session-id :owner)
    (owner/state :session-id :owner :state)
    (owner/retire :session-id :owner :phase :frontier)
    (owner/attend :session-id :owner :delivery-ids)
    (mailbox/ack :session-id :delivery-id :durable :error)
    (transcript/records :session-id :since :limit)
    (transcript/checkpoint :session-id)
    (daemon/status))
  "Each method this package sends, with the Lisp keys of its parameters.
A request names its parameters with these keys; each becomes its
wire key through `mevedel-execution-wire-key' (`:execution-id' is
sent as `executionId').  A key not listed for its method is an
error, so this table is all the facade sends.")

(defvar mevedel-execution--keys (make-hash-table :test #'eq)
  "Cache of wire keys (`:executionId') to Lisp keys (`:execution-id').")

(defvar mevedel-execution--wire-keys (make-hash-table :test #'eq)
  "Cache of Lisp keys (`:execution-id') to wire keys (`:executionId').")

(defun mevedel-execution-lisp-key (key)
  "Return the Lisp keyword for the wire keyword KEY.
`:executionId' gives `:execution-id'."
  (or (gethash key mevedel-execution--keys)
      (puthash key
               (let ((case-fold-search nil))
                 (intern (downcase
                          (replace-regexp-in-string
                           "\\([a-z0-9]\\)\\([A-Z]\\)" "\\1-\\2"
                           (symbol-name key)))))
               mevedel-execution--keys)))

(defun mevedel-execution-wire-key (key)
  "Return the wire keyword for the Lisp keyword KEY.
`:execution-id' gives `:executionId': it undoes
`mevedel-execution-lisp-key'."
  (or (gethash key mevedel-execution--wire-keys)
      (puthash key
               (let ((case-fold-search nil))
                 (intern (replace-regexp-in-string
                          "-\\([a-z0-9]\\)" (lambda (m) (upcase (substring m 1)))
                          (symbol-name key) t t)))
               mevedel-execution--wire-keys)))

(defun mevedel-execution-normalize (value)
  "Return VALUE from the wire as fresh Lisp data.
Objects become plists with kebab-case keyword keys, arrays become
lists, and JSON false and null become nil: once, here, so no caller
ever sees `:json-false'."
  (cond
   ((memq value '(:json-false :null)) nil)
   ((vectorp value) (mapcar #'mevedel-execution-normalize value))
   ((and (consp value) (keywordp (car value)))
    (let (out)
      (while value
        (push (mevedel-execution-lisp-key (car value)) out)
        (push (mevedel-execution-normalize (cadr value)) out)
        (setq value (cddr value)))
      (nreverse out)))
   ((consp value) (mapcar #'mevedel-execution-normalize value))
   (t value)))

(defun mevedel-execution-to-wire (method plist)
  "Return PLIST, METHOD's parameters with Lisp keys, ready for the wire.
Keys become wire keys and nil values are left out; values are sent
as they are.  A key `mevedel-execution-wire-params' does not list
for METHOD signals an error."
  (let ((known (or (assq method mevedel-execution-wire-params)
                   (error "mevedel-exec: %s is not in `mevedel-execution-wire-params'" method)))
        (out nil))
    (while plist
      (let ((key (car plist)))
        (unless (memq key (cdr known))
          (error "mevedel-exec: %s takes no %s" method key))
        (when (cadr plist)
          (push (mevedel-execution-wire-key key) out)
          (push (cadr plist) out)))
      (setq plist (cddr plist)))
    (nreverse out)))

;;;; Facts in words

(defvar mevedel-execution--start-times (make-hash-table :test #'equal)
  "Start stamps parsed to `float-time': views redraw runtimes each second.")

(defun mevedel-execution--start-time (stamp)
  "Return the RFC 3339 STAMP as a `float-time', or nil; remembered."
  (let ((time (gethash stamp mevedel-execution--start-times 'none)))
    (when (eq time 'none)
      (when (> (hash-table-count mevedel-execution--start-times) 4096)
        (clrhash mevedel-execution--start-times))
      (setq time (puthash stamp
                          (let ((t0 (ignore-errors (parse-iso8601-time-string stamp))))
                            (and t0 (float-time t0)))
                          mevedel-execution--start-times)))
    time))

(defun mevedel-execution-runtime-seconds (facts)
  "Return how many seconds the execution of FACTS has run, or nil.
A finished one ran for its wall time."
  (let ((started (plist-get facts :started-at)))
    (cond
     ((or (equal (plist-get facts :state) "settled") (plist-get facts :ended-at))
      (and started (/ (or (plist-get facts :wall-ms) 0) 1000)))
     ((stringp started)
      (let ((t0 (mevedel-execution--start-time started)))
        (when t0
          (max 0 (floor (- (float-time) t0)))))))))

(defun mevedel-execution-state-text (facts)
  "Return the state of FACTS in words: running, waiting, or how it ended.
A settled execution shows its status and exit code (or signal):
\"failed (exit 2)\", \"completed (exit 0)\", \"stopped\"."
  (let ((state (plist-get facts :state)))
    (cond
     ((null facts) "?")
     ((equal state "settled")
      (let ((status (or (plist-get facts :status) "ended"))
            (code (plist-get facts :exit-code))
            (signal (plist-get facts :signal)))
        (cond (code (format "%s (exit %d)" status code))
              ((and signal (not (equal status "stopped"))) (format "%s (%s)" status signal))
              (t status))))
     ((plist-get facts :waiting-for-input) "waiting for input")
     (t (or state "?")))))

(defun mevedel-execution-duration (seconds)
  "Return SECONDS as a short duration: 9s, 4m07s, 2h05m; \"-\" for nil."
  (cond ((null seconds) "-")
        ((< seconds 60) (format "%ds" seconds))
        ((< seconds 3600) (format "%dm%02ds" (/ seconds 60) (% seconds 60)))
        (t (format "%dh%02dm" (/ seconds 3600) (% (/ seconds 60) 60)))))

(provide 'mevedel-execution-wire)
;;; mevedel-execution-wire.el ends here

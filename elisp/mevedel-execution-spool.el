;;; mevedel-execution-spool.el --- Read and search mevedel-exec output logs  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-exec developers

;; Author: The mevedel-exec developers
;; Version: 0.1.0
;; Keywords: processes, tools
;; URL: https://github.com/mevedel/mevedel-exec

;; This file is not part of GNU Emacs.

;;; Commentary:

;; Every execution's whole output stays addressable as
;; artifact://executions/<id>.log, whether the helper keeps it raw or has
;; compressed it.  These functions read, search, list and describe those
;; logs through the helper's logical views, with the same authority as
;; executions: under an owner's authority only its own logs, with
;; `:as-user' all of them.  `mevedel-execution-spool-open-output' shows an
;; execution's full output in a read-only buffer, a page at a time.

;;; Code:

(require 'ansi-color)
(require 'cl-lib)
(require 'compile)
(require 'subr-x)
(require 'mevedel-execution)
(require 'mevedel-execution-logs)
(require 'mevedel-execution-stream)

(defgroup mevedel-execution-spool nil
  "Faces of the output buffers of mevedel-exec.
Their options are in the group `mevedel-execution'."
  :group 'mevedel-execution
  :prefix "mevedel-execution-spool-")

(defcustom mevedel-execution-spool-page-bytes (* 256 1024)
  "How many bytes of a log one page of an output buffer shows."
  :type 'natnum
  :group 'mevedel-execution)

;;;; Output buffers

;; An output buffer shows one execution's log from byte START to byte
;; END.  Pages are cut at line boundaries.  While it shows the end of
;; the log, it follows it: new output comes in `exec/output'; a gap in
;; it, or facts of a longer log, make it read the new range (only
;; that), as does its final size after `exec/settled'.  Text goes in as
;; a terminal would leave it: colours from escapes, a carriage return
;; rewriting its line.  The mode derives from `compilation-mode', so
;; `next-error' visits the file:line:col locations of compilers.

(defface mevedel-execution-spool-header-failed '((t :inherit error))
  "Face of a failed command's state in an output buffer's header line.")

(defface mevedel-execution-spool-header-running '((t :inherit success))
  "Face of a running command's state in an output buffer's header line.")

(defvar-local mevedel-execution-spool--source nil
  "What the current output buffer shows: (SESSION ADDRESS START TOTAL LENGTH).
START is the byte offset of its first byte, LENGTH how many bytes
of the log it holds, TOTAL the log's size when last read.")

(defvar-local mevedel-execution-spool--execution-id nil
  "The execution whose output this buffer shows.")

(defvar-local mevedel-execution-spool--facts nil
  "The latest facts known of the execution shown, or nil.")

(defun mevedel-execution-spool-running-facts (&optional buffer)
  "Return the facts of BUFFER's command while it may still run.
That is while it is queued, running or stopping in a session that is
open; otherwise nil.  BUFFER defaults to the current buffer."
  (with-current-buffer (or buffer (current-buffer))
    (let ((facts mevedel-execution-spool--facts)
          (session (car mevedel-execution-spool--source)))
      (and facts session
           (member (plist-get facts :state) '("queued" "running" "stopping"))
           (mevedel-execution-session-open-p session)
           facts))))

(defvar-local mevedel-execution-spool--tailing nil
  "Non-nil while the buffer ends where the log ended when last read.
Only such a buffer follows the log; the log's size may have grown
past it since (the helper counts bytes written after its read).")

(defvar-local mevedel-execution-spool--cuts nil
  "Where a followed buffer may be cut: (MARKER . BYTE), newest first.
Each marks the start of an appended chunk that began a line, and
the log's byte offset there.")

(defvar-local mevedel-execution-spool--reading nil
  "Non-nil while a read of new output is under way.")

(defvar-local mevedel-execution-spool--streaming nil
  "Non-nil while the output comes in chunks that go on from the end.")

(defvar-local mevedel-execution-spool--held ""
  "Text held back from the last read: a carriage return at its end.")

(defvar-local mevedel-execution-spool--listener nil
  "This buffer's function on `mevedel-execution-event-functions'.")

(defvar-local mevedel-execution-spool--gone nil
  "Non-nil once the helper that ran the execution exited while it ran.")

(defvar-local mevedel-execution-spool-rerun-function nil
  "Function that runs this buffer's command again, or nil.
Set by `mevedel-execution-compile'; \\[mevedel-execution-spool-revert] calls it.")

(defvar mevedel-execution-spool-output-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "n") #'mevedel-execution-spool-next-page)
    (define-key map (kbd "p") #'mevedel-execution-spool-previous-page)
    (define-key map (kbd "<") #'mevedel-execution-spool-first-page)
    (define-key map (kbd ">") #'mevedel-execution-spool-last-page)
    (define-key map (kbd "g") #'mevedel-execution-spool-revert)
    (define-key map (kbd "C-c C-k") #'mevedel-execution-spool-stop)
    (define-key map (kbd "C-c C-c") #'mevedel-execution-spool-interrupt)
    (define-key map (kbd "s") #'mevedel-execution-spool-send-input)
    map)
  "Keys of `mevedel-execution-spool-output-mode'.")

(define-derived-mode mevedel-execution-spool-output-mode compilation-mode "Exec-Output"
  "Read-only view of an execution's output, one page at a time.
While it shows the end of a running command's output it follows
it.  Colour escapes are rendered and carriage returns rewrite
their line.  As in `compilation-mode', \\[next-error] visits the
locations of errors.  The header line says what runs and how it
ended.
\\{mevedel-execution-spool-output-mode-map}"
  (setq-local truncate-lines nil)
  (setq-local ansi-color-context nil)
  (setq-local revert-buffer-function #'mevedel-execution-spool--revert-buffer)
  (setq-local next-error-function #'mevedel-execution-spool--next-error)
  (setq header-line-format '(:eval (mevedel-execution-spool--header)))
  (setq font-lock-defaults '(mevedel-execution-stream-font-lock-keywords t))
  (add-hook 'kill-buffer-hook #'mevedel-execution-spool--detach nil t)
  (add-hook 'change-major-mode-hook #'mevedel-execution-spool--detach nil t))

(declare-function compilation--ensure-parse "compile")

(defun mevedel-execution-spool--next-error (n &optional reset)
  "Visit the Nth next error, as `compilation-next-error-function' does.
RESET starts from the first.  The output of a command may start
with an error message, where a compile buffer has its header line:
that first message counts as the first step."
  (when reset (setq compilation-current-error nil))
  (when (and (null compilation-current-error) (> n 0)
             (< (point-min) (point-max)))
    (compilation--ensure-parse
     (min (point-max) (1+ (save-excursion (goto-char (point-min)) (line-end-position)))))
    (when (get-text-property (point-min) 'compilation-message)
      (setq n (1- n))))
  (compilation-next-error-function n))

(defun mevedel-execution-spool--revert-buffer (&rest _)
  "The `revert-buffer-function' of output buffers."
  (mevedel-execution-spool-revert))

(defvar-local mevedel-execution-spool--header-made nil
  "(INPUTS . LINE): the header line last made, and what it shows.")

(defun mevedel-execution-spool--header ()
  "Return the header line of the current output buffer, as last made.
Redisplay asks at each redraw; it is made anew when what it shows differs."
  (pcase-let* ((`(,_ ,address ,start ,total ,length) mevedel-execution-spool--source)
               (f mevedel-execution-spool--facts)
               (paged (and total (or (> (or start 0) 0) (not mevedel-execution-spool--tailing))))
               (inputs (vector (and f (mevedel-execution-runtime-seconds f)) (null f) address
                               mevedel-execution-spool--gone mevedel-execution-spool--execution-id
                               (and paged (list start length total)) (plist-get f :state)
                               (plist-get f :status) (plist-get f :exit-code) (plist-get f :signal)
                               (plist-get f :waiting-for-input) (plist-get f :outcome)
                               (plist-get f :command) (plist-get f :label))))
    (cdr (if (equal inputs (car mevedel-execution-spool--header-made)) mevedel-execution-spool--header-made
           (setq mevedel-execution-spool--header-made (cons inputs (mevedel-execution-spool--make-header)))))))

(defun mevedel-execution-spool--make-header ()
  "Make the header line of the current output buffer."
  (pcase-let* ((`(,_session ,address ,start ,total ,length) mevedel-execution-spool--source)
               (facts mevedel-execution-spool--facts)
               (state (mevedel-execution-state-text facts))
               (failed (equal (plist-get facts :outcome) "failure"))
               (command (plist-get facts :command))
               (label (plist-get facts :label))
               (paged (and total (or (> (or start 0) 0) (not mevedel-execution-spool--tailing)))))
    (string-replace
     "%" "%%"
     (concat
      " "
      (string-join
       (delq nil
             (list (and label (not (equal label command)) (propertize label 'face 'bold))
                   (and command (truncate-string-to-width
                                 (mevedel-execution-spool--one-line command) 50 nil nil "…"))
                   (and (null facts) (or mevedel-execution-spool--execution-id address))
                   (propertize (if mevedel-execution-spool--gone
                                   (concat state ", helper exited")
                                 state)
                               'face (cond (failed 'mevedel-execution-spool-header-failed)
                                           ((member (plist-get facts :state) '("running" "queued"))
                                            'mevedel-execution-spool-header-running)
                                           (t 'shadow)))
                   (and facts (mevedel-execution-duration
                               (mevedel-execution-runtime-seconds facts)))
                   (and paged (format "bytes %d-%d of %d  [n]ext [p]revious [<] first [>] last"
                                      start (+ start length) total))))
       " · ")))))

(defun mevedel-execution-spool--one-line (text)
  "Return TEXT with each stretch of whitespace made one space."
  (string-trim (replace-regexp-in-string "[ \t\n\r]+" " " text)))

;;;;; Putting text in

(defun mevedel-execution-spool--carriage-motion (start end)
  "Make each carriage return between START and END act as on a terminal.
CR LF is a newline; a lone CR goes back to the start of its line,
so what follows it replaces the line, as comint shows progress bars."
  (save-excursion
    (goto-char start)
    (while (search-forward "\r" end t)
      (if (eq (char-after) ?\n)
          (progn (delete-char -1) (setq end (1- end)))
        (let ((bol (line-beginning-position)))
          (setq end (- end (- (point) bol)))
          (delete-region bol (point)))))))

(defun mevedel-execution-spool--insert (text)
  "Append the log TEXT to the buffer as a terminal would show it.
Windows whose point was at the end stay at the end."
  (let* ((inhibit-read-only t)
         (text (concat mevedel-execution-spool--held text))
         (at-end (= (point) (point-max)))
         (windows (cl-remove-if-not (lambda (w) (= (window-point w) (point-max)))
                                    (get-buffer-window-list (current-buffer) nil t))))
    ;; A CR at the very end may be the first half of a CR LF.
    (if (string-suffix-p "\r" text)
        (setq mevedel-execution-spool--held "\r"
              text (substring text 0 -1))
      (setq mevedel-execution-spool--held ""))
    (save-excursion
      (goto-char (point-max))
      (let ((start (line-beginning-position)))
        ;; Most output has neither escapes nor carriage returns: it
        ;; goes in as it is, which is several times faster.
        (insert (if (or ansi-color-context (string-search "\e" text))
                    (ansi-color-apply text)
                  text))
        (when (string-search "\r" text)
          (mevedel-execution-spool--carriage-motion start (point-max)))
        (mevedel-execution-stream-hold-parse start)))
    (when at-end (goto-char (point-max)))
    (dolist (w windows) (set-window-point w (point-max)))))

(defun mevedel-execution-spool--page-text (res align-start cut-end)
  "Return (TEXT START LENGTH) of the spool/read answer RES, cut at lines.
With ALIGN-START, a first line the read began inside is dropped;
with CUT-END, a last line without its newline is, unless the text
is a single line.  What is dropped is counted with `string-bytes':
Emacs keeps a decoded string in UTF-8, so that is its length in the
log, at no cost."
  (let* ((text (or (plist-get res :text) ""))
         (start (or (plist-get res :offset) 0))
         (length (or (plist-get res :length) 0)))
    (when (and align-start (> start 0))
      (let ((nl (string-search "\n" text)))
        (when (and nl (< (1+ nl) (length text)))
          (let ((skip (string-bytes (substring text 0 (1+ nl)))))
            (setq text (substring text (1+ nl))
                  start (+ start skip)
                  length (- length skip))))))
    ;; Only a full page ends inside the log: a shorter read reached its
    ;; end as it was then, and the line it ends in goes on when followed.
    (when (and cut-end (not (plist-get res :eof))
               (>= (or (plist-get res :length) 0) mevedel-execution-spool-page-bytes))
      (let ((nl (save-match-data
                  (and (string-match "\n[^\n]*\\'" text) (match-beginning 0)))))
        (when (and nl (< (1+ nl) (length text)))
          (let ((drop (string-bytes (substring text (1+ nl)))))
            (setq text (substring text 0 (1+ nl))
                  length (- length drop))))))
    (list text start length)))

;;;;; Pages

(defun mevedel-execution-spool--show (session address offset &optional align follow)
  "Show the page of ADDRESS in SESSION beginning at byte OFFSET.
ALIGN non-nil says OFFSET may fall inside a line: the page then
starts at the next line.  FOLLOW non-nil says the page is the
log's last: what is written after it is followed."
  (mevedel-execution-spool--show-page
   session address
   (mevedel-execution-spool-read session address :as-user t
                                 :offset (max 0 offset)
                                 :length mevedel-execution-spool-page-bytes)
   align follow)
  (goto-char (point-min)))

(defun mevedel-execution-spool--show-page (session address res align follow)
  "Show RES, a page of ADDRESS in SESSION, in place of the buffer's text.
ALIGN and FOLLOW as in `mevedel-execution-spool--show'."
  (let ((total (plist-get res :total-bytes))
        (inhibit-read-only t))
    (pcase-let ((`(,text ,start ,length) (mevedel-execution-spool--page-text res align t)))
      (erase-buffer)
      (setq ansi-color-context nil
            mevedel-execution-spool--held "")
      (mapc (lambda (c) (set-marker (car c) nil)) mevedel-execution-spool--cuts)
      (setq mevedel-execution-spool--cuts nil)
      ;; A read shorter than a page reached the end: bytes written since
      ;; (TOTAL may count them) come by following.
      (setq mevedel-execution-spool--tailing
            (or follow (plist-get res :eof)
                (< (or (plist-get res :length) 0) mevedel-execution-spool-page-bytes)))
      (setq mevedel-execution-spool--source (list session address start total length)
            mevedel-execution-spool--streaming nil)
      (mevedel-execution-spool--insert text))))

(defun mevedel-execution-spool--page (fn &optional align follow)
  "Move to the page FN computes from (OFFSET TOTAL LENGTH).
ALIGN and FOLLOW as in `mevedel-execution-spool--show'."
  (pcase-let ((`(,session ,address ,offset ,total ,length) mevedel-execution-spool--source))
    (unless session (user-error "Not an output buffer"))
    (mevedel-execution-spool--show session address (funcall fn offset total length)
                                   align follow)))

(defun mevedel-execution-spool-next-page ()
  "Show the next page of the output.
A page is `mevedel-execution-spool-page-bytes' of the log, cut at
line boundaries; on the last page this says so."
  (interactive)
  (mevedel-execution-spool--page
   (lambda (offset total length)
     (if (>= (+ offset length) total) (user-error "Last page") (+ offset length)))))

(defun mevedel-execution-spool-previous-page ()
  "Show the previous page of the output.
A page is `mevedel-execution-spool-page-bytes' of the log, cut at
line boundaries; on the first page this says so."
  (interactive)
  (mevedel-execution-spool--page
   (lambda (offset _total _length)
     (if (<= offset 0) (user-error "First page")
       (max 0 (- offset mevedel-execution-spool-page-bytes))))
   t))

(defun mevedel-execution-spool-first-page ()
  "Show the first page of the output.
A page is `mevedel-execution-spool-page-bytes' of the log, cut at
line boundaries; the buffer holds one page at a time."
  (interactive)
  (mevedel-execution-spool--page (lambda (&rest _) 0)))

(defun mevedel-execution-spool-last-page ()
  "Show the last page of the output; it follows the output from there.
While the command runs, new output is appended as it comes, and a
window whose point was at the end stays at the end."
  (interactive)
  (mevedel-execution-spool--page
   (lambda (_offset total _length) (max 0 (- total mevedel-execution-spool-page-bytes)))
   t t)
  (goto-char (point-max))
  (mevedel-execution-spool--follow))

(defun mevedel-execution-spool-revert ()
  "Show the current page again, as it is now; in a build's buffer, run it again.
In the buffer of `mevedel-execution-compile' this is
`mevedel-execution-recompile', as \\[revert-buffer] in a compilation buffer
recompiles; elsewhere it reads the page from the log again and goes
on following."
  (interactive)
  (if mevedel-execution-spool-rerun-function
      (funcall mevedel-execution-spool-rerun-function)
    (mevedel-execution-spool--page (lambda (offset &rest _) offset))
    (mevedel-execution-spool--follow)))

;;;;; Following

(defvar-local mevedel-execution-spool--followed nil
  "(SESSION . ID) of the execution this buffer asked the helper to follow.")

(defun mevedel-execution-spool--send-follow (session id on)
  "Ask the helper to follow ID of SESSION, or with ON nil to stop.
What it prints then comes in `exec/output' (`:output'), so the
buffer streams it.  Advisory: a refusal, because it ended meanwhile,
or a helper out of reach changes nothing."
  (ignore-errors
    (mevedel-execution-request-async
     session 'exec/follow
     (list :execution-id id :as "user" :follow (if on t :json-false) :output t)
     :on-error #'ignore)))

(defun mevedel-execution-spool--ask-follow (session id &optional followed)
  "Follow ID of SESSION from this buffer while it lives, unless it ended.
FOLLOWED non-nil says its start followed it already, for this buffer."
  (unless (or mevedel-execution-spool--followed
              (equal (plist-get mevedel-execution-spool--facts :state) "settled"))
    (setq mevedel-execution-spool--followed (cons session id))
    (unless followed (mevedel-execution-spool--send-follow session id t))
    (add-hook 'kill-buffer-hook #'mevedel-execution-spool--unfollow nil t)))

(defun mevedel-execution-spool--unfollow ()
  "Undo this buffer's follow; for `kill-buffer-hook'."
  (when-let ((followed mevedel-execution-spool--followed))
    (setq mevedel-execution-spool--followed nil)
    (unless (equal (plist-get mevedel-execution-spool--facts :state) "settled")
      (mevedel-execution-spool--send-follow (car followed) (cdr followed) nil))))

(defvar-local mevedel-execution-spool--follower nil
  "(SESSION-ID EXECUTION-ID FACTS-FN OUTPUT-FN): how this buffer learns.
See `mevedel-execution-follow-facts' and `mevedel-execution-follow-output'.")

(defun mevedel-execution-spool--detach ()
  "Stop following the helper's events in this buffer."
  (when mevedel-execution-spool--listener
    (remove-hook 'mevedel-execution-event-functions mevedel-execution-spool--listener)
    (setq mevedel-execution-spool--listener nil))
  (when mevedel-execution-spool--follower
    (mevedel-execution-follow-facts-and-output mevedel-execution-spool--follower t)
    (setq mevedel-execution-spool--follower nil)))

(defun mevedel-execution-spool--attach ()
  "Follow the helper's events about this buffer's execution.
Its new facts and output come at once, each time the helper sends
them (see `mevedel-execution-follow-facts' and
`mevedel-execution-follow-output'); its settlement and the helper's
exit as events."
  (unless mevedel-execution-spool--listener
    (let* ((buffer (current-buffer))
           (listener nil)
           (follower (list (mevedel-execution-session-id mevedel-execution-buffer-session)
                           mevedel-execution-spool--execution-id nil nil)))
      (setq listener
            (lambda (type plist)
              (if (not (buffer-live-p buffer))
                  (remove-hook 'mevedel-execution-event-functions listener)
                (with-current-buffer buffer
                  (mevedel-execution-spool--on-event type plist)))))
      (setf (nth 2 follower)
            (lambda (facts)
              (if (not (buffer-live-p buffer))
                  (mevedel-execution-follow-facts-and-output follower t)
                (with-current-buffer buffer
                  (mevedel-execution-spool-note-facts facts))))
            (nth 3 follower)
            (lambda (offset got text)
              (if (not (buffer-live-p buffer))
                  (mevedel-execution-follow-facts-and-output follower t)
                (with-current-buffer buffer
                  (mevedel-execution-spool--take-output offset got text)))))
      (setq mevedel-execution-spool--listener listener
            mevedel-execution-spool--follower follower)
      (mevedel-execution-add-reader listener)
      (mevedel-execution-follow-facts-and-output follower))))

(defun mevedel-execution-spool--on-event (type plist)
  "Handle the event TYPE with PLIST for this output buffer."
  (let* ((session (car mevedel-execution-spool--source))
         (sid (and session (mevedel-execution-session-id session)))
         (id mevedel-execution-spool--execution-id))
    (pcase type
      ('settled
       (let ((facts (plist-get plist :facts)))
         (when (and (equal (plist-get plist :session-id) sid)
                    (equal (plist-get facts :execution-id) id))
           (mevedel-execution-spool-note-facts facts))))
      ('exit
       (when (and session
                  (eql (plist-get plist :generation)
                       (mevedel-execution-session-generation session))
                  (not (equal (plist-get mevedel-execution-spool--facts :state) "settled")))
         (setq mevedel-execution-spool--gone t)
         (mevedel-execution-spool--detach)
         (force-mode-line-update))))))

(defun mevedel-execution-spool-note-facts (facts)
  "Take FACTS, newer facts of this buffer's execution, and read what is new.
Older facts than those held are ignored."
  (let ((old mevedel-execution-spool--facts))
    (when (or (null old)
              (and (equal (plist-get facts :state) "settled")
                   (not (equal (plist-get old :state) "settled")))
              (>= (or (plist-get facts :version) 0) (or (plist-get old :version) 0)))
      (setq mevedel-execution-spool--facts facts)
      (force-mode-line-update)
      (mevedel-execution-spool--follow))))

(defun mevedel-execution-spool--follow ()
  "Read the output past this buffer's end, if it ends where the log did.
Only a buffer that showed the log's end follows it, and only when
there is more: as the facts say, or as a read or a chunk showed."
  (pcase-let ((`(,session ,address ,start ,total ,length) mevedel-execution-spool--source))
    (let ((size (max (or total 0) (or (plist-get mevedel-execution-spool--facts :output-bytes) 0)))
          (end (and start (+ start length)))
          (buffer (current-buffer)))
      (when (and session end mevedel-execution-spool--tailing (not mevedel-execution-spool--reading)
                 (> size end)
                 ;; Unless chunks bring it (the rest of a character too).
                 (not (and mevedel-execution-spool--streaming (mevedel-execution-spool-running-facts)))
                 (mevedel-execution-session-open-p session))
        (if (> (- size end) (* 2 mevedel-execution-spool-page-bytes))
            ;; More than the buffer keeps came since: what it would drop
            ;; at once is not read at all.  Jump to the last page.
            (mevedel-execution-spool--jump-to-tail size)
          (mevedel-execution-spool--read-more session address end size buffer))))))

(defun mevedel-execution-spool--jump-to-tail (size)
  "Show the last page of a log of SIZE bytes and follow it from there.
The page is read without waiting; windows that were at the end when
it comes stay at the end."
  (pcase-let ((`(,session ,address ,start ,_total ,length) mevedel-execution-spool--source)
              (buffer (current-buffer)))
    (setq mevedel-execution-spool--reading t)
    (mevedel-execution-request-async
     session 'spool/read
     (list :as "user" :address address
           :offset (max 0 (- size mevedel-execution-spool-page-bytes))
           :length mevedel-execution-spool-page-bytes)
     :on-result
     (lambda (res)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (setq mevedel-execution-spool--reading nil)
           ;; Unless the person moved to another page meanwhile.
           (when (equal (list start length)
                        (list (nth 2 mevedel-execution-spool--source)
                              (nth 4 mevedel-execution-spool--source)))
             (let ((at-end (= (point) (point-max)))
                   (windows (cl-remove-if-not
                             (lambda (w) (= (window-point w) (point-max)))
                             (get-buffer-window-list buffer nil t))))
               (mevedel-execution-spool--show-page session address res t t)
               (goto-char (if at-end (point-max) (point-min)))
               (dolist (w windows) (set-window-point w (point-max)))
               (mevedel-execution-spool--follow))))))
     :on-error
     (lambda (_err)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer (setq mevedel-execution-spool--reading nil))))
     :timeout 60)))

(defun mevedel-execution-spool--read-more (session address end size buffer)
  "Read ADDRESS of SESSION from END, up to SIZE, and append it to BUFFER."
  (setq mevedel-execution-spool--reading t)
  (condition-case err
      (mevedel-execution-request-async
       session 'spool/read
       (list :as "user" :address address :offset end
             :length (min (- size end) mevedel-execution-spool-page-bytes))
       :on-result
       (lambda (res)
         (when (buffer-live-p buffer)
           (with-current-buffer buffer
             (setq mevedel-execution-spool--reading nil)
             (mevedel-execution-spool--append res end))))
       :on-error
       (lambda (_err)
         (when (buffer-live-p buffer)
           (with-current-buffer buffer (setq mevedel-execution-spool--reading nil))))
       :timeout 60)
    (error
     (setq mevedel-execution-spool--reading nil)
     (message "mevedel-exec: reading %s: %s" address (error-message-string err)))))

(defun mevedel-execution-spool--append (res end)
  "Append the spool/read answer RES, read from byte END, then read on."
  (pcase-let* ((`(,_session ,_address ,start ,_total ,length) mevedel-execution-spool--source)
               (got (or (plist-get res :length) 0))
               ;; Unless the end moved since the read was sent (a page
               ;; change, output that came): it is not ours to add.
               (ours (eql (+ start length) end)))
    (when ours
      (mevedel-execution-spool--append-text (or (plist-get res :text) "") got end
                                            (plist-get res :total-bytes)))
    (when (or (> got 0) (not ours)) (mevedel-execution-spool--follow))))

(defun mevedel-execution-spool--append-text (text got end total)
  "Append TEXT, GOT bytes of the log from END, the buffer's end.
TOTAL is the log's size as the helper last said, or nil."
  (pcase-let ((`(,session ,address ,start ,known ,length) mevedel-execution-spool--source))
    ;; A chunk that starts a line is where the buffer can later be
    ;; cut without reading the log again.
    (when (and (string-empty-p mevedel-execution-spool--held)
               (save-excursion (goto-char (point-max)) (bolp))
               (> (buffer-size) 0))
      (push (cons (copy-marker (point-max)) end) mevedel-execution-spool--cuts))
    (mevedel-execution-spool--insert text)
    (setq mevedel-execution-spool--source
          (list session address start (max (or total 0) (or known 0) (+ end got))
                (+ length got)))
    (mevedel-execution-spool--trim)
    (force-mode-line-update)))

(defun mevedel-execution-spool--take-output (offset got text)
  "Append the output chunk TEXT, GOT bytes of the log from OFFSET.
Only what goes on from the buffer's end is taken, and bytes shown
are not added again.  While chunks go on from it, the buffer waits
for them; one past its end (output the helper dropped) makes it read
the log as far as that chunk goes, not waiting for the facts."
  (pcase-let* ((`(,_session ,_address ,start ,total ,length) mevedel-execution-spool--source)
               (end (and start (+ start length)))
               (skip (and end (- end offset))))
    (cond ((not (and end mevedel-execution-spool--tailing)))
          ((< skip 0)
           (setq mevedel-execution-spool--streaming nil)
           (setf (nth 3 mevedel-execution-spool--source) (max (or total 0) (+ offset got)))
           (mevedel-execution-spool--follow))
          ((and (< skip got)
                (setq text (if (zerop skip) text (mevedel-execution-drop-bytes text skip))))
           (setq mevedel-execution-spool--streaming t)
           (mevedel-execution-spool--append-text text (- got skip) end nil)))))

(defun mevedel-execution-spool--trim ()
  "Keep a followed buffer within two pages: drop whole lines from its start.
The first byte shown moves on by what was dropped, counted from the
log's text, so paging back still starts where the buffer does."
  (when (> (buffer-size) (* 2 mevedel-execution-spool-page-bytes))
    (pcase-let* ((`(,session ,address ,_start ,total ,length) mevedel-execution-spool--source)
                 (end (+ (nth 2 mevedel-execution-spool--source) length))
                 ;; The oldest place to cut that keeps at most a page.
                 (cut (cl-find-if (lambda (c) (<= (- (buffer-size) (1- (marker-position (car c))))
                                                  mevedel-execution-spool-page-bytes))
                                  (reverse mevedel-execution-spool--cuts))))
      (if cut
          (let ((inhibit-read-only t))
            (delete-region (point-min) (car cut))
            (setq mevedel-execution-spool--source
                  (list session address (cdr cut) total (- end (cdr cut))))
            (mevedel-execution-spool--forget-cuts (cdr cut)))
        (if (not (mevedel-execution-in-filter-p))
            (mevedel-execution-spool--trim-by-reading)
          ;; Its read waits for the helper: not inside the process filter.
          (let ((b (current-buffer)))
            (mevedel-execution-defer
             (lambda () (when (buffer-live-p b) (with-current-buffer b (mevedel-execution-spool--trim)))))))))))

(defun mevedel-execution-spool--forget-cuts (before)
  "Forget the places to cut the buffer at bytes before BEFORE."
  (setq mevedel-execution-spool--cuts
        (cl-remove-if (lambda (c)
                        (when (< (cdr c) (1+ before)) (set-marker (car c) nil) t))
                      mevedel-execution-spool--cuts)))

(defun mevedel-execution-spool--trim-by-reading ()
  "Keep the last page of a followed buffer, read again from the log.
For when no chunk boundary is near enough to cut at."
  (mapc (lambda (c) (set-marker (car c) nil)) mevedel-execution-spool--cuts)
  (setq mevedel-execution-spool--cuts nil)
  (pcase-let ((`(,session ,address ,start ,total ,length) mevedel-execution-spool--source))
    ;; Re-read the kept part from the log: the buffer's text is the
    ;; log after colours and carriage returns, not its bytes.
    (let* ((keep-from (- (+ start length) mevedel-execution-spool-page-bytes))
           (res (ignore-errors
                  (mevedel-execution-spool-read session address :as-user t
                                                :offset keep-from
                                                :length mevedel-execution-spool-page-bytes)))
           (at-end (= (point) (point-max))))
      (when res
        (pcase-let ((`(,text ,new-start ,new-length)
                     (mevedel-execution-spool--page-text res t nil)))
          (let ((inhibit-read-only t))
            (erase-buffer)
            (setq ansi-color-context nil mevedel-execution-spool--held "")
            (mevedel-execution-spool--insert text))
          (setq mevedel-execution-spool--source
                (list session address new-start (max total (+ new-start new-length))
                      new-length))
          (goto-char (if at-end (point-max) (point-min))))))))

;;;;; Acting on the execution shown

(defun mevedel-execution-spool-shown ()
  "Return (SESSION ID FACTS) of this output buffer's execution, or nil.
FACTS are the latest known, or nil.  The commands acting on it are in
mevedel-execution-spool-act.el."
  (let ((session (car mevedel-execution-spool--source)))
    (and session mevedel-execution-spool--execution-id
         (list session mevedel-execution-spool--execution-id mevedel-execution-spool--facts))))

(autoload 'mevedel-execution-spool-stop "mevedel-execution-spool-act" nil t)
(autoload 'mevedel-execution-spool-interrupt "mevedel-execution-spool-act" nil t)
(autoload 'mevedel-execution-spool-send-input "mevedel-execution-spool-act" nil t)

;;;;; Opening

(defun mevedel-execution-spool--read-execution (session)
  "Read an execution id of SESSION, offering each log as its command."
  (let* ((ids (mapcar #'file-name-base (mevedel-execution-spool-glob session :as-user t)))
         (live (ignore-errors (mevedel-execution-list-user session)))
         (choices (mapcar (lambda (id)
                            (let ((f (cl-find id live :key (lambda (f) (plist-get f :execution-id))
                                              :test #'equal)))
                              (cons (if f (format "%s  %s" id (mevedel-execution-describe f)) id)
                                    id)))
                          (reverse ids))))
    (unless choices (user-error "Session %s has no output yet" (mevedel-execution-session-id session)))
    (let ((choice (completing-read "Output of: " choices nil t)))
      (or (cdr (assoc choice choices)) choice))))

(defun mevedel-execution-spool--initial-facts (session execution-id)
  "Return what the helper still knows of EXECUTION-ID in SESSION, or nil.
A look under user authority: it claims nothing."
  (ignore-errors
    (plist-get (mevedel-execution-request
                session 'exec/observe (list :as "user" :execution-id execution-id
                                            :max-output-chars 1))
               :facts)))

(defvar mevedel-execution-spool--buffers (make-hash-table :test #'equal)
  "Per (SESSION-ID . EXECUTION-ID), its output buffer, checked when read.
Each start and settlement asks: one look, not one per buffer.")

(defun mevedel-execution-spool--shows-p (buffer sid id)
  "Return non-nil if BUFFER is the live output buffer of ID in session SID."
  (and (buffer-live-p buffer)
       (with-current-buffer buffer
         (and (derived-mode-p 'mevedel-execution-spool-output-mode)
              (equal mevedel-execution-spool--execution-id id)
              (equal sid (and mevedel-execution-buffer-session
                              (mevedel-execution-session-id mevedel-execution-buffer-session)))))))

(defun mevedel-execution-spool-output-buffer (session-id execution-id)
  "Return the live output buffer of EXECUTION-ID in SESSION-ID, or nil."
  (let* ((key (cons session-id execution-id))
         (buffer (gethash key mevedel-execution-spool--buffers)))
    (if (mevedel-execution-spool--shows-p buffer session-id execution-id)
        buffer
      (remhash key mevedel-execution-spool--buffers)
      nil)))

;;;###autoload
(defun mevedel-execution-spool-open-output (session execution-id &optional from-end facts)
  "Show the full output of EXECUTION-ID in SESSION in a read-only buffer.
The buffer holds one page (`mevedel-execution-spool-page-bytes') at a
time, cut at line boundaries, never the whole log; FROM-END starts at
the last page.  While it shows the end of a running command's output
it follows it.  FACTS, when known, are the execution's facts.
Interactively, read the session (the current buffer's first) and the
execution.  Return the buffer; an id without output signals a
`user-error' and makes no buffer."
  (interactive
   (let ((session (mevedel-execution-read-session "Session")))
     (list session (mevedel-execution-spool--read-execution session) current-prefix-arg)))
  (let* ((address (mevedel-execution-spool-address execution-id))
         (stat (condition-case err
                   (mevedel-execution-spool-stat session address :as-user t)
                 (mevedel-execution-helper-error
                  (user-error "No output of %s in session %s: %s"
                              execution-id (mevedel-execution-session-id session)
                              (plist-get (nth 2 err) :message)))))
         (buffer (mevedel-execution-spool--prepare session execution-id facts)))
    (with-current-buffer buffer
      (if (not from-end)
          (mevedel-execution-spool--show session address 0)
        (setq mevedel-execution-spool--source
              (list session address 0 (or (plist-get stat :logical-bytes) 0) 0))
        (mevedel-execution-spool-last-page))
      (mevedel-execution-spool--catch-up))
    (when (called-interactively-p 'interactive)
      (pop-to-buffer buffer))
    buffer))

(defun mevedel-execution-spool--prepare (session execution-id facts &optional followed fresh)
  "Return the output buffer of EXECUTION-ID in SESSION, set up and following.
FACTS, when known, are the execution's facts; the text is not shown yet.
FOLLOWED non-nil: its start followed it with output already.  FRESH, a
new buffer, is used unless the execution has one."
  (let* ((name (format "*mevedel-exec output %s*" execution-id))
         (buffer (or (mevedel-execution-spool-output-buffer
                      (mevedel-execution-session-id session) execution-id)
                     (and fresh (with-current-buffer fresh (rename-buffer name t) fresh))
                     (get-buffer-create name))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'mevedel-execution-spool-output-mode)
        (mevedel-execution-spool-output-mode))
      (setq mevedel-execution-buffer-session session)
      (setq mevedel-execution-spool--execution-id execution-id)
      (let ((known mevedel-execution-spool--buffers) (gone nil))
        (when (> (hash-table-count known) 512) ; forget what was killed since
          (maphash (lambda (k b) (unless (mevedel-execution-spool--shows-p b (car k) (cdr k))
                                   (push k gone)))
                   known)
          (dolist (k gone) (remhash k known)))
        (puthash (cons (mevedel-execution-session-id session) execution-id) buffer known))
      (setq mevedel-execution-spool--gone nil)
      (setq mevedel-execution-spool--facts
            (or facts mevedel-execution-spool--facts
                (mevedel-execution-spool--initial-facts session execution-id)))
      (let ((cwd (plist-get mevedel-execution-spool--facts :cwd)))
        (when (and (stringp cwd) (file-name-absolute-p cwd)
                   (or (file-remote-p cwd) (file-directory-p cwd)))
          (setq default-directory (file-name-as-directory cwd))))
      (mevedel-execution-spool--attach)
      (mevedel-execution-spool--ask-follow session execution-id followed))
    buffer))

(defun mevedel-execution-spool--catch-up ()
  "Take the output that came before this buffer listened, then follow."
  (let ((early (mevedel-execution-take-early-output
                (mevedel-execution-session-id mevedel-execution-buffer-session)
                mevedel-execution-spool--execution-id)))
    (when early (apply #'mevedel-execution-spool--take-output early))
    (mevedel-execution-spool--follow)))

(defun mevedel-execution-spool-open-started (session execution-id facts output
                                                      &optional followed fresh)
  "Show the output of EXECUTION-ID in SESSION, from what its start answered.
FACTS and OUTPUT are the start reply's (its first observation, so
OUTPUT begins at the log's first byte).  When OUTPUT is the log so
far, whole, the buffer shows it at once and follows from there: no
request waits for the helper, and with FOLLOWED (the start followed
it with output) what it prints next comes without asking.  FRESH, a
new buffer made meanwhile, is used or killed.  Otherwise this is
`mevedel-execution-spool-open-output' from the end.  Return the buffer."
  (if (not (mevedel-execution-whole-output-p output facts))
      (let ((buffer (mevedel-execution-spool-open-output session execution-id t facts)))
        (when (buffer-live-p fresh) (kill-buffer fresh))
        (when followed
          (mevedel-execution-spool--send-follow session execution-id nil))
        buffer)
    (let* ((address (mevedel-execution-spool-address execution-id))
           (buffer (mevedel-execution-spool--prepare session execution-id facts followed fresh))
           (length (string-bytes output)))
      (with-current-buffer buffer
        (let ((inhibit-read-only t))
          (erase-buffer))
        (setq ansi-color-context nil
              mevedel-execution-spool--held ""
              mevedel-execution-spool--tailing t
              mevedel-execution-spool--source
              (list session address 0 (max length (or (plist-get facts :output-bytes) 0))
                    length))
        (mapc (lambda (c) (set-marker (car c) nil)) mevedel-execution-spool--cuts)
        (setq mevedel-execution-spool--cuts nil)
        (mevedel-execution-spool--insert output)
        (goto-char (point-max))
        ;; Output that came before this buffer listened first: growth
        ;; the helper announced meanwhile, in the live table already,
        ;; then finds it shown instead of reading it again.
        (mevedel-execution-spool--catch-up)
        (let ((newer (mevedel-execution-live-facts
                      (mevedel-execution-session-id session) execution-id)))
          (when newer (mevedel-execution-spool-note-facts newer))))
      buffer)))

(provide 'mevedel-execution-spool)
;;; mevedel-execution-spool.el ends here

package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// The facade in daemon mode, driven by real batch Emacs sessions: work
// outlives the Emacs that started it, and a later Emacs attaches to it.

// emacsPrelude is loaded by every batch Emacs of these tests: the facade
// in daemon mode on the helper under test, a mailbox sink that records
// what it is handed, and a bounded wait.
const emacsPrelude = `
(require 'mevedel-execution)
(setq mevedel-execution-connection 'daemon
      mevedel-execution-program (getenv "MEVEDEL_EXEC_PROGRAM"))
(defvar e2e-got nil "Deliveries handed to the sink, newest first.")
(setq mevedel-execution-mailbox-delivery-function
      (lambda (record ack) (push record e2e-got) (funcall ack)))
(defun e2e-say (fmt &rest args)
  "Say a line to the test: on stderr, which is not buffered."
  (message "E2E %s" (apply #'format fmt args)))
(defun e2e-wait (what pred)
  "Wait until PRED holds, 60 s at most, then return its value."
  (let ((deadline (+ (float-time) 60)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or (funcall pred) (progn (e2e-say "timeout: %s" what) (kill-emacs 3)))))
(defun e2e-delivered (id)
  (cl-remove-if-not (lambda (r) (equal (plist-get (plist-get r :attrs) :execution-id) id)) e2e-got))
(defvar e2e-session
  (mevedel-execution-open-session "emacs-daemon" (getenv "E2E_STATE")))
(defun e2e-start-server (what)
  "Start a command that runs until stopped; return its first observation.
WHAT names the wait."
  (let (obs)
    (mevedel-execution-start-bash
     (lambda (o) (setq obs o))
     :session e2e-session :command "echo up; exec sleep 1000"
     :ready-pattern "up" :yield-time-ms 20000)
    (e2e-wait what (lambda () obs))))
`

// The first Emacs starts a yielded command and exits.
const emacsFirst = `
(mevedel-execution-start-bash
 (lambda (obs) (setq e2e-obs obs))
 :session e2e-session
 :command (format "read -r _ < %s; echo one; echo two; exit 7" (getenv "E2E_GATE"))
 :label "outlives emacs" :yield-time-ms 0)
(defvar e2e-obs nil)
(e2e-wait "the start's yield" (lambda () e2e-obs))
(e2e-say "started %s" (plist-get (plist-get e2e-obs :facts) :execution-id))
`

// The second Emacs reopens the session and sees the command live; its
// completion comes to its sink once. A second command, stopped from the
// command line, comes to it as well.
const emacsSecond = `
(e2e-wait "the live table" (lambda () (mevedel-execution-live e2e-session)))
(dolist (f (mevedel-execution-live e2e-session))
  (e2e-say "live %s %s" (plist-get f :execution-id) (plist-get f :state)))
(let ((id (plist-get (car (mevedel-execution-live e2e-session)) :execution-id)))
  (e2e-wait "the first delivery" (lambda () (e2e-delivered id)))
  ;; A barrier, then the daemon says nothing is pending: no resend can come.
  (e2e-wait "no pending delivery"
            (lambda ()
              (let ((st (mevedel-execution-call (mevedel-execution-connect) 'daemon/status nil)))
                (zerop (apply #'+ (mapcar (lambda (s) (plist-get s :pending)) (plist-get st :sessions)))))))
  (let ((d (e2e-delivered id)))
    (e2e-say "delivered %s %d exit %s" id (length d) (plist-get (plist-get (car d) :attrs) :exit-code))))
(defvar e2e-obs (e2e-start-server "the second start"))
(let ((id (plist-get (plist-get e2e-obs :facts) :execution-id)))
  (e2e-say "started %s" id)
  (e2e-wait "the stop's delivery" (lambda () (e2e-delivered id)))
  (e2e-say "stopped %s %s" id (plist-get (plist-get (car (e2e-delivered id)) :attrs) :termination)))
`

// The third Emacs starts a command, the test kills the daemon, and the
// facade's next call starts a new one whose open recovers the command
// as lost.
const emacsThird = `
(defvar e2e-obs (e2e-start-server "the start"))
(let ((id (plist-get (plist-get e2e-obs :facts) :execution-id)))
  (e2e-say "started %s %s" id (plist-get (plist-get e2e-obs :facts) :pid))
  (e2e-wait "the kill" (lambda () (file-exists-p (getenv "E2E_KILLED"))))
  ;; The facade reconnects by itself; a call would start the daemon too.
  ;; One sent before Emacs saw the connection drop is answered "lost",
  ;; as it should be: the next one reconnects.
  (e2e-wait "the recovery"
            (lambda ()
              (condition-case err
                  (mevedel-execution-request e2e-session 'exec/list '(:as "user"))
                (mevedel-execution-helper-error
                 (unless (equal (plist-get (nth 2 err) :kind) "lost")
                   (signal (car err) (cdr err)))))
              (mevedel-execution-session-recovered e2e-session)))
  (dolist (f (mevedel-execution-session-recovered e2e-session))
    (e2e-say "recovered %s %s" (plist-get f :execution-id) (plist-get f :termination))))
`

// emacsRun is one batch Emacs of a test; the lines its script says
// (on stderr, prefixed E2E) are read one by one.
type emacsRun struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	errs  *testsupport.Buffer
	done  chan error
}

func startEmacs(t *testing.T, d *daemonEnv, env []string, script string) *emacsRun {
	t.Helper()
	if _, err := exec.LookPath("emacs"); err != nil {
		t.Fatalf("emacs is needed: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "script.el")
	if err := os.WriteFile(file, []byte(";; -*- lexical-binding: t -*-\n(require 'cl-lib)\n"+emacsPrelude+script), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &emacsRun{t: t, lines: make(chan string, 64), errs: &testsupport.Buffer{}, done: make(chan error, 1)}
	// SIGPIPE ignored, as an interactive Emacs has it: a batch Emacs dies
	// of it when it writes to a daemon that was just killed before it has
	// read the end of the connection, where an interactive one gets the
	// Lisp error the facade reconnects on (what these tests are about).
	e.cmd = exec.Command("sh", "-c", `trap "" PIPE; exec "$@"`, "sh",
		"emacs", "--batch", "-Q", "-L", filepath.Join(root, "elisp"), "-l", file)
	// The test's own variables come last: they win.
	e.cmd.Env = append(append(append([]string{}, d.env...), "MEVEDEL_EXEC_PROGRAM="+helperBin), env...)
	out, err := e.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, _ = e.errs.Write(append(sc.Bytes(), '\n'))
			if l, ok := strings.CutPrefix(sc.Text(), "E2E "); ok {
				e.lines <- l
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(e.lines)
		e.done <- e.cmd.Wait()
	}()
	t.Cleanup(func() { _ = e.cmd.Process.Kill() })
	return e
}

// line returns the next line the script printed that starts with prefix.
func (e *emacsRun) line(prefix string) string {
	e.t.Helper()
	timer := time.NewTimer(2 * waitBound)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-e.lines:
			if !ok {
				e.t.Fatalf("emacs ended before printing %q; its output:\n%s", prefix, e.errs.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			if strings.HasPrefix(l, "timeout") {
				e.t.Fatalf("emacs: %s; its output:\n%s", l, e.errs.String())
			}
		case <-timer.C:
			e.t.Fatalf("emacs did not print %q; its output:\n%s", prefix, e.errs.String())
		}
	}
}

// exit waits for the script to end and checks it ended well.
func (e *emacsRun) exit() {
	e.t.Helper()
	for range e.lines {
	}
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Fatalf("emacs: %v; its output:\n%s", err, e.errs.String())
		}
	case <-time.After(2 * waitBound):
		e.t.Fatalf("emacs did not exit; its output:\n%s", e.errs.String())
	}
}

func TestDaemonModeOutlivesEmacs(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	state := filepath.Join(d.home, "state")
	gate := fifo(t, "gate")
	env := []string{"E2E_STATE=" + state, "E2E_GATE=" + gate}

	// The first Emacs starts the daemon, starts a command and exits.
	first := startEmacs(t, d, env, emacsFirst)
	id := strings.Fields(first.line("started "))[1]
	first.exit()
	if d.pid() == 0 {
		t.Fatal("no daemon runs after the first Emacs exited")
	}
	ps, errOut, code := d.run("ps")
	if code != 0 || !strings.Contains(ps, id) || !strings.Contains(ps, "running") || !strings.Contains(ps, "outlives emacs") {
		t.Fatalf("ps after the first Emacs (exit %d): %s%s", code, ps, errOut)
	}
	follow := exec.Command(helperBin, "logs", id, "-f")
	follow.Env = d.env
	var followed testsupport.Buffer
	follow.Stdout, follow.Stderr = &followed, &followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()

	// The second Emacs sees it live, then gets its completion once.
	second := startEmacs(t, d, env, emacsSecond)
	if live := second.line("live "); live != "live "+id+" running" {
		t.Fatalf("the second Emacs's live table: %q, want %s running", live, id)
	}
	release(t, gate)
	if got := second.line("delivered "); got != "delivered "+id+" 1 exit 7" {
		t.Fatalf("the second Emacs: %q", got)
	}
	select {
	case err := <-followDone:
		if err != nil || followed.String() != "one\ntwo\n" {
			t.Fatalf("logs -f: %v %q", err, followed.String())
		}
	case <-time.After(waitBound):
		_ = follow.Process.Kill()
		t.Fatalf("logs -f did not end: %q", followed.String())
	}
	// A stop from the command line reaches the attached Emacs.
	id2 := strings.Fields(second.line("started "))[1]
	if out, errOut, code := d.run("stop", id2); code != 0 {
		t.Fatalf("stop: exit %d: %s%s", code, out, errOut)
	}
	if got := second.line("stopped "); got != "stopped "+id2+" stopped" {
		t.Fatalf("the second Emacs after the person's stop: %q", got)
	}
	second.exit()
}

func TestDaemonModeKilledDaemonIsRecovered(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	killed := filepath.Join(t.TempDir(), "killed")
	env := []string{"E2E_STATE=" + filepath.Join(d.home, "state"), "E2E_KILLED=" + killed}
	e := startEmacs(t, d, env, emacsThird)
	f := strings.Fields(e.line("started "))
	id := f[1]
	old := d.pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !testsupport.WaitGone(old, waitBound) {
		t.Fatal("the daemon survived SIGKILL")
	}
	if err := os.WriteFile(killed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := e.line("recovered "); got != "recovered "+id+" lost" {
		t.Fatalf("after the kill: %q", got)
	}
	e.exit()
	if pid := d.pid(); pid == 0 || pid == old {
		t.Fatalf("no new daemon (pid %d, the killed one %d)", pid, old)
	}
	// The lost command's processes were reaped by the new daemon's open.
	// (The new daemon's own login-environment capture may still run: it
	// is tagged too, and the cleanup checks that nothing is left at all.)
	if left := taggedBy(statedir.PrefixOf(id)); len(left) > 0 {
		t.Fatalf("left after recovery: %v", left)
	}
}

// The fourth Emacs meets a daemon of another version: it says so, and
// restarts it on request only once nothing runs in it.
const emacsMismatch = `
(e2e-say "mismatch %s %s" (car mevedel-execution--daemon-mismatch) (cdr mevedel-execution--daemon-mismatch))
(defvar e2e-obs nil)
(mevedel-execution-start-bash
 (lambda (obs) (setq e2e-obs obs))
 :session e2e-session :command "echo up; exec sleep 1000"
 :ready-pattern "up" :yield-time-ms 20000)
(e2e-wait "the start" (lambda () e2e-obs))
(defun e2e-pid ()
  (plist-get (mevedel-execution-call (mevedel-execution-connect) 'daemon/status nil) :pid))
(let ((id (plist-get (plist-get e2e-obs :facts) :execution-id))
      (pid (e2e-pid)))
  (e2e-say "refused %s"
           (condition-case err (progn (mevedel-execution-restart-daemon) "not")
             (user-error (cadr err))))
  (mevedel-execution-request e2e-session 'exec/stop (list :as "user" :execution-id id) 30)
  (mevedel-execution-restart-daemon)
  (e2e-say "restarted %s" (if (equal pid (e2e-pid)) "no" "yes")))
`

func TestDaemonModeVersionMismatch(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	// This Emacs's helper says it is another version than the daemon it
	// starts (the helper under test, behind it).
	wrapper := filepath.Join(t.TempDir(), "mevedel-exec")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'mevedel-exec 9.9.9 (protocol 1)'; exit 0; fi\nexec " + helperBin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"E2E_STATE=" + filepath.Join(d.home, "state"), "MEVEDEL_EXEC_PROGRAM=" + wrapper}
	e := startEmacs(t, d, env, emacsMismatch)
	if got := e.line("mismatch "); !strings.HasSuffix(got, " 9.9.9") || strings.Contains(got, "nil") {
		t.Fatalf("mismatch: %q", got)
	}
	if got := e.line("refused "); !strings.Contains(got, "1 command still running in the helper daemon") {
		t.Fatalf("a restart while a command runs: %q", got)
	}
	if got := e.line("restarted "); got != "restarted yes" {
		t.Fatalf("restart once nothing runs: %q", got)
	}
	e.exit()
	if !strings.Contains(e.errs.String(), "the helper daemon runs version") {
		t.Fatalf("the person was not told of the mismatch:\n%s", e.errs.String())
	}
}

// The first Emacs of the history test runs a person's command and a
// background one of the agent's session, each to its end, and exits.
const emacsHistoryFirst = `
(require 'mevedel-execution-panel)
(setq mevedel-execution-person-directory (getenv "E2E_PERSON"))
(let* ((default-directory (getenv "E2E_PROJECT"))
       (buffer (mevedel-execution-shell-command "echo before-restart")))
  (e2e-wait "the person's command to end"
            (lambda () (equal (plist-get (buffer-local-value 'mevedel-execution-spool--facts buffer) :state)
                              "settled")))
  (e2e-say "person %s" (buffer-local-value 'mevedel-execution-spool--execution-id buffer)))
(let (obs)
  (mevedel-execution-start-bash (lambda (o) (setq obs o)) :session e2e-session
                                :command "sleep 0.2; echo background" :label "in the background"
                                :yield-time-ms 0)
  (e2e-wait "the yield" (lambda () obs))
  (let ((id (plist-get (plist-get obs :facts) :execution-id)))
    (e2e-wait "its delivery" (lambda () (e2e-delivered id)))
    (e2e-say "background %s" id)))
`

// The second Emacs, after the restart, opens the panels of both
// sessions: the work that ended before is there, finished.
const emacsHistorySecond = `
(require 'mevedel-execution-panel)
(setq mevedel-execution-person-directory (getenv "E2E_PERSON"))
(defun e2e-rows (buffer)
  (with-current-buffer buffer
    (mapcar (lambda (e) (format "%s:%s" (car e)
                                (plist-get (mevedel-execution-panel-facts (car e)) :status)))
            tabulated-list-entries)))
(let ((default-directory (getenv "E2E_PROJECT")))
  (e2e-say "person-rows %S" (e2e-rows (mevedel-execution-panel (mevedel-execution-person-session)))))
(e2e-say "agent-rows %S" (e2e-rows (mevedel-execution-panel e2e-session)))
`

// TestDaemonModePanelShowsHistory: with the helper daemon, an Emacs
// started after another exited finds in its panels the finished work
// of before, from the session's journal: a person's command and the
// agent's background command.
func TestDaemonModePanelShowsHistory(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	project := filepath.Join(d.home, "project")
	if err := os.Mkdir(project, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"E2E_STATE=" + filepath.Join(d.home, "state"), "E2E_PROJECT=" + project + "/",
		"E2E_PERSON=" + filepath.Join(d.home, "person") + "/"}

	first := startEmacs(t, d, env, emacsHistoryFirst)
	person := strings.Fields(first.line("person "))[1]
	background := strings.Fields(first.line("background "))[1]
	first.exit()

	second := startEmacs(t, d, env, emacsHistorySecond)
	if got, want := second.line("person-rows "), `person-rows ("`+person+`:completed")`; got != want {
		t.Errorf("the person's panel after the restart: %s, want %s", got, want)
	}
	if got, want := second.line("agent-rows "), `agent-rows ("`+background+`:completed")`; got != want {
		t.Errorf("the agent session's panel after the restart: %s, want %s", got, want)
	}
	second.exit()
}

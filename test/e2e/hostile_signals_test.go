package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// startHostileSet starts what a signal must end: a pipeline, a command on
// a terminal and a script that leaves two escapees (setsid and a double
// fork), each running once the call returns. prelude goes first in the
// script (a trap, say).
func startHostileSet(t *testing.T, s *session, prelude string) []obs {
	t.Helper()
	script := filepath.Join(t.TempDir(), "tree.sh")
	if err := os.WriteFile(script, []byte(prelude+treeScript+"sleep 1002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pipe := s.mustStart("sleep 1000 | (echo ready; cat) | cat", map[string]any{"yieldMs": 0})
	s.observeUntil(pipe, "ready")
	tty := s.mustStart("echo ready; sleep 1000", map[string]any{"yieldMs": 0, "tty": true})
	s.observeUntil(tty, "ready")
	tree := s.mustStart("bash "+script, map[string]any{"yieldMs": 0})
	if pids := pidsIn(s.observeUntil(tree, "ready")); len(pids) != 2 {
		t.Fatalf("want 2 escapees, got %v", pids)
	}
	return []obs{pipe, tty, tree}
}

// waitExit waits for the helper to exit on its own.
func (h *helper) waitExit(why string) {
	h.t.Helper()
	select {
	case <-h.c.Child().Exited():
	case <-time.After(waitBound):
		h.t.Fatalf("the helper did not exit within %v after %s", waitBound, why)
	}
}

// SIGTERM, SIGINT and SIGHUP are a shutdown: every execution ends as a
// close ends it (its processes, escapees included, are gone), the journal
// says so, and the helper exits cleanly.
func TestSignalIsAShutdown(t *testing.T) {
	t.Parallel()
	for name, sig := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "SIGHUP": syscall.SIGHUP} {
		t.Run(name, func(t *testing.T) {
			h := startHelper(t)
			s := h.open(nil)
			set := startHostileSet(t, s, "")
			if n := len(testsupport.UnderHome(h.home, true)); n < 6 {
				t.Fatalf("only %d tagged processes before the signal", n)
			}
			if err := syscall.Kill(h.c.Child().Pid(), sig); err != nil {
				t.Fatal(err)
			}
			h.waitExit(sig.String())
			if code := h.c.Child().ExitCode(); code != 0 {
				t.Fatalf("exit code %d after %v, want 0\n%s", code, sig, h.stderr.String())
			}
			if left := testsupport.UnderHome(h.home, false); len(left) > 0 {
				t.Fatalf("processes left after %v: %v", sig, left)
			}
			ended := settledInJournal(t, s.stateDir)
			for _, o := range set {
				if got := ended[o.Facts.ExecutionID]; got != execution.SessionEnded {
					t.Errorf("%s (%s) settled in the journal as %q, want session-ended", o.Facts.ExecutionID, o.Facts.Command, got)
				}
			}
		})
	}
}

// SIGUSR1 writes where every goroutine is to stderr, and is no shutdown:
// the running command and the connection go on.
func TestStackDumpOnSIGUSR1KeepsServing(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("echo up; exec sleep 1000", map[string]any{"yieldMs": 0})
	s.observeUntil(o, "up")
	if err := syscall.Kill(h.c.Child().Pid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if !h.stderr.Wait(waitBound, func(s string) bool { return strings.Contains(s, "goroutine stacks end") }) {
		t.Fatalf("no stack dump on stderr:\n%s", h.stderr.String())
	}
	if log := h.stderr.String(); !strings.Contains(log, "goroutine stacks begin") || !strings.Contains(log, "goroutine 1 [") {
		t.Fatalf("the dump does not list the goroutines:\n%s", log)
	}
	if f := s.mustObserve(o.Facts.ExecutionID, nil).Facts; f.State != execution.Running {
		t.Fatalf("the command after the dump: %+v", f)
	}
	a := s.mustStart("echo after", nil)
	if !a.Final {
		out, final := s.waitFinal(a.Facts.ExecutionID, nil)
		a, a.Output = final, a.Output+out
	}
	if a.Output != "after\n" || a.Facts.Termination != execution.Exited {
		t.Fatalf("a start after the dump: %q %+v", a.Output, a.Facts)
	}
}

// A second signal while the shutdown waits on commands that ignore
// SIGTERM (under a 10-minute grace) kills them all and ends the helper at
// once.
func TestSecondSignalEndsAtOnce(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 600000})
	set := startHostileSet(t, s, "trap '' TERM\n")
	if err := syscall.Kill(h.c.Child().Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The shutdown is under way: the script ignores the SIGTERM it got.
	h.waitState(set[2].Facts.ExecutionID, execution.Stopping)
	if err := syscall.Kill(h.c.Child().Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h.waitExit("a second SIGTERM")
	// Every process got SIGKILL before the helper exited; one may still be
	// on its way out of /proc.
	if !testsupport.Poll(waitBound, func() bool { return len(testsupport.UnderHome(h.home, false)) == 0 }) {
		t.Fatalf("processes left after the second signal: %v", testsupport.UnderHome(h.home, false))
	}
	if !strings.Contains(h.stderr.String(), "SIGKILL") {
		t.Fatalf("the helper did not say it killed:\n%s", h.stderr.String())
	}
}

// `mevedel-exec run` turns Ctrl-C into the stop of its command, also
// while the start is still waiting for the yield.
func TestRunCtrlCStopsTheCommand(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	gate := fifo(t, "gate")
	var stderr testsupport.Buffer
	cmd := exec.Command(helperBin, "run", "--yield-ms", "600000", "--state-dir", filepath.Join(t.TempDir(), "state"),
		"--", "echo started > "+gate+"; sleep 1000")
	cmd.Env, cmd.Stderr = baseEnv(home), &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Reading the gate proves the command runs (the start is waiting).
	b, err := os.ReadFile(gate)
	if err != nil || !strings.Contains(string(b), "started") {
		t.Fatalf("gate: %q %v", b, err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(waitBound):
		_ = cmd.Process.Kill()
		t.Fatalf("run did not exit after Ctrl-C:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "stopped: aborted") {
		t.Fatalf("run after Ctrl-C: exit %d (want 1), stderr:\n%s", code, stderr.String())
	}
	if !testsupport.Poll(waitBound, func() bool { return len(testsupport.UnderHome(home, false)) == 0 }) {
		t.Fatalf("processes left after run: %v", testsupport.UnderHome(home, false))
	}
}

package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
)

// A daemon that leaves its group and session, clears its environment
// (so it carries no tag) and is orphaned still belongs to the execution
// that started it: stop, close, the end of its shell and recovery after
// a crash of the helper all end it.

// daemon is one hostile way to leave an execution behind.
type daemon struct {
	name    string
	command string         // starts the daemon as `sleep mark` and keeps the shell alive
	env     map[string]any // exec/start env, if any
	bare    bool           // the daemon's environment was cleared (no tag)
}

// daemons returns the three hostile daemons, each marked by a unique
// sleep duration.
func daemons(t *testing.T) (ds []daemon, marks []string) {
	t.Helper()
	base := rand.IntN(1 << 30)
	mark := func(i int) string { return fmt.Sprintf("1000.%d%d", base, i) }
	// The environment is filled past 256 KiB before the tag (which is
	// laid last) with three values just under the limit of one.
	big := map[string]any{"MEVEDEL_E2E": "1"}
	for i := range 3 {
		big[fmt.Sprintf("BIG%d", i)] = strings.Repeat("b", 120<<10)
	}
	ds = []daemon{
		{name: "setsid then env -i", command: "setsid sh -c 'exec env -i sleep " + mark(0) + "' & sleep 1000", bare: true},
		{name: "env -i then a fork whose parent exits", command: "setsid sh -c 'exec env -i sh -c \"sleep " + mark(1) + " & exit 0\"' & sleep 1000", bare: true},
		{name: "tag past 256 KiB", command: "setsid sh -c 'sleep " + mark(2) + " & exit 0' & sleep 1000", env: big},
	}
	for i := range ds {
		marks = append(marks, mark(i))
	}
	return ds, marks
}

// script writes text to a script file and returns its path: exec/start
// refuses backgrounding written in the command itself.
func script(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "daemon.sh")
	if err := os.WriteFile(p, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// running returns the live processes whose command line is
// `sleep mark`, counted from /proc.
func running(mark string) []int {
	var out []int
	for _, p := range process.Table() {
		if p.Alive() && testsupport.Cmdline(p.Pid) == "sleep "+mark {
			out = append(out, p.Pid)
		}
	}
	return out
}

// startDaemons starts every daemon in s and waits until each runs
// detached: in a session of its own, with the environment it asked for.
func startDaemons(t *testing.T, s *session, ds []daemon, marks []string) []string {
	t.Helper()
	var ids []string
	var pgids []int
	for _, d := range ds {
		extra := map[string]any{"yieldMs": 0}
		if d.env != nil {
			extra["env"] = d.env
		}
		f := s.mustStart("bash "+script(t, d.command), extra).Facts
		ids = append(ids, f.ExecutionID)
		pgids = append(pgids, f.Pgid)
	}
	for i, mark := range marks {
		var pids []int
		if !testsupport.Poll(waitBound, func() bool {
			pids = running(mark)
			return len(pids) == 1 && pgids[i] > 0 && detached(pids[0], pgids[i], ds[i].bare)
		}) {
			t.Fatalf("%s: no detached `sleep %s` within %v (found %v)", ds[i].name, mark, waitBound, pids)
		}
	}
	return ids
}

// detached reports whether pid has left the session of its execution's
// shell (group pgid), is no longer a child of what created that session
// (orphaned, when an intermediate made it), and, when bare, has an empty
// environment without the tag.
func detached(pid, pgid int, bare bool) bool {
	p, ok := process.Stat(pid)
	if !ok {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// After the name: state ppid pgrp session ...
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return false
	}
	env, _ := process.Environ(pid)
	untagged := !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, statedir.TagVar+"=") })
	return bare == untagged && sid != pgid && p.PPid != sid
}

// waitDaemonsGone waits until no `sleep mark` of marks runs.
func waitDaemonsGone(t *testing.T, what string, marks []string) {
	t.Helper()
	var left []int
	if !testsupport.Poll(waitBound, func() bool {
		left = nil
		for _, m := range marks {
			left = append(left, running(m)...)
		}
		return len(left) == 0
	}) {
		t.Fatalf("after %s, daemons still alive: %v", what, left)
	}
}

func TestDetachedDaemonsStopWithTheirExecution(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 500})
	ds, marks := daemons(t)
	ids := startDaemons(t, s, ds, marks)
	for i, id := range ids {
		var o obs
		h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id}, &o)
		if !o.Final || o.Facts.Termination != execution.Stopped {
			t.Errorf("%s: stop answered %+v", ds[i].name, o.Facts)
		}
		// Settlement waits for every member: the daemon is gone by now.
		if left := running(marks[i]); len(left) > 0 {
			t.Errorf("%s: exec/stop settled with its daemon alive: %v", ds[i].name, left)
		}
	}
	waitDaemonsGone(t, "exec/stop", marks)
}

func TestDetachedDaemonsEndWithSessionClose(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 500})
	ds, marks := daemons(t)
	startDaemons(t, s, ds, marks)
	h.mustCall("session/close", map[string]any{"sessionId": s.id}, nil)
	if left := slices.Concat(running(marks[0]), running(marks[1]), running(marks[2])); len(left) > 0 {
		t.Errorf("session/close answered with daemons alive: %v", left)
	}
	waitDaemonsGone(t, "session/close", marks)
}

func TestDetachedDaemonsEndWithShutdown(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 500})
	ds, marks := daemons(t)
	startDaemons(t, s, ds, marks)
	if err := h.c.Shutdown(waitBound); err != nil {
		t.Fatal(err)
	}
	waitDaemonsGone(t, "shutdown", marks)
}

// When the shell ends by itself, what it left behind is ended before the
// execution settles: the helper adopted it as the shell exited.
func TestDaemonOutlivingItsShellEndsAtSettlement(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 500})
	mark := fmt.Sprintf("1000.%d", rand.IntN(1<<30))
	// The daemon writes to the output before the shell exits, so it runs
	// detached when the shell ends; its stdout is closed so that the output
	// reaches its end.
	cmd := "setsid sh -c 'exec env -i sh -c \"sleep " + mark + " >/dev/null 2>&1 </dev/null & echo daemon \\$!\"'; echo shell ends"
	o := s.mustStart("bash "+script(t, cmd), map[string]any{"yieldMs": 0})
	out, final := s.waitFinal(o.Facts.ExecutionID, nil)
	out = o.Output + out
	if !strings.Contains(out, "daemon ") || !strings.Contains(out, "shell ends") {
		t.Fatalf("output %q", out)
	}
	if final.Facts.Termination != execution.Exited || final.Facts.ExitCode == nil || *final.Facts.ExitCode != 0 {
		t.Errorf("final facts %+v", final.Facts)
	}
	if left := running(mark); len(left) > 0 {
		t.Fatalf("the execution settled with its daemon alive: %v", left)
	}
}

func TestRecoveryKillsDetachedDaemons(t *testing.T) {
	t.Parallel()
	h1 := startHelper(t)
	dir := t.TempDir() + "/state"
	s1 := h1.openAt(dir, map[string]any{"graceMs": 500})
	ds, marks := daemons(t)
	startDaemons(t, s1, ds, marks)
	s1.checkpoint()
	h1.kill()
	for i, m := range marks {
		if len(running(m)) != 1 {
			t.Fatalf("%s: the daemon died with the helper; the test shows nothing", ds[i].name)
		}
	}
	h2 := startHelper(t)
	var info execution.SessionInfo
	h2.mustCall("session/open", map[string]any{"sessionId": "again", "stateDir": dir}, &info)
	if len(info.Recovered) != len(ds) {
		t.Fatalf("recovered %d executions, want %d: %+v", len(info.Recovered), len(ds), info.Recovered)
	}
	for _, r := range info.Recovered {
		if r.Termination != execution.Lost || !strings.Contains(r.Reason, "killed") {
			t.Errorf("recovered %s: %s %q", r.ExecutionID, r.Termination, r.Reason)
		}
	}
	waitDaemonsGone(t, "recovery", marks)
}

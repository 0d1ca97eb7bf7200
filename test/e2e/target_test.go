package e2e

// The core remote tests against the targets whose host agent runs over
// another stream than SSH: a Podman container (target_podman_test.go)
// and sudo on this machine (target_sudo_test.go). Each place says how a
// directory is named there and how a pid of it is seen, so the same
// checks run on both.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote"
)

// targetPlace is a helper with a session and a stream target.
type targetPlace struct {
	h *helper
	s *session
	// dir makes a fresh directory the target's user may write and
	// returns its path here and its TRAMP name there.
	dir func(t *testing.T) (local, cwd string)
	// inside names a path of here as the target sees it.
	inside func(local string) string
	// target and method are the facts' target and targetMethod.
	target, method string
	// alive reports whether pid, as the target numbers it, is a live
	// process (not a zombie) there.
	alive func(pid int) bool
	// kill sends SIGKILL to pid, as the target numbers it.
	kill func(t *testing.T, pid int)
}

// waitGone waits until pid is no longer alive on p's target, within
// bound; it polls only to bound the wait.
func (p targetPlace) waitGone(pid int, bound time.Duration) bool {
	return testsupport.Poll(bound, func() bool { return !p.alive(pid) })
}

// writeScript writes text to a file of a fresh directory of p and
// returns its path as the target sees it.
func (p targetPlace) writeScript(t *testing.T, name, text string) string {
	t.Helper()
	local, _ := p.dir(t)
	f := filepath.Join(local, name)
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p.inside(f)
}

func targetEchoAndExitCodes(t *testing.T, p targetPlace) {
	local, cwd := p.dir(t)
	for _, tc := range []struct {
		cmd  string
		out  string
		code int
	}{
		{"echo hello; echo err >&2", "hello\nerr\n", 0},
		{"pwd", p.inside(local) + "\n", 0},
		{"exit 3", "", 3},
	} {
		o := p.s.mustStart(tc.cmd, map[string]any{"cwd": cwd})
		f := o.Facts
		if !o.Final || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != tc.code || o.Output != tc.out {
			t.Fatalf("%q: %q %+v", tc.cmd, o.Output, f)
		}
		if f.Target != p.target || f.TargetMethod != p.method || f.Cwd != cwd || f.RemoteMode != remote.ModeAgent || f.Pid == 0 || f.Pgid != f.Pid {
			t.Fatalf("%q: target %q method %q cwd %q mode %q pid %d pgid %d", tc.cmd, f.Target, f.TargetMethod, f.Cwd, f.RemoteMode, f.Pid, f.Pgid)
		}
		if f.TargetIncarnation == nil || f.TargetIncarnation.BootID == "" {
			t.Fatalf("%q: targetIncarnation %+v", tc.cmd, f.TargetIncarnation)
		}
	}
	o := p.s.mustStart("kill -KILL $$", map[string]any{"cwd": cwd})
	if f := o.Facts; f.Termination != execution.Signaled || f.Signal != "SIGKILL" || f.ExitCode != nil {
		t.Fatalf("kill -KILL $$: %+v", f)
	}
	// The request's env over what the transport gives.
	o = p.s.mustStart(`printf '%s|%s|%s' "$NO_COLOR" "$MEVEDEL_EXECUTION" "$MEVEDEL_E2E"`, map[string]any{"cwd": cwd, "env": map[string]string{"MEVEDEL_E2E": "1"}})
	if o.Output != "1|1|1" {
		t.Fatalf("environment %q", o.Output)
	}
	o = p.s.mustStart("echo never", map[string]any{"cwd": strings.TrimSuffix(cwd, p.inside(local)) + "/nonexistent/dir"})
	if f := o.Facts; f.Termination != execution.SpawnFailed || !strings.Contains(f.Reason, "working directory") {
		t.Fatalf("missing directory: %+v", o)
	}
}

func targetYieldThenPoll(t *testing.T, p targetPlace) {
	local, cwd := p.dir(t)
	gate := filepath.Join(local, "gate")
	if err := mkfifo(gate); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(gate, 0o666) // the target's user may be another uid
	o := p.s.mustStart("echo started; cat "+p.inside(gate)+" >/dev/null; echo finished", map[string]any{"cwd": cwd, "yieldMs": 0})
	if o.Final || !o.Facts.Yielded {
		t.Fatalf("want a yielded execution, got %+v", o)
	}
	if out := p.s.observeUntil(o, "started"); out != "started\n" {
		t.Fatalf("output before the gate: %q", out)
	}
	running := p.s.mustObserve(o.Facts.ExecutionID, nil).Facts
	if running.State != execution.Running || !p.alive(running.Pid) {
		t.Fatalf("running facts: %+v", running)
	}
	release(t, gate)
	rest, final := p.s.waitFinal(o.Facts.ExecutionID, nil)
	if rest != "finished\n" || final.Facts.Status != execution.StatusCompleted {
		t.Fatalf("final %q %+v", rest, final.Facts)
	}
}

func targetInput(t *testing.T, p targetPlace) {
	_, cwd := p.dir(t)
	o := p.s.mustStart(`[ -t 0 ] && echo tty; read -r line; echo "got:$line"`, map[string]any{"cwd": cwd, "yieldMs": 0, "tty": true})
	id := o.Facts.ExecutionID
	p.s.observeUntil(o, "tty")
	// Blocked reading its terminal: the host agent says so.
	if f := p.h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.WaitingForInput }); f.Prompt != "" {
		t.Fatalf("prompt %q", f.Prompt)
	}
	typed := p.s.mustObserve(id, map[string]any{"chars": "hello\n"})
	out, final := p.s.waitFinal(id, nil)
	if !strings.Contains(typed.Output+out, "got:hello") || final.Facts.Status != execution.StatusCompleted {
		t.Fatalf("pty: %q %+v", typed.Output+out, final.Facts)
	}
	o = p.s.mustStart("echo ready; sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0, "tty": true})
	p.s.observeUntil(o, "ready")
	p.s.mustObserve(o.Facts.ExecutionID, map[string]any{"chars": "\u0003"})
	if _, final := p.s.waitFinal(o.Facts.ExecutionID, nil); final.Facts.Signal != "SIGINT" {
		t.Fatalf("pty Ctrl-C: %+v", final.Facts)
	}
	if o := p.s.mustStart("cat; echo eof", map[string]any{"cwd": cwd}); o.Output != "eof\n" {
		t.Fatalf("stdin not at EOF: %q", o.Output)
	}
}

func targetStopLeavesNoSurvivor(t *testing.T, p targetPlace) {
	_, cwd := p.dir(t)
	script := p.writeScript(t, "tree.sh", "sleep 1003 & echo \"pid $!\"\n"+treeScript+"sleep 1002\n")
	o := p.s.mustStart("bash "+script, map[string]any{"cwd": cwd, "yieldMs": 0})
	out := p.s.observeUntil(o, "ready")
	pids := pidsIn(out)
	if len(pids) != 3 {
		t.Fatalf("want 3 pids in %q", out)
	}
	running := p.s.mustObserve(o.Facts.ExecutionID, nil).Facts
	for _, pid := range append(pids, running.Pid) {
		if !p.alive(pid) {
			t.Fatalf("process %d not running before the stop", pid)
		}
	}
	var final obs
	p.h.mustCall("exec/stop", map[string]any{"sessionId": p.s.id, "executionId": o.Facts.ExecutionID}, &final)
	if f := final.Facts; !final.Final || f.Termination != execution.Stopped || f.Signal != "SIGTERM" {
		t.Fatalf("stop: %+v", final)
	}
	for _, pid := range append(pids, running.Pid) {
		if !p.waitGone(pid, 5*time.Second) {
			t.Fatalf("process %d survived the stop", pid)
		}
	}
}

func targetLingeringDescendantsCleaned(t *testing.T, p targetPlace) {
	_, cwd := p.dir(t)
	script := p.writeScript(t, "linger.sh", "sleep 1003 >/dev/null & echo \"pid $!\"\n"+treeScript+"exit 4\n")
	o := p.s.mustStart("bash "+script, map[string]any{"cwd": cwd})
	if f := o.Facts; !o.Final || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 4 {
		t.Fatalf("want exited 4, got %+v", f)
	}
	pids := pidsIn(o.Output)
	if len(pids) != 3 {
		t.Fatalf("want 3 pids in %q", o.Output)
	}
	for _, pid := range pids {
		if !p.waitGone(pid, 5*time.Second) {
			t.Fatalf("descendant %d survived the shell's exit", pid)
		}
	}
}

// The agent's stream cut during a run (its agent killed): the end is
// unknown, never completed, and the command, found again through a new
// agent in the same incarnation, is stopped.
func targetTransportLossIsUnknown(t *testing.T, p targetPlace) {
	_, cwd := p.dir(t)
	// The shell's parent is the host agent (the shim became the shell).
	o := p.s.mustStart("echo agent $PPID; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	out := p.s.observeUntil(o, "agent")
	leader := p.s.mustObserve(o.Facts.ExecutionID, nil).Facts.Pid
	var agentPid int
	if _, err := fmt.Sscanf(out, "agent %d", &agentPid); err != nil || agentPid <= 1 {
		t.Fatalf("no agent pid in %q", out)
	}
	p.kill(t, agentPid)
	_, final := p.s.waitFinal(o.Facts.ExecutionID, nil)
	if f := final.Facts; f.Termination != execution.Unknown || f.ExitCode != nil || f.Signal != "" || !strings.Contains(f.Reason, "lost") {
		t.Fatalf("transport loss: %+v", f)
	}
	if !p.waitGone(leader, 5*time.Second) {
		t.Fatalf("the orphaned command %d still runs", leader)
	}
}

// A yielded execution's output is published where it runs, by its host
// agent (no SFTP there): private, complete at settlement, appended to.
func targetArtifactPublished(t *testing.T, p targetPlace) {
	local, cwd := p.dir(t)
	art := filepath.Join(local, "artifacts")
	// The state directory beside the place's own, where the helper's
	// user may write (the target's may be another).
	id := fmt.Sprintf("art%d", time.Now().UnixNano())
	var info execution.SessionInfo
	p.h.mustCall("session/open", map[string]any{"sessionId": id, "stateDir": filepath.Join(filepath.Dir(p.s.stateDir), id),
		"remoteArtifactDir": p.inside(art)}, &info)
	s := &session{h: p.h, id: id, stateDir: info.StateDir, prefix: info.IDPrefix}
	gate := filepath.Join(local, "gate")
	if err := mkfifo(gate); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(gate, 0o666) // the target's user may be another uid
	o := s.mustStart("echo first; cat "+p.inside(gate)+" >/dev/null; echo second", map[string]any{"cwd": cwd, "yieldMs": 0})
	eid := o.Facts.ExecutionID
	s.observeUntil(o, "first")
	published := filepath.Join(art, "executions", eid+".log")
	live := p.h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == eid && f.PublishedPath != "" })
	if live.PublishedPath != p.inside(published) {
		t.Fatalf("publishedPath %q, want %q", live.PublishedPath, p.inside(published))
	}
	waitFile(t, published, "first\n")
	for path, mode := range map[string]os.FileMode{published: 0o600, filepath.Dir(published): 0o700, art: 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v %v, want %v", path, fi.Mode().Perm(), err, mode)
		}
	}
	// Mark the copy: only new bytes are appended after it.
	ino := inode(t, published)
	f, err := os.OpenFile(published, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("F"), 0)
	f.Close()
	release(t, gate)
	_, final := s.waitFinal(eid, nil)
	if final.Facts.PublishedPath != p.inside(published) || final.Facts.Status != execution.StatusCompleted {
		t.Fatalf("final: %+v", final.Facts)
	}
	if b, err := os.ReadFile(published); err != nil || string(b) != "First\nsecond\n" {
		t.Fatalf("published %q, %v", b, err)
	}
	if inode(t, published) != ino {
		t.Fatal("the published file was replaced instead of appended to")
	}
}

// targetCore runs the core checks at the place each subtest makes.
func targetCore(t *testing.T, place func(t *testing.T) targetPlace) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, targetPlace)
	}{
		{"EchoAndExitCodes", targetEchoAndExitCodes},
		{"YieldThenPoll", targetYieldThenPoll},
		{"Input", targetInput},
		{"StopLeavesNoSurvivor", targetStopLeavesNoSurvivor},
		{"LingeringDescendantsCleaned", targetLingeringDescendantsCleaned},
		{"TransportLossIsUnknown", targetTransportLossIsUnknown},
		{"ArtifactPublished", targetArtifactPublished},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.f(t, place(t))
		})
	}
}

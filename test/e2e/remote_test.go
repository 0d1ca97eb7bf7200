package e2e

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/test/sshd"
	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/crypto/ssh"
)

// The fixture's sshd runs on this machine as the current user, so what a
// remote command leaves behind is visible in this machine's /proc.

// inModes runs a remote test twice: with the host agent (subtest
// "agent") and with the wrapper forced (subtest "wrapper").
func inModes(t *testing.T, f func(t *testing.T)) {
	for _, m := range []string{remote.ModeAgent, remote.ModeWrapper} {
		t.Run(m, f)
	}
}

// hopMode is the subtest of inModesAndHop that reaches its host through a
// jump host, a two-hop chain, with the host agent.
const hopMode = "hop"

// inModesAndHop runs a remote test as inModes does, and a third time
// (subtest "hop") through a two-hop SSH chain: the same guarantees hold
// behind a jump host.
func inModesAndHop(t *testing.T, f func(t *testing.T)) {
	inModes(t, f)
	t.Run(hopMode, f)
}

// inAgentAndHop runs a test of the host agent directly (subtest "agent")
// and through a two-hop chain (subtest "hop").
func inAgentAndHop(t *testing.T, f func(t *testing.T)) {
	t.Run(remote.ModeAgent, f)
	t.Run(hopMode, f)
}

// modeOf is the remote mode a subtest of inModes runs in.
func modeOf(t *testing.T) string {
	if strings.Contains(t.Name(), "/"+remote.ModeWrapper) {
		return remote.ModeWrapper
	}
	return remote.ModeAgent
}

// jumps holds, by server, the jump host a hop subtest reaches it
// through.
var jumps sync.Map // *sshd.Server → *sshd.Server

// remoteHelper starts a private sshd and a helper whose HOME is the
// fixture's client home (known_hosts, key, ~/.ssh/config with testhost);
// in a hop subtest, a second sshd too, the jump host to the first.
func remoteHelper(t *testing.T) (*helper, *sshd.Server) {
	t.Helper()
	srv := sshd.Start(t)
	if strings.Contains(t.Name(), "/"+hopMode) {
		jump := sshd.Start(t)
		if err := jump.Admit(srv); err != nil {
			t.Fatal(err)
		}
		jumps.Store(srv, jump)
		t.Cleanup(func() { jumps.Delete(srv) })
	}
	return remoteHelperOn(t, srv), srv
}

// via is the hop before srv in TRAMP form ("ssh:me@127.0.0.1#22|"), or
// "" when it is reached directly.
func via(srv *sshd.Server) string {
	if j, ok := jumps.Load(srv); ok {
		jump := j.(*sshd.Server)
		return fmt.Sprintf("ssh:%s@127.0.0.1#%d|", jump.User, jump.Port)
	}
	return ""
}

// remoteHelperOn starts a helper for srv in the mode of t.
func remoteHelperOn(t *testing.T, srv *sshd.Server) *helper {
	t.Helper()
	h := startHelper(t, withEnv("HOME="+srv.Home, execution.RemoteModeVar+"="+modeOf(t)))
	h.home = srv.Home
	return h
}

// openRemote opens a session whose remote artifacts go to a private
// directory of this test (the host is this machine).
func openRemote(h *helper) (*session, string) {
	h.t.Helper()
	art := filepath.Join(h.t.TempDir(), "artifacts")
	return openWith(h, map[string]any{"remoteArtifactDir": art}), art
}

func openWith(h *helper, extra map[string]any) *session {
	h.t.Helper()
	id := fmt.Sprintf("s%d", time.Now().UnixNano())
	p := map[string]any{"sessionId": id, "stateDir": filepath.Join(h.t.TempDir(), "state")}
	for k, v := range extra {
		p[k] = v
	}
	var info execution.SessionInfo
	h.mustCall("session/open", p, &info)
	return &session{h: h, id: id, stateDir: info.StateDir, prefix: info.IDPrefix}
}

// tramp names dir on the fixture's server by address (through its jump
// host in a hop subtest).
func tramp(srv *sshd.Server, dir string) string { return trampAt(srv, srv.Port, dir) }

// trampAt names dir on port of 127.0.0.1 as srv's user, through srv's
// jump host in a hop subtest.
func trampAt(srv *sshd.Server, port int, dir string) string {
	return fmt.Sprintf("/%sssh:%s@127.0.0.1#%d:%s", via(srv), srv.User, port, dir)
}

// targetOf is the facts' target of srv: every hop, resolved.
func targetOf(srv *sshd.Server) string { return targetAt(srv, srv.Port) }

func targetAt(srv *sshd.Server, port int) string {
	return fmt.Sprintf("%sssh:%s@127.0.0.1#%d", via(srv), srv.User, port)
}

func TestRemoteEchoAndExitCodes(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteEchoAndExitCodes)
}

func testRemoteEchoAndExitCodes(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	dir := t.TempDir()
	cwd := tramp(srv, dir)
	for _, tc := range []struct {
		cmd    string
		out    string
		code   int
		status execution.Status
	}{
		{"echo hello; echo err >&2", "hello\nerr\n", 0, execution.StatusCompleted},
		{"pwd", dir + "\n", 0, execution.StatusCompleted},
		{"exit 3", "", 3, execution.StatusFailed},
	} {
		o := s.mustStart(tc.cmd, map[string]any{"cwd": cwd})
		f := o.Facts
		if !o.Final || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != tc.code || f.Status != tc.status {
			t.Fatalf("%q: %+v", tc.cmd, o)
		}
		if o.Output != tc.out {
			t.Fatalf("%q: output %q, want %q", tc.cmd, o.Output, tc.out)
		}
		if f.Target != targetOf(srv) || f.Cwd != cwd || f.Pid == 0 || f.Pgid != f.Pid {
			t.Fatalf("%q: target %q cwd %q pid %d pgid %d", tc.cmd, f.Target, f.Cwd, f.Pid, f.Pgid)
		}
		if f.RemoteMode != modeOf(t) {
			t.Fatalf("%q: remoteMode %q, want %q", tc.cmd, f.RemoteMode, modeOf(t))
		}
		if f.PublishedPath != "" {
			t.Fatalf("%q: a foreground completion was published: %q", tc.cmd, f.PublishedPath)
		}
		// Spooled on this side like any output.
		if b, err := os.ReadFile(filepath.Join(s.stateDir, "executions", f.ExecutionID+".log")); err != nil || string(b) != tc.out {
			t.Fatalf("%q: spool %q, %v", tc.cmd, b, err)
		}
	}

	o := s.mustStart("kill -KILL $$", map[string]any{"cwd": cwd})
	if f := o.Facts; f.Termination != execution.Signaled || f.Signal != "SIGKILL" || f.ExitCode != nil {
		t.Fatalf("kill -KILL $$: %+v", f)
	}

	// Signals as a login shell has them: a pipe's writer dies of SIGPIPE
	// when its reader is gone, instead of failing with EPIPE.
	o = s.mustStart(`yes | head -n1; echo "${PIPESTATUS[0]}"`, map[string]any{"cwd": cwd})
	if o.Output != "y\n141\n" {
		t.Fatalf("a pipe's writer did not die of SIGPIPE: %q", o.Output)
	}

	// The login environment of the host, the defaults over it, the
	// request's env over them.
	o = s.mustStart(`printf '%s|%s|%s|%s|%s' "$NO_COLOR" "$TERM" "$MEVEDEL_EXECUTION" "$MEVEDEL_E2E" "$HOME"`, map[string]any{"cwd": cwd})
	if want := "1|dumb|1|1|" + srv.HostHome; o.Output != want {
		t.Fatalf("environment %q, want %q", o.Output, want)
	}

	// A directory missing on the host: the command never ran.
	o = s.mustStart("echo never", map[string]any{"cwd": tramp(srv, "/nonexistent/dir")})
	if f := o.Facts; f.Termination != execution.SpawnFailed || !strings.Contains(f.Reason, "working directory") || o.Output != "" {
		t.Fatalf("missing directory: %+v", o)
	}
}

func TestRemoteYieldThenPoll(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteYieldThenPoll)
}

func testRemoteYieldThenPoll(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	gate := fifo(t, "gate")
	cwd := tramp(srv, t.TempDir())
	o := s.mustStart("echo started; cat "+gate+" >/dev/null; echo finished", map[string]any{"cwd": cwd, "yieldMs": 0, "label": "remote gated"})
	f := o.Facts
	if o.Final || !f.Yielded || f.Termination != "" || f.Target != targetOf(srv) {
		t.Fatalf("want a yielded execution, got %+v", o)
	}
	if out := s.observeUntil(o, "started"); out != "started\n" {
		t.Fatalf("output before the gate: %q", out)
	}
	running := s.mustObserve(f.ExecutionID, nil)
	if rf := running.Facts; rf.State != execution.Running || rf.Pid == 0 || rf.Pgid != rf.Pid || !testsupport.Alive(rf.Pid) {
		t.Fatalf("running facts: %+v", rf)
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 1 || list.Executions[0].ExecutionID != f.ExecutionID {
		t.Fatalf("list: %+v", list.Executions)
	}
	// The journal's row names the leader as the host knows it.
	var recs struct {
		Records []struct {
			Type        string
			ExecutionID string
			Leader      *struct {
				Pid       int
				StartTime uint64
				Target    string
			}
		}
	}
	h.mustCall("transcript/records", map[string]any{"sessionId": s.id}, &recs)
	var leaderStart uint64
	for _, r := range recs.Records {
		if r.Type == "row" && r.ExecutionID == f.ExecutionID && r.Leader != nil {
			if r.Leader.Pid != running.Facts.Pid || r.Leader.Target != targetOf(srv) {
				t.Fatalf("row leader %+v", *r.Leader)
			}
			leaderStart = r.Leader.StartTime
		}
	}
	if st, ok := process.StartTime(running.Facts.Pid); !ok || st != leaderStart {
		t.Fatalf("row leader start %d, /proc says %d (%v)", leaderStart, st, ok)
	}
	release(t, gate)
	rest, final := s.waitFinal(f.ExecutionID, nil)
	if rest != "finished\n" || final.Facts.Status != execution.StatusCompleted || *final.Facts.ExitCode != 0 {
		t.Fatalf("final %q %+v", rest, final.Facts)
	}
}

func TestRemoteInput(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteInput)
}

func testRemoteInput(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	cwd := tramp(srv, t.TempDir())

	// A terminal on the host: typed input reaches the command.
	o := s.mustStart(`[ -t 0 ] && echo tty; read -r line; echo "got:$line"`, map[string]any{"cwd": cwd, "yieldMs": 0, "tty": true})
	if !o.Facts.TTY {
		t.Fatalf("facts: %+v", o.Facts)
	}
	id := o.Facts.ExecutionID
	s.observeUntil(o, "tty")
	// The reply to the input may already carry the answer.
	typed := s.mustObserve(id, map[string]any{"chars": "hello\n"})
	out, final := s.waitFinal(id, nil)
	if !strings.Contains(typed.Output+out, "got:hello") || final.Facts.Status != execution.StatusCompleted {
		t.Fatalf("pty: %q %+v", typed.Output+out, final.Facts)
	}
	// Ctrl-C through the remote terminal.
	o = s.mustStart("echo ready; sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0, "tty": true})
	s.observeUntil(o, "ready")
	s.mustObserve(o.Facts.ExecutionID, map[string]any{"chars": "\u0003"})
	if _, final := s.waitFinal(o.Facts.ExecutionID, nil); final.Facts.Signal != "SIGINT" {
		t.Fatalf("pty Ctrl-C: %+v", final.Facts)
	}

	// Pipe mode: stdin at EOF, only Ctrl-C, which reaches the group.
	if o := s.mustStart("cat; echo eof", map[string]any{"cwd": cwd}); o.Output != "eof\n" {
		t.Fatalf("stdin not at EOF: %q", o.Output)
	}
	o = s.mustStart("trap 'echo got-int; exit 130' INT; echo ready; while :; do sleep 0.05; done", map[string]any{"cwd": cwd, "yieldMs": 0})
	id = o.Facts.ExecutionID
	s.observeUntil(o, "ready")
	h.wantError("exec/observe", map[string]any{"sessionId": s.id, "executionId": id, "chars": "y\n"}, -32003, "refused")
	typed = s.mustObserve(id, map[string]any{"chars": "\u0003"})
	out, final = s.waitFinal(id, nil)
	if f := final.Facts; !strings.Contains(typed.Output+out, "got-int") || f.Termination != execution.Exited || *f.ExitCode != 130 {
		t.Fatalf("trapped Ctrl-C: %q %+v", typed.Output+out, f)
	}
}

// Descendants that outlive the shell, escaped or not, are found on the
// host (the await's snapshot plus what was created since) and cleaned up;
// the termination stays the shell's exit.
func TestRemoteLingeringDescendantsCleaned(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteLingeringDescendantsCleaned)
}

func testRemoteLingeringDescendantsCleaned(t *testing.T) {
	h, srv := remoteHelper(t)
	s := openWith(h, map[string]any{"limits": map[string]any{"graceMs": 500}, "remoteArtifactDir": t.TempDir()})
	script := filepath.Join(t.TempDir(), "linger.sh")
	tree := "sleep 1003 >/dev/null & echo \"pid $!\"\n" + treeScript + "exit 4\n"
	if err := os.WriteFile(script, []byte(tree), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, map[string]any{"cwd": tramp(srv, t.TempDir())})
	f := o.Facts
	if !o.Final || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 4 {
		t.Fatalf("want exited 4, got %+v", f)
	}
	pids := pidsIn(o.Output)
	if len(pids) != 3 {
		t.Fatalf("want 3 pids in %q", o.Output)
	}
	for _, p := range pids {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Fatalf("descendant %d survived the shell's exit", p)
		}
	}
}

func TestRemoteStopLeavesNoSurvivor(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteStopLeavesNoSurvivor)
}

func testRemoteStopLeavesNoSurvivor(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	script := filepath.Join(t.TempDir(), "tree.sh")
	// Children in the group, and escapees by setsid and by a double fork.
	tree := "sleep 1003 & echo \"pid $!\"\n" + treeScript + "sleep 1002\n"
	if err := os.WriteFile(script, []byte(tree), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0})
	out := s.observeUntil(o, "ready")
	pids := pidsIn(out)
	if len(pids) != 3 {
		t.Fatalf("want 3 pids in %q", out)
	}
	running := s.mustObserve(o.Facts.ExecutionID, nil).Facts
	for _, p := range append(pids, running.Pid) {
		if !testsupport.Alive(p) {
			t.Fatalf("process %d not running before the stop", p)
		}
	}
	var final obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, &final)
	f := final.Facts
	if !final.Final || f.Termination != execution.Stopped || f.Status != execution.StatusStopped || f.Signal != "SIGTERM" {
		t.Fatalf("stop: %+v", final)
	}
	// Settled means nothing of it runs on the host any more.
	for _, p := range append(pids, running.Pid) {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Fatalf("process %d survived the stop", p)
		}
	}
}

// zombieScript leaves its group with one zombie only: a child P forks Z,
// which exits; P waits until Z is a zombie, leaves the group (setsid),
// closes the output and becomes an untraced `sleep` (env -i) that never
// reaps Z. The leader prints both pids and exits 0.
const zombieScript = `use POSIX ();
pipe(my $r, my $w) or die "pipe: $!";
my $p = fork // die "fork: $!";
if ($p == 0) {
  close $r;
  my $z = fork // die "fork: $!";
  POSIX::_exit(0) if $z == 0;
  for (;;) {
    open(my $f, '<', "/proc/$z/stat") or die "stat: $!";
    my $s = <$f>;
    last if (split ' ', ($s =~ s/.*\) //sr))[0] eq 'Z';
    select(undef, undef, undef, 0.001);
  }
  POSIX::setsid();
  open STDIN, '<', '/dev/null'; open STDOUT, '>', '/dev/null'; open STDERR, '>', '/dev/null';
  print $w "zombie $z\nparent $$\n"; close $w;
  exec { '/usr/bin/env' } 'env', '-i', '/bin/sleep', '1000';
  POSIX::_exit(127);
}
close $w;
print while <$r>;
`

// A group whose only member left is a zombie is dead: the execution
// settles at once, without the grace (a minute here) that a live member
// would cost.
func TestRemoteZombieOnlyGroupSettlesAtOnce(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteZombieOnlyGroupSettlesAtOnce)
}

func testRemoteZombieOnlyGroupSettlesAtOnce(t *testing.T) {
	h, srv := remoteHelper(t)
	s := openWith(h, map[string]any{"limits": map[string]any{"graceMs": 60000}, "remoteArtifactDir": t.TempDir()})
	script := filepath.Join(t.TempDir(), "zombie.pl")
	if err := os.WriteFile(script, []byte(zombieScript), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("perl "+script, map[string]any{"cwd": tramp(srv, t.TempDir())})
	pids := labelled(o.Output)
	zombie, parent := pids["zombie"], pids["parent"]
	if zombie == 0 || parent == 0 {
		t.Fatalf("no pids in %q", o.Output)
	}
	t.Cleanup(func() { syscall.Kill(parent, syscall.SIGKILL) })
	f := o.Facts
	if !o.Final || f.Termination != execution.Exited || *f.ExitCode != 0 {
		t.Fatalf("want exited 0 at once, got %+v", o)
	}
	if modeOf(t) == remote.ModeAgent {
		// The agent runs the local code, which may know the parent by
		// descent (when it saw it before the leader's exit) and then stops
		// it with its zombie: the wrapper's case, a group of one zombie
		// and nothing provably ours, is not one the agent meets.
		return
	}
	// Through the wrapper, membership is proven by group and tag only. It
	// settled while the zombie was still in the group: the case tested.
	if st, ok := process.Stat(zombie); !ok || st.State != 'Z' || st.Pgrp != f.Pgid {
		t.Fatalf("process %d: state %c group %d (%v); want a zombie of group %d", zombie, st.State, st.Pgrp, ok, f.Pgid)
	}
	if !testsupport.Alive(parent) {
		t.Fatalf("the zombie's parent %d (not ours to prove) was signalled", parent)
	}
}

// Connection failures answer the start request with unavailable and
// register nothing; the message says what known_hosts said.
func TestRemoteHostKeyAndReachability(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteHostKeyAndReachability)
}

func testRemoteHostKeyAndReachability(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	start := map[string]any{"sessionId": s.id, "command": "echo never", "cwd": tramp(srv, "/tmp"), "env": map[string]string{"MEVEDEL_E2E": "1"}}

	if err := srv.WriteKnownHosts(nil); err != nil {
		t.Fatal(err)
	}
	e := h.wantError("exec/start", start, -32005, "unavailable")
	for _, want := range []string{"unknown", "known_hosts", srv.Addr, srv.HostKeyFingerprint} {
		if !strings.Contains(e.Message, want) {
			t.Fatalf("unknown host key: message %q does not name %q", e.Message, want)
		}
	}
	pub, _, _ := ed25519.GenerateKey(nil)
	other, _ := ssh.NewPublicKey(pub)
	if err := srv.WriteKnownHosts(other); err != nil {
		t.Fatal(err)
	}
	e = h.wantError("exec/start", start, -32005, "unavailable")
	for _, want := range []string{"changed", srv.Addr, srv.HostKeyFingerprint} {
		if !strings.Contains(e.Message, want) {
			t.Fatalf("changed host key: message %q does not name %q", e.Message, want)
		}
	}
	// Nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start["cwd"] = trampAt(srv, closed, "/tmp")
	e = h.wantError("exec/start", start, -32005, "unavailable")
	if !strings.Contains(e.Message, strconv.Itoa(closed)) {
		t.Fatalf("unreachable host: message %q does not name the port", e.Message)
	}
	// None of them became an execution.
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	logs, _ := filepath.Glob(filepath.Join(s.stateDir, "executions", "*"))
	if len(list.Executions) != 0 || len(logs) != 0 {
		t.Fatalf("executions %+v, logs %v", list.Executions, logs)
	}

	// The key is known again: the same helper connects.
	if err := srv.WriteKnownHosts(srv.HostKey); err != nil {
		t.Fatal(err)
	}
	start["cwd"] = tramp(srv, "/tmp")
	start["command"] = "echo back"
	var o obs
	h.mustCall("exec/start", start, &o)
	if o.Output != "back\n" || o.Facts.Status != execution.StatusCompleted {
		t.Fatalf("after the key was restored: %+v", o)
	}
}

// A host that accepts the connection and then says nothing keeps the
// dial waiting; the helper still answers other requests, and a cancel
// aborts the start like any other before its yield.
func TestRemoteConnectNeverBlocksTheHelper(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteConnectNeverBlocksTheHelper)
}

func testRemoteConnectNeverBlocksTheHelper(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := silent.Accept(); err == nil {
			accepted <- c
		}
	}()
	port := silent.Addr().(*net.TCPAddr).Port
	done := make(chan obs, 1)
	go func() {
		var o obs
		err := h.c.Call(context.Background(), "exec/start",
			map[string]any{"sessionId": s.id, "command": "echo never", "cwd": trampAt(srv, port, "/tmp"), "env": map[string]string{"MEVEDEL_E2E": "1"}},
			&o, jsonrpc2.PickID(jsonrpc2.ID{Str: "slow-host", IsString: true}))
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	var c net.Conn
	select {
	case c = <-accepted:
		defer c.Close()
	case <-time.After(waitBound):
		t.Fatal("the helper did not dial")
	}
	// The dial is in progress: requests behind it are served.
	var res struct{ Class string }
	h.mustCall("exec/analyze", map[string]any{"command": "ls"}, &res)
	if o := s.mustStart("echo local", nil); o.Output != "local\n" {
		t.Fatalf("a local command behind the dial: %+v", o)
	}
	if err := h.c.Notify(context.Background(), "$/cancelRequest", map[string]any{"id": "slow-host"}); err != nil {
		t.Fatal(err)
	}
	var o obs
	select {
	case o = <-done:
	case <-time.After(waitBound):
		t.Fatal("the cancelled start got no reply")
	}
	if f := o.Facts; !o.Final || f.Termination != execution.Aborted || f.Pid != 0 || f.Target != targetAt(srv, port) {
		t.Fatalf("cancelled while connecting: %+v", o)
	}
}

func TestRemoteSSHConfigAlias(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteSSHConfigAlias)
}

func testRemoteSSHConfigAlias(t *testing.T) {
	h, srv := remoteHelper(t)
	// The only key is one that just the alias names: every connection
	// made for an execution must use it, also the new one that cleans up
	// after a cut.
	sshDir := filepath.Join(srv.Home, ".ssh")
	special := filepath.Join(sshDir, "alias_key")
	if err := os.Rename(filepath.Join(sshDir, "id_ed25519"), special); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n", sshd.Alias, srv.Port, srv.User, special)
	cwd := "/ssh:" + sshd.Alias + ":"
	if j, ok := jumps.Load(srv); ok {
		// The jump host by an alias of its own, with the same key.
		conf += fmt.Sprintf("Host jumphost\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n", j.(*sshd.Server).Port, srv.User, special)
		cwd = "/ssh:jumphost|scp:" + sshd.Alias + ":"
	}
	if err := os.WriteFile(filepath.Join(sshDir, "config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := openRemote(h)
	dir := t.TempDir()
	cwd += dir
	o := s.mustStart("pwd; echo $USER", map[string]any{"cwd": cwd})
	f := o.Facts
	if o.Output != dir+"\n"+srv.User+"\n" || f.Status != execution.StatusCompleted {
		t.Fatalf("through the alias: %+v", o)
	}
	// The facts name the host the alias resolves to; cwd stays as given.
	if f.Target != targetOf(srv) || f.Cwd != cwd {
		t.Fatalf("target %q cwd %q", f.Target, f.Cwd)
	}

	o = s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	s.observeUntil(o, "started")
	leader := s.mustObserve(o.Facts.ExecutionID, nil).Facts.Pid
	if srv.KillConnections() == 0 {
		t.Fatal("no connection to cut")
	}
	if _, final := s.waitFinal(o.Facts.ExecutionID, nil); final.Facts.Termination != execution.Unknown {
		t.Fatalf("after the cut: %+v", final.Facts)
	}
	if !testsupport.WaitGone(leader, 5*time.Second) {
		t.Fatalf("the orphaned command %d still runs: the cleanup did not reconnect with the alias's key", leader)
	}
}

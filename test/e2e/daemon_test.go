package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
)

// daemonEnv is one user's private world for a daemon: a HOME and a
// runtime directory (the daemon's socket lives under it).
type daemonEnv struct {
	t       *testing.T
	home    string
	runtime string
	env     []string
	log     *testsupport.Buffer
}

func newDaemonEnv(t *testing.T) *daemonEnv {
	t.Helper()
	root := t.TempDir()
	d := &daemonEnv{t: t, home: filepath.Join(root, "home"), runtime: filepath.Join(root, "run"), log: &testsupport.Buffer{}}
	for _, dir := range []string{d.home, d.runtime} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	d.env = append(baseEnv(d.home), "XDG_RUNTIME_DIR="+d.runtime)
	t.Cleanup(d.stopAll)
	return d
}

func (d *daemonEnv) sock() string { return filepath.Join(d.runtime, "mevedel-exec", "daemon.sock") }

// start runs `mevedel-exec daemon` as a person would (it detaches) and
// returns the socket path it printed.
func (d *daemonEnv) start(args ...string) string {
	d.t.Helper()
	out, errOut, code := d.run(append([]string{"daemon"}, args...)...)
	if code != 0 {
		d.t.Fatalf("mevedel-exec daemon: exit %d: %s", code, errOut)
	}
	if got := strings.TrimSpace(out); got != d.sock() {
		d.t.Fatalf("daemon printed %q, want %q", got, d.sock())
	}
	return d.sock()
}

// run runs the helper binary with args in this environment.
func (d *daemonEnv) run(args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	return d.runWith(nil, args...)
}

func (d *daemonEnv) runWith(attr *syscall.SysProcAttr, args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, helperBin, args...)
	cmd.Env = d.env
	cmd.SysProcAttr = attr
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		d.t.Fatalf("%v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// logText is the daemon's log file.
func (d *daemonEnv) logText() string {
	b, _ := os.ReadFile(filepath.Join(d.runtime, "mevedel-exec", "daemon.log"))
	return string(b)
}

// dial connects a client and shakes hands; notes records what it gets.
func (d *daemonEnv) dial(notes *noteLog) (*client.Client, rpc.InitializeResult) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var h client.Handler
	if notes != nil {
		h = notes.add
	}
	c, err := client.Dial(ctx, d.sock(), h)
	if err != nil {
		d.t.Fatal(err)
	}
	var info rpc.InitializeResult
	if err := c.Call(ctx, "initialize", map[string]any{"protocolVersion": rpc.ProtocolVersion}, &info); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Close() })
	return c, info
}

// pid returns the running daemon's pid, 0 when none answers.
func (d *daemonEnv) pid() int {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c, err := client.Dial(ctx, d.sock(), nil)
	if err != nil {
		return 0
	}
	defer c.Close()
	var st rpc.DaemonStatusResult
	if err := c.Call(ctx, "daemon/status", nil, &st); err != nil {
		return 0
	}
	return st.Pid
}

// stopAll ends the daemon in order (SIGTERM: a shutdown) and checks that
// it left no process and no race or panic in its log.
func (d *daemonEnv) stopAll() {
	t := d.t
	if pid := d.pid(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if !testsupport.WaitGone(pid, waitBound) {
			t.Errorf("daemon %d did not exit after SIGTERM", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if log := d.logText(); strings.Contains(log, "DATA RACE") || strings.Contains(log, "panic") || strings.Contains(log, "BUG") {
		t.Errorf("daemon log:\n%s", log)
	} else if t.Failed() {
		t.Logf("daemon log:\n%s", log)
	}
	if left := testsupport.UnderHome(d.home, true); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
		for _, p := range left {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	}
}

// noteLog records a client's notifications.
type noteLog struct {
	mu    sync.Mutex
	cond  *sync.Cond
	notes []note
}

func newNoteLog() *noteLog {
	l := &noteLog{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *noteLog) add(_ *client.Client, n note) {
	l.mu.Lock()
	l.notes = append(l.notes, n)
	l.cond.Broadcast()
	l.mu.Unlock()
}

// wait waits for a notification that satisfies match.
func (l *noteLog) wait(t *testing.T, what string, match func(note) bool) note {
	t.Helper()
	timer := time.AfterFunc(waitBound, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(waitBound)
	l.mu.Lock()
	defer l.mu.Unlock()
	for seen := 0; ; {
		for ; seen < len(l.notes); seen++ {
			if match(l.notes[seen]) {
				return l.notes[seen]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, waitBound)
		}
		l.cond.Wait()
	}
}

// deliveries returns the mailbox/deliver notifications of execution id.
func (l *noteLog) deliveries(id string) []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []delivery
	for _, n := range l.notes {
		var d delivery
		if n.Method == "mailbox/deliver" && json.Unmarshal(n.Params, &d) == nil && d.Attrs.ExecutionID == id {
			out = append(out, d)
		}
	}
	return out
}

func (l *noteLog) waitDelivery(t *testing.T, id string) delivery {
	t.Helper()
	var d delivery
	l.wait(t, "delivery of "+id, func(n note) bool {
		return n.Method == "mailbox/deliver" && json.Unmarshal(n.Params, &d) == nil && d.Attrs.ExecutionID == id
	})
	return d
}

func call(t *testing.T, c *client.Client, method string, params, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := c.Call(ctx, method, params, result); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

// startGated starts command behind a gate, yielded at once.
func startGated(t *testing.T, c *client.Client, sid, cwd, command string, extra map[string]any) (obs, string) {
	t.Helper()
	gate := fifo(t, "gate")
	p := map[string]any{"sessionId": sid, "command": "read -r _ < " + gate + "; " + command, "yieldMs": 0, "cwd": cwd, "env": map[string]string{"MEVEDEL_E2E": "1"}}
	for k, v := range extra {
		p[k] = v
	}
	var o obs
	call(t, c, "exec/start", p, &o)
	if o.Final {
		t.Fatalf("start ended at once: %+v", o)
	}
	return o, gate
}

// The daemon detaches, keeps a session and its command running after
// the client that started it has gone, and a second client's open of the
// same state directory attaches: the same idPrefix, the command listed
// live, and its completion delivered once to that agent client. ps
// lists it meanwhile, and logs -f prints its output to its end.
func TestDaemonSessionOutlivesItsClient(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	if fi, err := os.Stat(filepath.Dir(d.sock())); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("daemon directory: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Lstat(d.sock()); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket: %v %v", fi.Mode(), err)
	}
	// A second start finds it running and says where it is.
	first := d.pid()
	d.start()
	if d.pid() != first {
		t.Fatal("a second daemon start replaced the running daemon")
	}

	stateDir := filepath.Join(d.home, "state")
	sid := "outlive"
	a, _ := d.dial(nil)
	var info execution.SessionInfo
	call(t, a, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, &info)
	o, gate := startGated(t, a, sid, d.home, "for i in 1 2 3; do echo line $i; done; echo done; exit 3", map[string]any{"label": "outlived"})
	id := o.Facts.ExecutionID
	a.Close()

	// The command runs on without any client.
	notes := newNoteLog()
	b, _ := d.dial(notes)
	var again execution.SessionInfo
	call(t, b, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, &again)
	if !again.Attached || again.IDPrefix != info.IDPrefix || len(again.Recovered) != 0 {
		t.Fatalf("reopen did not attach: %+v (first open %+v)", again, info)
	}
	if len(again.Live) != 1 || again.Live[0].ExecutionID != id || again.Live[0].State == execution.Settled {
		t.Fatalf("live executions in the reply: %+v", again.Live)
	}

	ps, errOut, code := d.run("ps")
	if code != 0 || !strings.Contains(ps, id) || !strings.Contains(ps, "outlived") || !strings.Contains(ps, "running") {
		t.Fatalf("ps (exit %d): %s%s", code, ps, errOut)
	}
	var rows []execution.Facts
	psJSON, _, _ := d.run("ps", "--json")
	if err := json.Unmarshal([]byte(psJSON), &rows); err != nil || len(rows) != 1 || rows[0].ExecutionID != id {
		t.Fatalf("ps --json: %v %s", err, psJSON)
	}

	// logs -f follows from before the output to the end.
	follow := exec.Command(helperBin, "logs", id, "-f")
	follow.Env = d.env
	var followed testsupport.Buffer
	follow.Stdout = &followed
	follow.Stderr = &followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	release(t, gate)

	dl := notes.waitDelivery(t, id)
	if dl.Attrs.ExitCode == nil || *dl.Attrs.ExitCode != 3 {
		t.Fatalf("delivery: %+v", dl)
	}
	call(t, b, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": dl.DeliveryID, "durable": true}, nil)
	select {
	case err := <-followDone:
		if err != nil {
			t.Fatalf("logs -f: %v: %s", err, followed.String())
		}
	case <-time.After(waitBound):
		_ = follow.Process.Kill()
		t.Fatalf("logs -f did not end when the command settled: %q", followed.String())
	}
	if got := followed.String(); got != "line 1\nline 2\nline 3\ndone\n" {
		t.Fatalf("logs -f printed %q", got)
	}
	// wait exits with its exit code, and the delivery came exactly once.
	if _, _, code := d.run("wait", id); code != 3 {
		t.Fatalf("wait: exit %d, want 3", code)
	}
	call(t, b, "exec/list", map[string]any{"sessionId": sid}, nil) // a barrier
	if n := len(notes.deliveries(id)); n != 1 {
		t.Fatalf("%d deliveries of %s, want 1", n, id)
	}
	if all, _, _ := d.run("ps", "--all"); !strings.Contains(all, id) || !strings.Contains(all, "failed (exit 3)") {
		t.Fatalf("ps --all after the end: %s", all)
	}
	if live, _, _ := d.run("ps"); strings.Contains(live, id) {
		t.Fatalf("ps lists an ended command: %s", live)
	}
	if tail, _, _ := d.run("logs", id, "--tail", "2"); tail != "line 3\ndone\n" {
		t.Fatalf("logs --tail 2: %q", tail)
	}
	if hits, _, code := d.run("grep", "line [23]"); code != 0 || strings.Count(hits, "\n") != 2 || !strings.Contains(hits, sid+":") {
		t.Fatalf("grep (exit %d): %q", code, hits)
	}
}

// A delivery pending while no agent client is attached goes to the next
// one that attaches, under the same deliveryId, and observers never get
// deliveries or wakes; a second agent replaces the first.
func TestDaemonDeliveriesGoToTheAgentClient(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	stateDir := filepath.Join(d.home, "state")
	sid := "roles"
	agentNotes, obsNotes := newNoteLog(), newNoteLog()
	agent, _ := d.dial(agentNotes)
	call(t, agent, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir, "role": "agent"}, nil)
	observer, _ := d.dial(obsNotes)
	var oi execution.SessionInfo
	call(t, observer, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir, "role": "observer"}, &oi)
	if !oi.Attached {
		t.Fatalf("observer open: %+v", oi)
	}
	o, gate := startGated(t, agent, sid, d.home, "echo out", map[string]any{"owner": "/root/sub"})
	id := o.Facts.ExecutionID
	// The observer acts with user authority: it sees another owner's
	// execution without saying so.
	var lst rpc.ExecListResult
	call(t, observer, "exec/list", map[string]any{"sessionId": sid}, &lst)
	if len(lst.Executions) != 1 || lst.Executions[0].ExecutionID != id {
		t.Fatalf("observer's list: %+v", lst)
	}
	agent.Close()
	release(t, gate)
	// The observer hears it settle; the result waits for an agent.
	obsNotes.wait(t, "settlement at the observer", func(n note) bool {
		return n.Method == "exec/settled" && strings.Contains(string(n.Params), id)
	})
	var st rpc.DaemonStatusResult
	call(t, observer, "daemon/status", nil, &st)
	if len(st.Sessions) != 1 || st.Sessions[0].Agent || st.Sessions[0].Pending != 1 || st.Sessions[0].Observers != 1 {
		t.Fatalf("status: %+v", st)
	}
	next := newNoteLog()
	agent2, _ := d.dial(next)
	call(t, agent2, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, nil)
	first := next.waitDelivery(t, id)
	// A third agent takes over before the ack: it gets the same delivery.
	third := newNoteLog()
	agent3, _ := d.dial(third)
	call(t, agent3, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, nil)
	again := third.waitDelivery(t, id)
	if again.DeliveryID != first.DeliveryID {
		t.Fatalf("resend has id %s, want %s", again.DeliveryID, first.DeliveryID)
	}
	call(t, agent3, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": again.DeliveryID, "durable": true}, nil)
	// A result of the root owner wakes it once durable: at the agent.
	o2, gate2 := startGated(t, agent3, sid, d.home, "echo woke", nil)
	release(t, gate2)
	d2 := third.waitDelivery(t, o2.Facts.ExecutionID)
	call(t, agent3, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": d2.DeliveryID, "durable": true}, nil)
	third.wait(t, "a wake at the agent", func(n note) bool {
		return n.Method == "session/wake" && strings.Contains(string(n.Params), d2.DeliveryID)
	})
	call(t, observer, "exec/list", map[string]any{"sessionId": sid}, nil)
	if n := len(obsNotes.deliveries(id)) + len(obsNotes.deliveries(o2.Facts.ExecutionID)); n != 0 {
		t.Fatalf("the observer got %d deliveries", n)
	}
	obsNotes.mu.Lock()
	for _, n := range obsNotes.notes {
		if n.Method == "session/wake" {
			t.Errorf("the observer got a wake: %s", n.Params)
		}
	}
	obsNotes.mu.Unlock()
	// An observer's close leaves; the session goes on for the agent.
	call(t, observer, "session/close", map[string]any{"sessionId": sid}, nil)
	call(t, agent3, "exec/list", map[string]any{"sessionId": sid}, nil)
	// A client that has not opened the session cannot act on it.
	stranger, _ := d.dial(nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	err := stranger.Call(ctx, "exec/list", map[string]any{"sessionId": sid}, nil)
	if e, ok := rpcError(err); !ok || errKind(e) != "not-found" {
		t.Fatalf("stranger's list: %v", err)
	}
	if err := stranger.Call(ctx, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir, "role": "boss"}, nil); err == nil {
		t.Fatal("a bad role was accepted")
	}
	if err := stranger.Call(ctx, "session/open", map[string]any{"sessionId": "other", "stateDir": stateDir}, nil); err == nil || !strings.Contains(err.Error(), "open as session") {
		t.Fatalf("a second id on an open state directory: %v", err)
	}
}

// A stop from the command line is the person's: the command ends and
// its owner, attached as the agent client, still gets the result.
func TestDaemonCLIStopDeliversToTheOwner(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	sid := "clistop"
	notes := newNoteLog()
	agent, _ := d.dial(notes)
	call(t, agent, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(d.home, "state")}, nil)
	var o obs
	call(t, agent, "exec/start", map[string]any{"sessionId": sid, "command": "echo started; exec sleep 1000", "yieldMs": 0, "cwd": d.home, "readyPattern": "started", "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o)
	id := o.Facts.ExecutionID
	out, errOut, code := d.run("stop", id)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "stopped") {
		t.Fatalf("stop (exit %d): %s%s", code, out, errOut)
	}
	dl := notes.waitDelivery(t, id)
	if dl.Attrs.Termination != execution.Stopped {
		t.Fatalf("delivery after the person's stop: %+v", dl.Attrs)
	}
	call(t, agent, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": dl.DeliveryID, "durable": true}, nil)
	if _, errOut, code := d.run("stop", "exec-nosuch-000001"); code == 0 || !strings.Contains(errOut, "no execution") {
		t.Fatalf("stop of nothing: exit %d %s", code, errOut)
	}
}

// Only the daemon's own uid is served. The directory's mode keeps
// another user out; with the directory and socket opened up, the
// SO_PEERCRED check still refuses it.
func TestDaemonRefusesAnotherUID(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Fatal("this test runs a client as another uid, which needs root")
	}
	const other = 65534 // a uid no test process runs as
	d := newDaemonEnv(t)
	d.start()
	// The other user needs to reach the binary and the runtime directory.
	bin := reachable(t, helperBin)
	for dir := d.runtime; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		_ = os.Chmod(dir, 0o755)
	}
	as := func() (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "ps")
		cmd.Env = []string{"HOME=/", "PATH=/usr/bin:/bin", "XDG_RUNTIME_DIR=" + d.runtime}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		return string(out), 0
	}
	// The private directory: the other user's client cannot even use it.
	if out, code := as(); code == 0 || !strings.Contains(out, "belongs to another user") {
		t.Fatalf("as uid %d through the private directory: exit %d: %s", other, code, out)
	}
	// Opened up, the directory and socket would let it connect: the
	// daemon refuses it by its peer credentials. The client sees the
	// directory as another user's, so it is given the socket directly.
	if err := os.Chmod(filepath.Dir(d.sock()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.sock(), 0o666); err != nil {
		t.Fatal(err)
	}
	refused := dialAs(t, d.sock(), other)
	if !strings.Contains(refused, "uid 65534 may not use this helper") {
		t.Fatalf("the daemon's answer to uid %d: %q", other, refused)
	}
	if !strings.Contains(d.logText(), "refusing a client: uid 65534") {
		t.Fatalf("no refusal in the log:\n%s", d.logText())
	}
	// The daemon's own user is still served.
	if err := os.Chmod(filepath.Dir(d.sock()), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := d.run("ps"); code != 0 {
		t.Fatalf("ps as the daemon's uid: exit %d: %s", code, errOut)
	}
}

// A daemon killed with SIGKILL leaves its session to the next daemon,
// whose open recovers it as a helper's does: the command lost, its
// processes reaped.
func TestDaemonKilledIsRecoveredByTheNext(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	stateDir := filepath.Join(d.home, "state")
	sid := "killed"
	c, _ := d.dial(nil)
	call(t, c, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, nil)
	var o obs
	call(t, c, "exec/start", map[string]any{"sessionId": sid, "command": "echo pid $$; exec sleep 1000", "yieldMs": 30000, "cwd": d.home, "readyPattern": "pid", "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o)
	id, pid := o.Facts.ExecutionID, o.Facts.Pid
	old := d.pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !testsupport.WaitGone(old, waitBound) {
		t.Fatal("the daemon survived SIGKILL")
	}
	if !testsupport.Alive(pid) {
		t.Fatal("the command died with the daemon; recovery would have nothing to reap")
	}
	d.start()
	if d.pid() == old || d.pid() == 0 {
		t.Fatal("no new daemon")
	}
	c2, _ := d.dial(nil)
	var info execution.SessionInfo
	call(t, c2, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, &info)
	if info.Attached || len(info.Recovered) != 1 || info.Recovered[0].ExecutionID != id || info.Recovered[0].Termination != execution.Lost {
		t.Fatalf("recovery after the kill: %+v", info)
	}
	if !testsupport.WaitGone(pid, waitBound) {
		t.Fatalf("the lost command's process %d was not reaped", pid)
	}
}

// A socket that takes connections but serves nothing is not a daemon: so
// looks a daemon being killed, whose listener outlives the moment its
// process shows as dead. `mevedel-exec daemon` starts a real one then,
// instead of printing the socket of one that is going away.
func TestDaemonStartsWhenTheSocketOnlyAccepts(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	if err := os.Mkdir(filepath.Dir(d.sock()), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", d.sock())
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // the new daemon replaces the file
	defer ln.Close()                               // never accepted: connects queue in its backlog
	d.start()
	if d.pid() == 0 {
		t.Fatal("the daemon command took a socket that answers nothing for a running daemon")
	}
}

// The daemon exits after its idle period with no client and nothing
// running, and never while a command runs.
func TestDaemonIdleExit(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start("--idle-exit", "1s")
	c, _ := d.dial(nil)
	sid := "idle"
	call(t, c, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(d.home, "state")}, nil)
	o, gate := startGated(t, c, sid, d.home, "echo ok", nil)
	c.Close()
	pid := d.pid()
	// With a command running and no client, it stays well past the period.
	if testsupport.WaitGone(pid, 3*time.Second) {
		t.Fatal("the daemon exited while a command ran")
	}
	c2, _ := d.dial(nil)
	call(t, c2, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(d.home, "state")}, nil)
	release(t, gate)
	var fin obs
	call(t, c2, "exec/observe", map[string]any{"sessionId": sid, "executionId": o.Facts.ExecutionID, "waitMs": 20000}, &fin)
	if !fin.Final {
		t.Fatalf("not final: %+v", fin)
	}
	// A command that settled before the observe came is delivered
	// instead, and the delivery waits for its ack as it would for Emacs;
	// one that settled while the observe waited was claimed by it.
	if fin.DeliveryID != "" {
		call(t, c2, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": fin.DeliveryID, "durable": true}, nil)
	}
	c2.Close()
	if !testsupport.WaitGone(pid, waitBound) {
		t.Fatal("the idle daemon did not exit")
	}
	if _, err := os.Lstat(d.sock()); !os.IsNotExist(err) {
		t.Fatalf("the socket stayed after the exit: %v", err)
	}
	if !strings.Contains(d.logText(), "nothing running for 1s; exiting") {
		t.Fatalf("log:\n%s", d.logText())
	}
}

// reachable copies the executable src where any user may run it. The copy
// is written by cp, not by this process: a child another parallel test
// forks while this process holds the new file open for writing inherits
// that descriptor until its own exec, and the copy's exec then fails with
// "text file busy".
func reachable(t *testing.T, src string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(src))
	if out, err := exec.Command("cp", src, bin).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v: %s", src, err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir := filepath.Dir(bin); dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		_ = os.Chmod(dir, 0o755)
	}
	return bin
}

// dialAsEnv makes this test binary a bare client (see TestMain): it
// connects to the socket named, sends initialize and prints the answer.
const dialAsEnv = "MEVEDEL_E2E_DIAL"

// dialAs runs this test binary as uid against sock and returns what the
// daemon answered.
func dialAs(t *testing.T, sock string, uid uint32) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := reachable(t, self)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{dialAsEnv + "=" + sock, "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dialling as uid %d: %v: %s", uid, err, out)
	}
	return string(out)
}

// dialMain is the bare client of dialAs: what the daemon answers, through
// the client every command-line tool uses.
func dialMain(sock string) int {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c, err := client.Dial(ctx, sock, nil)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	err = c.Call(ctx, "initialize", map[string]any{}, nil)
	fmt.Println("initialize:", err)
	return 0
}

// attach puts a tty command's terminal on the caller's: what is typed
// reaches it, what it prints comes back, and the detach key leaves it
// running.
func TestDaemonCLIAttach(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	sid := "attach"
	c, _ := d.dial(nil)
	call(t, c, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(d.home, "state")}, nil)
	var o obs
	call(t, c, "exec/start", map[string]any{"sessionId": sid, "command": "echo ask; read -r x; echo got $x; read -r y; echo bye", "tty": true, "yieldMs": 0,
		"cwd": d.home, "readyPattern": "ask", "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o)
	id := o.Facts.ExecutionID
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, helperBin, "attach", id)
	cmd.Env = d.env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut testsupport.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !out.Wait(waitBound, func(s string) bool { return strings.Contains(s, "ask") }) {
		t.Fatalf("attach showed no past output: %q %q", out.String(), errOut.String())
	}
	if _, err := stdin.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if !out.Wait(waitBound, func(s string) bool { return strings.Contains(s, "got hello") }) {
		t.Fatalf("typed input did not reach the command: %q %q", out.String(), errOut.String())
	}
	if _, err := stdin.Write([]byte{0x1c}); err != nil { // Ctrl-\
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("attach: %v: %s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "detached from "+id) {
		t.Fatalf("attach stderr: %q", errOut.String())
	}
	if ps, _, _ := d.run("ps"); !strings.Contains(ps, id) {
		t.Fatalf("the command did not go on after the detach: %s", ps)
	}
	if _, errOut, code := d.run("attach", "exec-nosuch-000001"); code == 0 || !strings.Contains(errOut, "no execution") {
		t.Fatalf("attach to nothing: %d %s", code, errOut)
	}
}

// logs reads the log of an execution the session no longer holds, by
// its address.
func TestDaemonCLILogsOfAnEndedCommand(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	sid := "oldlogs"
	notes := newNoteLog()
	c, _ := d.dial(notes)
	call(t, c, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(d.home, "state"), "limits": map[string]any{"retainMs": 1}}, nil)
	o, gate := startGated(t, c, sid, d.home, "printf 'a\\nb\\nc\\n'", nil)
	id := o.Facts.ExecutionID
	release(t, gate)
	dl := notes.waitDelivery(t, id)
	call(t, c, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": dl.DeliveryID, "durable": true}, nil)
	if !testsupport.Poll(waitBound, func() bool {
		out, _, _ := d.run("ps", "--all")
		return !strings.Contains(out, id)
	}) {
		t.Fatal("the ended command stayed held")
	}
	if out, errOut, code := d.run("logs", id); code != 0 || out != "a\nb\nc\n" {
		t.Fatalf("logs of a command no longer held (exit %d): %q %s", code, out, errOut)
	}
	if out, _, _ := d.run("logs", id, "--tail", "1"); out != "c\n" {
		t.Fatalf("logs --tail 1: %q", out)
	}
}

// The daemon's log and lock are opened right in its checked directory and
// never through a symbolic link: one planted there is refused, and what
// it points to is left as it was.
func TestDaemonLogFollowsNoLink(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"daemon.log", "daemon.lock"} {
		d := newDaemonEnv(t)
		dir := filepath.Dir(d.sock())
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("untouched\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := d.run("daemon")
		if code == 0 {
			t.Errorf("%s as a link: the daemon started: %s", name, out)
		}
		if !strings.Contains(errOut, name) {
			t.Errorf("%s as a link: the refusal does not name it: %s", name, errOut)
		}
		if got, _ := os.ReadFile(victim); string(got) != "untouched\n" {
			t.Errorf("%s as a link: its target was written: %q", name, got)
		}
	}
}

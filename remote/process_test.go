package remote

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

func TestEchoAndExitCode(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo hello; exit 3"})
	e, err := wait(t, proc)
	if err != nil || e != (process.Exit{Code: 3}) {
		t.Fatalf("exit %+v, %v; want code 3", e, err)
	}
	if got := out.all(t); got != "hello\n" {
		t.Fatalf("output %q", got)
	}
	if !proc.Exited() {
		t.Fatal("Exited is false after Wait")
	}
}

func TestStderrMergedInOrder(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo one; echo two >&2; echo three; echo four >&2"})
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	if got := out.all(t); got != "one\ntwo\nthree\nfour\n" {
		t.Fatalf("output %q", got)
	}
}

func TestEnvAndDirApplied(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	dir := filepath.Join(t.TempDir(), "a dir's $name")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tricky := "it's \"quoted\" $HOME `x` \\ \n second line"
	tag := "MEVEDEL_EXEC_TAG=env-test"
	proc, out := start(t, p, process.Spec{
		Command: `printf '%s|%s|%s|%s' "$PWD" "$FOO" "${HOME-unset}" "$MEVEDEL_EXEC_TAG"`,
		Dir:     dir,
		Env:     []string{"PATH=/usr/bin:/bin", "FOO=" + tricky},
		Tag:     tag,
	})
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	want := dir + "|" + tricky + "|unset|env-test"
	if got := out.all(t); got != want {
		t.Fatalf("output\n%q, want\n%q", got, want)
	}

	// "~" is the remote home (the fixture's private one); a nil Env keeps
	// sshd's environment.
	proc, out = start(t, p, process.Spec{Command: `printf '%s|%s' "$PWD" "$HOME"`, Dir: "~"})
	wait(t, proc)
	if home := s.HostHome; out.all(t) != home+"|"+home {
		t.Fatalf("home: %q", out.all(t))
	}
}

func TestMissingDirFailsTheStart(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	_, err := p.Start(testCtx(t), target(""), process.Spec{Command: "echo never", Dir: "/nonexistent/dir"})
	if err == nil || !strings.Contains(err.Error(), "working directory") || !strings.Contains(err.Error(), "/nonexistent/dir") {
		t.Fatalf("Start in a missing directory: %v", err)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Fatalf("a missing directory is not an unavailable host: %v", err)
	}
}

func TestIdentityLineMatchesRemoteProc(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo ready; exec sleep 1000"})
	out.waitFor(t, "ready\n")
	st, ok := process.Stat(proc.Pid())
	pgrp, startTime := st.Pgrp, st.Start
	if !ok || st.State == 'Z' {
		t.Fatalf("leader %d not running on the host", proc.Pid())
	}
	if proc.Pgid() != proc.Pid() || pgrp != proc.Pid() {
		t.Fatalf("pid %d pgid %d, /proc pgrp %d: the leader must lead its group", proc.Pid(), proc.Pgid(), pgrp)
	}
	if startTime != proc.LeaderStart() {
		t.Fatalf("start time %d, /proc says %d", proc.LeaderStart(), startTime)
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if e, _ := wait(t, proc); !e.Signaled || e.Signal != syscall.SIGKILL {
		t.Fatalf("exit %+v, want SIGKILL", e)
	}
	if got := out.all(t); got != "ready\n" {
		t.Fatalf("output %q: the identity line must not show", got)
	}
}

func TestReadIdentitySkipsLoginNoise(t *testing.T) {
	t.Parallel()
	in := "motd line\npartial\x00MEVEDEL-EXEC 12 12 345\r\nafter"
	br := bufio.NewReader(strings.NewReader(in))
	line := readIdentity(br)
	if line.err != nil || line.pid != 12 || line.pgid != 12 || line.start != 345 {
		t.Fatalf("%+v", line)
	}
	if string(line.junk) != "motd line\npartial" {
		t.Fatalf("junk %q", line.junk)
	}
	rest, _ := br.ReadString(0)
	if rest != "after" {
		t.Fatalf("rest %q", rest)
	}
	line = readIdentity(bufio.NewReader(strings.NewReader("\x00MEVEDEL-EXEC-ERR working directory: gone\n")))
	if line.failure != "working directory: gone" {
		t.Fatalf("%+v", line)
	}
}

func TestOutputStreamsBeforeTheEnd(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	proc, out := start(t, p, process.Spec{Command: "echo first; read -r x < " + shq(fifo) + "; echo second:$x"})
	out.waitFor(t, "first\n")
	if proc.Exited() {
		t.Fatal("exited before the gate opened")
	}
	if got := out.String(); got != "first\n" {
		t.Fatalf("output before the gate %q", got)
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("go\n")
	f.Close()
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	if got := out.all(t); got != "first\nsecond:go\n" {
		t.Fatalf("output %q", got)
	}
}

func TestTTYInputIsEchoed(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: `[ -t 0 ] && echo tty; read -r line; echo "got:$line"`, TTY: true})
	out.waitFor(t, "tty")
	if _, err := proc.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	got := out.all(t)
	if got != "tty\r\nhello\r\ngot:hello\r\n" {
		t.Fatalf("output %q", got)
	}

	// Pipe mode has no input.
	proc, _ = start(t, p, process.Spec{Command: "cat; echo eof"})
	if _, err := proc.Write([]byte("x")); err == nil {
		t.Fatal("Write in pipe mode succeeded")
	}
	wait(t, proc)
}

func TestSignalKillsTheTree(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	tag := "MEVEDEL_EXEC_TAG=tree-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// Two children in the group and one that left it with setsid.
	proc, out := start(t, p, process.Spec{Command: "sleep 1000 & sleep 1000 & setsid sleep 1000 & echo started; wait", Tag: tag})
	out.waitFor(t, "started\n")
	// The children may still be between fork and exec.
	var before []int
	for deadline := time.Now().Add(waitLimit); len(before) < 4; before = liveMembers(proc.Pgid(), tag) {
		if time.Now().After(deadline) {
			t.Fatalf("members %v: want the shell and three sleeps", before)
		}
	}
	if !proc.Alive() {
		t.Fatal("Alive is false while the group runs")
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if e, _ := wait(t, proc); !e.Signaled || e.Signal != syscall.SIGTERM {
		t.Fatalf("exit %+v, want SIGTERM", e)
	}
	deadline := time.Now().Add(waitLimit)
	for proc.Alive() {
		if time.Now().After(deadline) {
			t.Fatalf("still alive after SIGTERM: %v", liveMembers(proc.Pgid(), tag))
		}
	}
	if left := liveMembers(proc.Pgid(), tag); len(left) > 0 {
		t.Fatalf("survivors %v", left)
	}
	for _, pid := range before {
		if !testsupport.WaitGone(pid, 5*time.Second) {
			t.Fatalf("process %d survived", pid)
		}
	}
	if l, err := proc.Probe(testCtx(t)); err != nil || l != Dead {
		t.Fatalf("Probe = %v, %v; want dead", l, err)
	}
}

func TestInterruptReachesTheGroup(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	// Asynchronous commands of a shell without job control ignore SIGINT:
	// the sleep runs in the foreground.
	proc, out := start(t, p, process.Spec{Command: "trap 'echo caught; exit 130' INT; echo ready; sleep 1000"})
	out.waitFor(t, "ready\n")
	if err := proc.Interrupt(); err != nil {
		t.Fatal(err)
	}
	if e, err := wait(t, proc); err != nil || e.Code != 130 || e.Signaled {
		t.Fatalf("exit %+v, %v; want code 130 (a trapped Ctrl-C is an exit)", e, err)
	}
	if got := out.all(t); got != "ready\ncaught\n" {
		t.Fatalf("output %q", got)
	}
	if err := proc.Interrupt(); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("Interrupt after the end: %v, want ESRCH", err)
	}
}

func TestInterruptInTTYMode(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo ready; sleep 1000; echo after", TTY: true})
	out.waitFor(t, "ready")
	if err := proc.Interrupt(); err != nil {
		t.Fatal(err)
	}
	e, err := wait(t, proc)
	if err != nil || !(e.Signaled && e.Signal == syscall.SIGINT || e.Code == 130) {
		t.Fatalf("exit %+v, %v; want SIGINT", e, err)
	}
	if strings.Contains(out.all(t), "after") {
		t.Fatal("the shell went on after Ctrl-C")
	}
}

// A zombie leader counts as dead: its parent (the connection's sshd) is
// stopped so nobody reaps it, and another pool asks.
func TestZombieOnlyGroupProbesDead(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo ready; exec sleep 1000"})
	out.waitFor(t, "ready\n")
	parent := ppid(t, proc.Pid())
	if err := syscall.Kill(parent, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(parent, syscall.SIGCONT) })
	if err := syscall.Kill(proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		st, ok := process.Stat(proc.Pid())
		if ok && st.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader did not become a zombie (%c, %v)", st.State, ok)
		}
	}
	other := newPool(t, s)
	g, err := other.Group(target(""), proc.Identity())
	if err != nil {
		t.Fatal(err)
	}
	if l, err := g.Probe(testCtx(t)); err != nil || l != Dead {
		t.Fatalf("Probe = %v, %v; want dead for a zombie-only group", l, err)
	}
	syscall.Kill(parent, syscall.SIGCONT)
	if e, _ := wait(t, proc); !e.Signaled || e.Signal != syscall.SIGKILL {
		t.Fatalf("exit %+v", e)
	}
}

func ppid(t *testing.T, pid int) int {
	p, ok := process.Stat(pid)
	if !ok {
		t.Fatalf("no process %d", pid)
	}
	return p.PPid
}

func TestAmbiguousIdentityIsNeverSignalled(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo ready; exec sleep 1000"})
	out.waitFor(t, "ready\n")
	id := proc.Identity()
	id.Start++ // as if the pid now belonged to a later process
	g, err := p.Group(target(""), id)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := g.Probe(testCtx(t)); err != nil || l != Ambiguous {
		t.Fatalf("Probe = %v, %v; want ambiguous", l, err)
	}
	if err := g.Signal(testCtx(t), syscall.SIGKILL); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Signal on an ambiguous identity: %v, want ErrAmbiguous", err)
	}
	if err := g.Interrupt(testCtx(t)); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Interrupt on an ambiguous identity: %v, want ErrAmbiguous", err)
	}
	if !testsupport.Alive(proc.Pid()) {
		t.Fatal("the process was killed")
	}
	if l, err := proc.Probe(testCtx(t)); err != nil || l != Live {
		t.Fatalf("the real identity probes %v, %v; want live", l, err)
	}
	proc.Signal(syscall.SIGKILL)
	wait(t, proc)
}

// After the leader is gone, survivors in its group are ours only when they
// carry the tag.
func TestSurvivorsNeedTheTag(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	tag := "MEVEDEL_EXEC_TAG=surv-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	proc, out := start(t, p, process.Spec{Command: "sleep 1000 & echo started", Tag: tag})
	out.waitFor(t, "started\n")
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	if n := len(liveMembers(proc.Pgid(), "")); n != 1 {
		t.Fatalf("%d group members, want the sleep", n)
	}
	id := proc.Identity()
	id.Tag = ""
	untagged, _ := p.Group(target(""), id)
	if l, err := untagged.Probe(testCtx(t)); err != nil || l != Ambiguous {
		t.Fatalf("untagged Probe = %v, %v; want ambiguous", l, err)
	}
	if err := untagged.Signal(testCtx(t), syscall.SIGKILL); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("untagged Signal: %v", err)
	}
	if n := len(liveMembers(proc.Pgid(), "")); n != 1 {
		t.Fatal("an unproven survivor was signalled")
	}
	if !proc.Alive() {
		t.Fatal("tagged survivor not alive")
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for proc.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("survivor still alive")
		}
	}
	out.all(t) // the sleep held the output open
}

func TestTransportLossAndReconnect(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
	out.waitFor(t, "started\n")
	if s.KillConnections() == 0 {
		t.Fatal("no connection to kill")
	}
	select {
	case <-proc.Transport():
	case <-time.After(waitLimit):
		t.Fatal("Transport not closed after the connection died")
	}
	e, err := wait(t, proc)
	if e.Lost == "" || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("exit %+v, %v; want TransportLost", e, err)
	}
	out.all(t)
	// The command outlived its connection; the next probe dials anew.
	if l, err := proc.Probe(testCtx(t)); err != nil || l != Live {
		t.Fatalf("Probe after reconnection = %v, %v", l, err)
	}
	if n := p.dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for proc.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("still alive")
		}
	}
	proc2, out2 := start(t, p, process.Spec{Command: "echo again"})
	wait(t, proc2)
	if got := out2.all(t); got != "again\n" {
		t.Fatalf("after reconnection: %q", got)
	}
	if n := p.dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
}

func TestKeepaliveDropsASilentConnection(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := NewPool(Config{Home: s.Home, KeepAlive: 100 * time.Millisecond})
	t.Cleanup(func() { p.Close() })
	proc, out := start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
	out.waitFor(t, "started\n")
	conns := s.Connections()
	for _, pid := range conns {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, pid := range conns {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	select {
	case <-proc.Transport():
	case <-time.After(waitLimit):
		t.Fatal("keepalive did not notice a silent server")
	}
	if e, _ := wait(t, proc); e.Lost == "" {
		t.Fatalf("exit %+v, want TransportLost", e)
	}
}

func TestCloseOutputUnblocksTheReader(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
	out.waitFor(t, "started\n")
	if err := proc.CloseOutput(); err != nil {
		t.Fatal(err)
	}
	out.all(t)
	proc.Signal(syscall.SIGKILL)
}

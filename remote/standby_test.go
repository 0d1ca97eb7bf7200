package remote

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// waitStandby waits until the pool's connection to the fixture has a
// standby ready.
func waitStandby(t *testing.T, p *Pool) *conn {
	t.Helper()
	r, err := p.resolve(target(""))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		p.mu.Lock()
		h := p.hosts[r.key()]
		p.mu.Unlock()
		if h != nil {
			h.mu.Lock()
			conns := slices.Clone(h.conns)
			h.mu.Unlock()
			for _, c := range conns {
				c.mu.Lock()
				ready := c.sb != nil
				c.mu.Unlock()
				if ready {
					return c
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no standby within the limit")
		}
		time.Sleep(time.Millisecond) // polling the pool's state, bounded by deadline
	}
}

// The second command runs on the standby the first left behind, with its
// own environment, directory and tag, on a channel opened before it came.
func TestStandbyRunsTheNextCommand(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	base := []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "KEEP=same", "DROP=gone", "CHANGE=old"}
	proc, out := start(t, p, process.Spec{Command: "echo first", Env: base})
	wait(t, proc)
	out.all(t)
	waitStandby(t, p)

	dir := filepath.Join(t.TempDir(), "it's a dir")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tricky := "it's \"quoted\" $HOME `x` \\ \n second line"
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "KEEP=same", "CHANGE=" + tricky, "NEW=1"}
	tag := "MEVEDEL_EXEC_TAG=standby-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	opened := p.sessions.Load()
	proc, out = start(t, p, process.Spec{
		Command: `printf '%s|%s|%s|%s|%s|%s' "$PWD" "$KEEP" "${DROP-unset}" "$CHANGE" "$NEW" "$MEVEDEL_EXEC_TAG"; echo; echo err >&2; read -r x || echo eof`,
		Dir:     dir, Env: env, Tag: tag,
	})
	if n := p.sessions.Load(); n != opened {
		t.Fatalf("%d channels opened for a command that had a standby", n-opened)
	}
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	want := dir + "|same|unset|" + tricky + "|1|" + strings.TrimPrefix(tag, "MEVEDEL_EXEC_TAG=") + "\nerr\neof\n"
	if got := out.all(t); got != want {
		t.Fatalf("output\n%q, want\n%q", got, want)
	}
	if proc.Pgid() != proc.Pid() {
		t.Fatalf("pid %d pgid %d", proc.Pid(), proc.Pgid())
	}
}

// A standby that went away before its command came costs nothing but the
// usual start.
func TestLostStandbyFallsBack(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, _ := start(t, p, process.Spec{Command: "true"})
	wait(t, proc)
	c := waitStandby(t, p)
	c.mu.Lock()
	c.sb.proc.ch.Close()
	c.mu.Unlock()
	proc, out := start(t, p, process.Spec{Command: "echo fine"})
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	if got := out.all(t); got != "fine\n" {
		t.Fatalf("output %q", got)
	}
}

// BASH_ENV reaches the command (whose bash reads it) but not the wrapper.
func TestHostileVariablesSkipTheWrapper(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	rc := filepath.Join(dir, "rc")
	if err := os.WriteFile(rc, []byte("echo sourced >>"+shq(count)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "BASH_ENV=" + rc}
	for i := 0; i < 2; i++ { // a fresh channel, then the standby
		if i == 1 {
			waitStandby(t, p)
		}
		if err := os.WriteFile(count, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		proc, out := start(t, p, process.Spec{Command: `echo "$BASH_ENV"`, Env: env})
		wait(t, proc)
		if got := out.all(t); got != rc+"\n" {
			t.Fatalf("run %d: output %q", i, got)
		}
		if b, _ := os.ReadFile(count); string(b) != "sourced\n" {
			t.Fatalf("run %d: BASH_ENV read %d times", i, bytes.Count(b, []byte("\n")))
		}
	}
}

func TestStandbyDelta(t *testing.T) {
	t.Parallel()
	sb := &standby{env: envMap([]string{"A=1", "B=2", "C=3"})}
	unset, export, ok := sb.delta(launchSpec{Spec: process.Spec{Env: []string{"A=1", "B=x", "D=4", "BASH_ENV=/rc"}, Tag: "T=t"}})
	if !ok || !slices.Equal(unset, []string{"C"}) || !slices.Equal(export, []string{"B=x", "D=4", "T=t"}) {
		t.Fatalf("delta: %v %v %v", unset, export, ok)
	}
	if _, _, ok := sb.delta(launchSpec{Spec: process.Spec{Env: []string{"A=1", "B=2", "C=3", "NOT-A-NAME=1"}}}); ok {
		t.Fatal("a name the shell cannot export was accepted")
	}
	if _, _, ok := sb.delta(launchSpec{Spec: process.Spec{Env: []string{"A=1"}}, overlay: true}); ok {
		t.Fatal("a replacing standby took an overlay")
	}
	over := &standby{env: envMap([]string{"A=1"}), overlay: true}
	if _, _, ok := over.delta(launchSpec{Spec: process.Spec{Env: []string{"B=2"}}, overlay: true}); ok {
		t.Fatal("an unset on top of sshd's environment was accepted")
	}
	if _, export, ok := over.delta(launchSpec{Spec: process.Spec{Env: []string{"A=1", "B=2"}}, overlay: true}); !ok || !slices.Equal(export, []string{"B=2"}) {
		t.Fatalf("overlay delta: %v %v", export, ok)
	}
}

// The verdict settlement needs is made on the host as the leader goes:
// no probe is sent after the exit.
func TestAwaitJudgesTheEnd(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo done"})
	wait(t, proc)
	out.all(t)
	g := proc.Group()
	g.mu.Lock()
	a := g.await
	g.mu.Unlock()
	select {
	case <-a.done:
	case <-time.After(waitLimit):
		t.Fatal("the await did not end")
	}
	if l := g.settled(); l != Dead {
		t.Fatalf("after the await: %v, want dead", l)
	}
	// A long command ends its await early; its probe then asks the host.
	proc, out = start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
	out.waitFor(t, "started\n")
	if !proc.Alive() {
		t.Fatal("not alive")
	}
	proc.Signal(syscall.SIGKILL)
	wait(t, proc)
	if proc.Alive() {
		t.Fatal("alive after SIGKILL")
	}
}

// Control requests from many callers share one shell without waiting for
// each other's round trips; a caller that gives up costs the others
// nothing.
func TestControlRequestsArePipelined(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
	out.waitFor(t, "started\n")
	defer func() {
		proc.Signal(syscall.SIGKILL)
		wait(t, proc)
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			if i%5 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			g, _ := p.Group(target(""), proc.Identity())
			l, err := g.Probe(ctx)
			if i%5 != 0 && (err != nil || l != Live) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("probe: %v", err)
	}
}

// An edit of ~/.ssh/config is seen by the next operation.
func TestResolveSeesConfigEdits(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	r, err := p.Resolve(Target{Host: "elsewhere"})
	if err != nil || r.Host != "elsewhere" || r.Port != 22 {
		t.Fatalf("before: %+v %v", r, err)
	}
	cfg := filepath.Join(s.Home, ".ssh", "config")
	old, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, append(old, "Host elsewhere\n  HostName 127.0.0.2\n  Port 2222\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = p.Resolve(Target{Host: "elsewhere", Path: "/x"})
	if err != nil || r.Host != "127.0.0.2" || r.Port != 2222 || r.Path != "/x" {
		t.Fatalf("after: %+v %v", r, err)
	}
}

// An escapee the command creates while the await runs is found by the
// await's probe, whether its snapshot saw it or its window did (the
// window alone is tested by TestSinceFindsWhatCameAfterTheSnapshot).
func TestAwaitFindsLaterEscapees(t *testing.T) {
	s := sshd.Start(t)
	p := newPool(t, s)
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	tag := "MEVEDEL_EXEC_TAG=later-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	proc, out := start(t, p, process.Spec{
		Command: "read -r x <" + shq(gate) + "; setsid sleep 1000 >/dev/null 2>&1 & echo \"pid $!\"",
		Tag:     tag,
	})
	// No control request meanwhile: it would end the await.
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	wait(t, proc)
	got := out.all(t)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(got, "pid ")))
	if err != nil {
		t.Fatalf("output %q", got)
	}
	g := proc.Group()
	g.mu.Lock()
	a := g.await
	g.mu.Unlock()
	<-a.done
	if a.v.state != Live {
		t.Fatalf("escapee %d: the await found %+v; want live", pid, a.v)
	}
	if l, err := proc.Probe(testCtx(t)); err != nil || l != Live {
		t.Fatalf("escapee %d: probe %v, %v; want live", pid, l, err)
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for proc.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("escapee still alive")
		}
	}
	// The host's probe stops seeing a killed process once its memory is
	// gone, a moment before the kernel marks it a zombie: bound that moment.
	if !testsupport.WaitGone(pid, waitLimit) {
		t.Fatalf("escapee %d survived", pid)
	}
}

// since, the await's probe, reads only what was created after the
// snapshot: an escapee created then is found, and a pid space that may
// have come round makes it decline (the caller then scans everything).
func TestSinceFindsWhatCameAfterTheSnapshot(t *testing.T) {
	funcs, _, ok := strings.Cut(controlScript, controlLoop)
	if !ok {
		t.Fatal("no request loop in the control script")
	}
	tag := "MEVEDEL_EXEC_TAG=since-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	driver := funcs + `
tag=$1 start=0 pgid=1
counters; c1=$last f1=$forks n1=$tasks
hits=(); h1=()
env "$tag" setsid sleep 1000 >/dev/null 2>&1 </dev/null &
esc=$!
echo "escapee $esc"
while ! [[ $(tr '\0' '\n' </proc/$esc/environ 2>/dev/null) == *"$tag"* ]]; do :; done
if since; then echo "found $ntg$tg"; else echo declined; fi
f1=$((forks - pidmax))
if since; then echo "found again"; else echo declined; fi
kill $esc
`
	out, err := exec.Command("bash", "-c", driver, "since-test", tag).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(strings.TrimPrefix(string(out), ctlReady)), "\n")
	if len(lines) != 3 {
		t.Fatalf("output %q", out)
	}
	esc := strings.TrimPrefix(lines[0], "escapee ")
	if lines[1] != "found 1 "+esc || lines[2] != "declined" {
		t.Fatalf("output %q", out)
	}
}

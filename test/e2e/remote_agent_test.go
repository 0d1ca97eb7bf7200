package e2e

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/test/sshd"
	"golang.org/x/sys/unix"
)

// agentPath is where the host agent of the helper under test lives on
// the fixture's host: the one version directory under the cache.
func agentPath(t *testing.T, srv *sshd.Server) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(srv.HostHome, ".cache", "mevedel-exec", "bin", "*", "mevedel-exec"))
	if len(m) != 1 {
		t.Fatalf("host agents on the host: %v", m)
	}
	return m[0]
}

func fileIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// runsOn starts `echo ok` on srv through a new helper (so a new
// connection) and checks the mode its facts name.
func runsOn(t *testing.T, srv *sshd.Server, mode string) {
	t.Helper()
	h := remoteHelperOn(t, srv)
	s, _ := openRemote(h)
	o := s.mustStart("echo ok", map[string]any{"cwd": tramp(srv, t.TempDir())})
	if f := o.Facts; !o.Final || f.Termination != execution.Exited || o.Output != "ok\n" || f.RemoteMode != mode {
		t.Fatalf("echo ok: %+v %q, want remoteMode %q", f, o.Output, mode)
	}
	h.stop()
}

// The helper deploys its own build once per version: a second
// connection reuses it, a build that is not the helper's (corrupted) is
// replaced, and other versions are pruned.
func TestRemoteAgentDeployedOnceAndReplacedWhenCorrupt(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	old := filepath.Join(srv.HostHome, ".cache", "mevedel-exec", "bin", "0.0.1-old")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "mevedel-exec"), []byte("an older helper"), 0o700); err != nil {
		t.Fatal(err)
	}
	runsOn(t, srv, remote.ModeAgent)
	p := agentPath(t, srv)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("the old version was not pruned: %v", err)
	}
	want, err := os.ReadFile(helperBin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("the deployed agent is not the helper's build (%v)", err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("agent mode: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("agent directory mode: %v %v", fi.Mode(), err)
	}
	ino := fileIno(t, p)

	// Another connection: the same file serves.
	runsOn(t, srv, remote.ModeAgent)
	if fileIno(t, p) != ino {
		t.Fatal("the agent was uploaded again for a second connection")
	}

	// Corrupted in place: detected by its checksum and replaced.
	bad := bytes.Clone(want)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(p, bad, 0o700); err != nil {
		t.Fatal(err)
	}
	runsOn(t, srv, remote.ModeAgent)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the corrupted agent was not replaced (%v)", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".mevedel-exec.tmp-*")); len(left) > 0 {
		t.Fatalf("temporary uploads left: %v", left)
	}
}

// A host whose home cannot execute the agent (noexec) runs commands
// through the wrapper, and the facts say so.
func TestRemoteAgentNoexecHomeFallsBackToWrapper(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	cache := filepath.Join(srv.HostHome, ".cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", cache, "tmpfs", unix.MS_NOEXEC, "size=256m,mode=0700"); err != nil {
		t.Fatalf("mounting a noexec tmpfs (the tests run as root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(cache, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", cache, err)
		}
	})
	runsOn(t, srv, remote.ModeWrapper)
	// The upload happened; only its execution was refused.
	agentPath(t, srv)
}

// An env-cleared, double-forked daemon that left the command's group and
// session is found by the agent as the local runner finds it (it
// descends from the command's shell, the subreaper) and stopped with
// its execution.
func TestRemoteAgentStopsEnvClearedDaemon(t *testing.T) {
	t.Parallel()
	inAgentAndHop(t, testRemoteAgentStopsEnvClearedDaemon)
}

func testRemoteAgentStopsEnvClearedDaemon(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	// The helper refuses backgrounding in a command line: a script does it.
	script := filepath.Join(t.TempDir(), "daemon.sh")
	body := "(env -i setsid /bin/sh -c 'sleep 1000 >/dev/null 2>&1 </dev/null & echo \"daemon $!\"')\necho ready\nexec sleep 1000\n"
	if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0})
	out := s.observeUntil(o, "ready")
	daemon := labelled(out)["daemon"]
	if daemon == 0 || !testsupport.Alive(daemon) {
		t.Fatalf("no daemon in %q", out)
	}
	t.Cleanup(func() { syscall.Kill(daemon, syscall.SIGKILL) })
	if f := s.mustObserve(o.Facts.ExecutionID, nil).Facts; f.RemoteMode != remote.ModeAgent {
		t.Fatalf("remoteMode %q", f.RemoteMode)
	}
	var stopped obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, &stopped)
	if !stopped.Final {
		_, stopped = s.waitFinal(o.Facts.ExecutionID, nil)
	}
	if !testsupport.WaitGone(daemon, waitBound) {
		t.Fatalf("the daemon %d survived its execution's stop: %+v", daemon, stopped.Facts)
	}
}

// wchar is how many bytes pid has written so far (/proc/PID/io).
func wchar(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		t.Fatalf("flooder's io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no wchar in %q", b)
	return 0
}

// One command flooding its output does not hold up the others on the
// same host agent's channel: while it floods (past its output limit,
// ignoring SIGTERM, so the helper keeps taking its output at full rate),
// another command's typed input comes back and a third one's stop ends
// it.
func TestRemoteAgentFloodDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	inAgentAndHop(t, testRemoteAgentFloodDoesNotStarveOthers)
}

func testRemoteAgentFloodDoesNotStarveOthers(t *testing.T) {
	h, srv := remoteHelper(t)
	art := filepath.Join(t.TempDir(), "artifacts")
	s := openWith(h, map[string]any{"remoteArtifactDir": art,
		"limits": map[string]any{"outputLimitBytes": 1 << 20, "graceMs": 60000}})
	cwd := tramp(srv, t.TempDir())

	flood := s.mustStart(`trap '' TERM; exec cat /dev/zero`, map[string]any{"cwd": cwd, "yieldMs": 0})
	if f := flood.Facts; f.RemoteMode != remote.ModeAgent {
		t.Fatalf("flood facts: %+v", f)
	}
	pid := flood.Facts.Pid
	killed := false
	defer func() {
		if !killed { // a failure before the end: the flood ignores the helper's SIGTERM
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	if !testsupport.Poll(waitBound, func() bool { return wchar(t, pid) >= 16<<20 }) {
		t.Fatalf("the flood did not get going: %d bytes written", wchar(t, pid))
	}

	// Input to a terminal on the same channel.
	o := s.mustStart(`echo ready; read -r line; echo "got:$line"`, map[string]any{"cwd": cwd, "yieldMs": 0, "tty": true})
	s.observeUntil(o, "ready")
	typed := s.mustObserve(o.Facts.ExecutionID, map[string]any{"chars": "hello\n"})
	out, final := s.waitFinal(o.Facts.ExecutionID, nil)
	if !strings.Contains(typed.Output+out, "got:hello") || final.Facts.Termination != execution.Exited {
		t.Fatalf("input during the flood: %q %+v", typed.Output+out, final.Facts)
	}

	// A stop on the same channel.
	o = s.mustStart("echo ready; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	s.observeUntil(o, "ready")
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, nil)
	if _, final := s.waitFinal(o.Facts.ExecutionID, nil); final.Facts.Termination != execution.Stopped {
		t.Fatalf("stop during the flood: %+v", final.Facts)
	}

	// The flood went on all along, and still does: its output is taken.
	w := wchar(t, pid)
	if !testsupport.Poll(waitBound, func() bool { return wchar(t, pid) >= w+32<<20 }) {
		t.Fatalf("the flood stalled: %d bytes written, %d before", wchar(t, pid), w)
	}
	if fo := s.mustObserve(flood.Facts.ExecutionID, nil); fo.Final {
		t.Fatalf("the flood ended early: %+v", fo.Facts)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	killed = true
	if _, final := s.waitFinal(flood.Facts.ExecutionID, nil); final.Facts.Termination != execution.OutputLimit {
		t.Fatalf("flood: %+v", final.Facts)
	}
}

// Output under the host agent arrives whole and in order: many frames
// and credit grants, spooled straight from the frames' buffers.
func TestRemoteAgentOutputWholeAndInOrder(t *testing.T) {
	t.Parallel()
	inAgentAndHop(t, testRemoteAgentOutputWholeAndInOrder)
}

func testRemoteAgentOutputWholeAndInOrder(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	// About 24 MB of numbered lines: three times the agent's window.
	const last = 3_000_000
	want, err := exec.Command("seq", "1", strconv.Itoa(last)).Output()
	if err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("seq 1 "+strconv.Itoa(last), map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0})
	if f := o.Facts; f.RemoteMode != remote.ModeAgent {
		t.Fatalf("facts: %+v", f)
	}
	_, final := s.waitFinal(o.Facts.ExecutionID, nil)
	if f := final.Facts; f.Termination != execution.Exited || f.OutputBytes != int64(len(want)) {
		t.Fatalf("final: %+v, want %d bytes", f, len(want))
	}
	got, err := os.ReadFile(filepath.Join(s.stateDir, "executions", o.Facts.ExecutionID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("spooled %d bytes differing from seq's %d at byte %d", len(got), len(want), i)
	}
}

package e2e

// Remote publication of yielded output, and recovery on the host.

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// waitFile waits until the file at p holds want.
func waitFile(t *testing.T, p, want string) {
	t.Helper()
	var b []byte
	var err error
	if !testsupport.Poll(waitBound, func() bool {
		b, err = os.ReadFile(p)
		return err == nil && string(b) == want
	}) {
		t.Fatalf("%s: %q (%v), want %q", p, b, err, want)
	}
}

func inode(t *testing.T, p string) uint64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A yielded execution's output is published on its host as it grows,
// by appending: what the remote copy holds is never sent again.
func TestRemoteArtifactPublishedAndAppended(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteArtifactPublishedAndAppended)
}

func testRemoteArtifactPublishedAndAppended(t *testing.T) {
	h, srv := remoteHelper(t)
	s, art := openRemote(h)
	gate := fifo(t, "gate")
	o := s.mustStart("echo first; cat "+gate+" >/dev/null; echo second", map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0})
	id := o.Facts.ExecutionID
	s.observeUntil(o, "first")
	published := filepath.Join(art, "executions", id+".log")
	live := h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.PublishedPath != "" })
	if live.PublishedPath != published {
		t.Fatalf("publishedPath %q, want %q", live.PublishedPath, published)
	}
	waitFile(t, published, "first\n")
	for p, mode := range map[string]os.FileMode{published: 0o600, filepath.Dir(published): 0o700, art: 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v %v, want %v", p, fi.Mode().Perm(), err, mode)
		}
	}
	// Mark the remote copy: only new bytes are appended after it.
	ino := inode(t, published)
	if f, err := os.OpenFile(published, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		f.WriteAt([]byte("F"), 0)
		f.Close()
	}
	release(t, gate)
	_, final := s.waitFinal(id, nil)
	if final.Facts.PublishedPath != published || final.Facts.Status != execution.StatusCompleted {
		t.Fatalf("final: %+v", final.Facts)
	}
	// Complete at settlement, and appended to the same file.
	if b, err := os.ReadFile(published); err != nil || string(b) != "First\nsecond\n" {
		t.Fatalf("published %q, %v", b, err)
	}
	if inode(t, published) != ino {
		t.Fatal("the published file was replaced instead of appended to")
	}
}

// Without remoteArtifactDir, artifacts go under the remote user's home.
func TestRemoteArtifactDefaultDirectory(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteArtifactDefaultDirectory)
}

func testRemoteArtifactDefaultDirectory(t *testing.T) {
	h, srv := remoteHelper(t)
	s := openWith(h, nil)
	// SFTP starts in the account's home, which the fixture's HOME for
	// shells does not change.
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(u.HomeDir, ".cache", "mevedel-exec", s.id)
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove(filepath.Dir(dir)) // only when no other session's is there
	})
	gate := fifo(t, "gate")
	o := s.mustStart("echo out; cat "+gate+" >/dev/null", map[string]any{"cwd": tramp(srv, "/tmp"), "yieldMs": 0})
	s.observeUntil(o, "out")
	release(t, gate)
	_, final := s.waitFinal(o.Facts.ExecutionID, nil)
	want := filepath.Join(dir, "executions", o.Facts.ExecutionID+".log")
	if final.Facts.PublishedPath != want {
		t.Fatalf("publishedPath %q, want %q", final.Facts.PublishedPath, want)
	}
	if b, err := os.ReadFile(want); err != nil || string(b) != "out\n" {
		t.Fatalf("published %q, %v", b, err)
	}
}

// A helper killed while a remote command runs leaves it running on the
// host. The next helper on the same state directory proves the group is
// the one recorded (leader pid and start time, on the host) and kills it
// before marking the execution lost.
func TestRemoteLostRunReclaimedOnTheHost(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteLostRunReclaimedOnTheHost)
}

func testRemoteLostRunReclaimedOnTheHost(t *testing.T) {
	h1, srv := remoteHelper(t)
	dir := filepath.Join(t.TempDir(), "state")
	art := filepath.Join(t.TempDir(), "artifacts")
	open := func(h *helper, id string) execution.SessionInfo {
		var info execution.SessionInfo
		h.mustCall("session/open", map[string]any{"sessionId": id, "stateDir": dir, "remoteArtifactDir": art}, &info)
		return info
	}
	open(h1, "first")
	s1 := &session{h: h1, id: "first", stateDir: dir}
	o := s1.mustStart(`(echo "pid $BASHPID"; exec sleep 1000) | (read x; echo "$x"; echo "pid $BASHPID"; echo both; exec sleep 1001)`,
		map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0, "label": "Remote build"})
	out := s1.observeUntil(o, "both")
	f := h1.waitState(o.Facts.ExecutionID, execution.Running)
	pids := append([]int{f.Pid}, pidsIn(out)...)
	s1.checkpoint()
	h1.kill()
	for _, p := range pids {
		if !testsupport.Alive(p) {
			t.Fatalf("remote pid %d died with the helper; the test shows nothing", p)
		}
	}

	h2 := remoteHelperOn(t, srv)
	info := open(h2, "second")
	if len(info.Recovered) != 1 {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	r := info.Recovered[0]
	if r.ExecutionID != o.Facts.ExecutionID || r.Termination != execution.Lost || r.Target != targetOf(srv) ||
		!strings.Contains(r.Reason, "leftover processes on "+targetOf(srv)+" were killed") {
		t.Fatalf("recovered %+v", r)
	}
	for _, p := range pids {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Errorf("remote pid %d survived recovery", p)
		}
	}
}

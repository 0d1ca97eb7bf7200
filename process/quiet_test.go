package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Quiet, once the shell has exited, is false while a member of its group
// lives on, and true as soon as the reaper has collected the last one, so
// that no scan is needed to know the group is empty. It runs in a child of
// the test, which can become the subreaper (every orphan of the command is
// then its to reap) without taking the exits of other tests' children.
func TestQuietWaitsForTheReapOfWhatTheShellLeft(t *testing.T) {
	if os.Getenv("MEVEDEL_QUIET_TEST") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestQuietWaitsForTheReapOfWhatTheShellLeft$", "-test.v")
		cmd.Env = append(os.Environ(), "MEVEDEL_QUIET_TEST=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	stop := make(chan struct{})
	reaped, err := BecomeSubreaper(nil, stop)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(stop); reaped() }()
	_ = UseShim()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The subshell stays in the group after the shell, until it can
	// read the fifo.
	var l Local
	p, err := l.Start(context.Background(), Spec{Command: `(read -r _ < "` + fifo + `") & exit 0`, Dir: dir, Tag: "MEVEDEL_QUIET_TEST_TAG=1"})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := p.Wait(); err != nil || ex.Code != 0 {
		t.Fatalf("the shell: %+v, %v", ex, err)
	}
	q := p.(*localProcess)
	if q.Quiet(20 * time.Millisecond) {
		t.Fatal("quiet while the subshell still waits at the fifo")
	}
	if !q.Alive() {
		t.Fatal("not alive while the subshell still waits at the fifo")
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !q.Quiet(time.Minute) {
		t.Fatal("not quiet after the subshell ended")
	}
	if q.Alive() {
		t.Fatal("alive after the subshell ended")
	}
	_ = q.CloseOutput()
}

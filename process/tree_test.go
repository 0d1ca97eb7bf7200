package process

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"
)

// A process whose tag sits behind a megabyte of environment is still found
// by its tag, and the helper does not keep the megabyte once it is read:
// any process on the machine may be read, so a buffer grown for one would
// stay for the helper's life (the per-execution heap test saw it as a leak
// whenever such a process ran beside it).
func TestTagPastAHugeEnvironment(t *testing.T) {
	tag := statedir.TagVar + "=test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := exec.Command("sleep", "60")
	for i := range 9 { // one string may hold 128 KiB at most
		cmd.Env = append(cmd.Env, "BIG"+strconv.Itoa(i)+"="+strings.Repeat("b", 120<<10))
	}
	cmd.Env = append(cmd.Env, tag)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, ok := Stat(cmd.Process.Pid)
	if !ok {
		t.Fatal("the sleep has no /proc entry")
	}
	found := false
	for _, p := range NewTree(0, tag, self.Start).Members() {
		found = found || p.Pid == cmd.Process.Pid
	}
	if !found {
		t.Fatalf("the process carrying %s past 1 MiB of environment was not found", tag)
	}
	tags.mu.Lock()
	held := cap(tags.buf)
	tags.mu.Unlock()
	if held > environBuf {
		t.Fatalf("the environment reader keeps %d bytes after reading one huge environment, want at most %d", held, environBuf)
	}
}

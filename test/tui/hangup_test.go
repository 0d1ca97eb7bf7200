package tui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// TestHangupEndsEmacsAndItsWork runs hangup.sh: the terminal of an
// `emacs -nw' goes away while a command it started runs. Emacs exits
// by itself (it used to spin at full CPU forever: its exit after a
// hangup runs with SIGCHLD blocked, so a wait for the helper's exit
// never saw it), and the helper and the command end with it.
func TestHangupEndsEmacsAndItsWork(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"tmux", "emacs", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("this test needs %s on PATH: %v", tool, err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mevedel-exec")
	if err := testsupport.BuildHelper(context.Background(), bin, true); err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(dir, "art")
	home := filepath.Join(art, "home")
	var emacs int
	t.Cleanup(func() {
		exec.Command("tmux", "-S", filepath.Join(art, "tmux.sock"), "kill-server").Run()
		if emacs > 0 {
			_ = syscall.Kill(emacs, syscall.SIGKILL)
		}
		for _, p := range testsupport.UnderHome(home, false) {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*waitBound)
	defer cancel()
	script := exec.CommandContext(ctx, "bash", "hangup.sh", art)
	script.Env = append(os.Environ(), "MEVEDEL_EXEC_PROGRAM="+bin)
	script.WaitDelay = 5 * time.Second
	out, err := script.CombinedOutput()
	if err != nil {
		t.Fatalf("hangup.sh: %v\n%s", err, out)
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "emacs %d", &emacs); err != nil {
		t.Fatalf("no emacs pid in %q", out)
	}
	// Its exit stops the command (SIGTERM, then SIGKILL after the grace
	// of 2 s): the bound is the wait's, not a figure.
	if !testsupport.Poll(waitBound/2, func() bool { return !testsupport.Alive(emacs) }) {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", emacs))
		t.Fatalf("emacs %d still runs %v after its terminal went away: %s", emacs, waitBound/2, st)
	}
	var left []testsupport.Proc
	if !testsupport.Poll(waitBound, func() bool { left = testsupport.UnderHome(home, false); return len(left) == 0 }) {
		t.Fatalf("left behind by the hangup: %v", left)
	}
}

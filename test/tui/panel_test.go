// Package tui checks what a person sees: the Emacs background-work panel
// drawn on a real terminal (tmux), read back as text.
package tui

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// waitBound bounds every wait of this test; it is never a sleep.
const waitBound = 120 * time.Second

// TestPanelOnScreen runs panel.sh: Emacs in a 160x40 tmux pane shows the
// panel with two background commands, then `k` stops the sleeper and RET
// expands the ticker's row. The screens must show both rows running, then
// the ticker alone with the stop reported, then the ticker's facts and
// last output lines under its row; nothing the test started may outlive
// it. With MEVEDEL_TUI_ARTIFACTS set, the screens are kept there.
func TestPanelOnScreen(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"tmux", "emacs", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("this test needs %s on PATH: %v", tool, err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mevedel-exec")
	// The helper is built with the race detector, as in test/e2e; its
	// stderr is checked below.
	if err := testsupport.BuildHelper(context.Background(), bin, true); err != nil {
		t.Fatal(err)
	}

	art := filepath.Join(dir, "art")
	if keep := os.Getenv("MEVEDEL_TUI_ARTIFACTS"); keep != "" {
		art = filepath.Join(keep, "panel")
		if err := os.RemoveAll(art); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(art, "home")
	t.Cleanup(func() {
		// Whatever happened, no tmux server, Emacs, helper or command of
		// this run survives it.
		exec.Command("tmux", "-S", filepath.Join(art, "tmux.sock"), "kill-server").Run()
		var left []testsupport.Proc
		if !testsupport.Poll(10*time.Second, func() bool { left = testsupport.UnderHome(home, false); return len(left) == 0 }) {
			for _, p := range left {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			t.Errorf("processes left behind: %v", left)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	script := exec.CommandContext(ctx, "bash", "panel.sh", art)
	script.Env = append(os.Environ(), "MEVEDEL_EXEC_PROGRAM="+bin)
	// Should anything the script started keep its output pipe open,
	// return anyway once the script has exited.
	script.WaitDelay = 5 * time.Second
	out, err := script.CombinedOutput()
	if err != nil {
		t.Fatalf("panel.sh: %v\n%s%s", err, out, dump(art))
	}

	for _, name := range []string{"before.txt", "after.txt", "inspector.txt"} {
		t.Logf("%s:\n%s", name, nonBlank(read(t, art, name)))
	}

	before := read(t, art, "before.txt")
	if !strings.Contains(before, "*mevedel background*") {
		t.Errorf("the panel's buffer is not on screen:\n%s", before)
	}
	for _, col := range []string{"Id", "Kind", "Owner", "Label", "State", "Runtime", "Output"} {
		if !strings.Contains(firstLine(before, "Label"), col) {
			t.Errorf("no %q column in the header:\n%s", col, before)
		}
	}
	for _, label := range []string{"ticker", "sleeper"} {
		row := row(before, label)
		if row == nil {
			t.Fatalf("no %s row before the stop:\n%s", label, before)
		}
		if row[4] != "running" || row[1] != "command" || row[2] != "/root" ||
			!regexp.MustCompile(`^[0-9]{6}$`).MatchString(row[0]) {
			t.Errorf("%s row before the stop is %q, want a running command of /root", label, row)
		}
	}

	after := read(t, art, "after.txt")
	if r := row(after, "ticker"); r == nil || r[4] != "running" {
		t.Errorf("after the stop, the ticker row is %q, want running:\n%s", r, after)
	}
	if r := row(after, "sleeper"); r != nil {
		t.Errorf("after the stop, the sleeper row is %q, want it gone:\n%s", r, after)
	}
	sleeper := row(before, "sleeper")
	// The row shows the id's sequence number; the message, the whole id.
	if sleeper != nil && !regexp.MustCompile(`mevedel-exec: exec-[a-z0-9]+-`+sleeper[0]+` stopped`).MatchString(after) {
		t.Errorf("the echo area does not say %s stopped:\n%s", sleeper[0], after)
	}
	if !strings.Contains(after, "tui: 1 live, as of ") {
		t.Errorf("the mode line does not say one command is live:\n%s", after)
	}

	inspector := read(t, art, "inspector.txt")
	ticker := row(inspector, "ticker")
	if ticker == nil {
		t.Fatalf("no ticker row above its inspector:\n%s", inspector)
	}
	if ticker[5] == "0s" || ticker[6] == "0" {
		t.Errorf("the ticker row %q did not follow its output", ticker)
	}
	for _, want := range []string{
		"state running",
		"command while :; do echo tick; sleep 0.2; done",
		"| tick",
	} {
		if !strings.Contains(inspector, want) {
			t.Errorf("the inspector does not show %q:\n%s", want, inspector)
		}
	}
	// The inspector names the whole id, and its log by it.
	for _, want := range []string{`id exec-[a-z0-9]+-` + ticker[0] + ` `, `log artifact://executions/exec-[a-z0-9]+-` + ticker[0] + `\.log`} {
		if !regexp.MustCompile(want).MatchString(inspector) {
			t.Errorf("the inspector does not show %s:\n%s", want, inspector)
		}
	}
	if stderr := read(t, art, "helper-stderr.txt"); strings.Contains(stderr, "DATA RACE") ||
		strings.Contains(stderr, "panic") {
		t.Errorf("the helper reported:\n%s", stderr)
	}
}

// row returns the panel row labelled label as its fields (id, kind,
// owner, label, state, runtime, output), or nil. Labels here are one word.
func row(screen, label string) []string {
	for _, line := range strings.Split(screen, "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[3] == label && regexp.MustCompile(`^[0-9]{6}$`).MatchString(f[0]) {
			return f
		}
	}
	return nil
}

// nonBlank returns screen without its empty lines, for the log.
func nonBlank(screen string) string {
	var b strings.Builder
	for _, line := range strings.Split(screen, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func firstLine(screen, substr string) string {
	for _, line := range strings.Split(screen, "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("artifact %s: %v", name, err)
	}
	return string(b)
}

// dump returns the screens the script saved, for a failure message.
func dump(dir string) string {
	var b strings.Builder
	for _, name := range []string{"before.txt", "after.txt", "inspector.txt", "timeout.txt", "quit.txt", "driver-error.txt", "helper-stderr.txt"} {
		if s, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			b.WriteString("\n--- " + name + " ---\n")
			b.Write(s)
		}
	}
	return b.String()
}

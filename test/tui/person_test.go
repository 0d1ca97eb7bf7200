package tui

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// TestPersonOnScreen runs person.sh: a person's Emacs at 80 columns, driven
// only by M-x and keys. A shell command's output buffer fills while it runs
// (coloured, then the rest without a key), next-error visits its error,
// the panel keeps the failed command with every column visible and d
// dismisses it, a line typed while another command ends reaches the row
// it was typed for, and C-x C-c asks before ending the work still
// running. Nothing the test started may outlive it. With
// MEVEDEL_TUI_ARTIFACTS set, the screens are kept there.
func TestPersonOnScreen(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"tmux", "emacs", "bash", "mkfifo"} {
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
	if keep := os.Getenv("MEVEDEL_TUI_ARTIFACTS"); keep != "" {
		art = filepath.Join(keep, "person")
		if err := os.RemoveAll(art); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(art, "home")
	t.Cleanup(func() {
		exec.Command("tmux", "-S", filepath.Join(art, "tmux.sock"), "kill-server").Run()
		var left []testsupport.Proc
		if !testsupport.Poll(10*time.Second, func() bool { left = testsupport.UnderHome(home, false); return len(left) == 0 }) {
			for _, p := range left {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
			t.Errorf("processes left behind: %v", left)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*waitBound)
	defer cancel()
	script := exec.CommandContext(ctx, "bash", "person.sh", art)
	script.Env = append(os.Environ(), "MEVEDEL_EXEC_PROGRAM="+bin)
	script.WaitDelay = 5 * time.Second
	out, err := script.CombinedOutput()
	if err != nil {
		t.Fatalf("person.sh: %v\n%s%s", err, out, dumpAll(art))
	}
	for _, name := range []string{"live.txt", "followed.txt", "panel.txt", "input.txt", "output-a.txt", "quit.txt"} {
		t.Logf("%s:\n%s", name, nonBlank(read(t, art, name)))
	}

	// The first line came in red while the command still ran; the next
	// one is plain.
	colour := read(t, art, "live-colour.txt")
	red := regexp.MustCompile(`\x1b\[(31|38;5;(1|9|124|160|196))m(\x1b\[[0-9;]*m)*red alert`)
	if !red.MatchString(colour) {
		t.Errorf("the red line is not red on screen:\n%q", colour)
	}
	sgr := regexp.MustCompile(`\x1b\[[0-9;]*m`)
	plain := ""
	for _, line := range strings.Split(colour, "\n") {
		if sgr.ReplaceAllString(line, "") == "first" {
			plain = line
		}
	}
	if plain == "" || regexp.MustCompile(`\x1b\[(31|38;5;)`).MatchString(plain) {
		t.Errorf("the plain line is missing or coloured: %q", plain)
	}
	live := read(t, art, "live.txt")
	if strings.Contains(live, "second") || !strings.Contains(live, "running") {
		t.Errorf("the live screen should show the command running before its gate opened:\n%s", live)
	}
	followed := read(t, art, "followed.txt")
	for _, want := range []string{"second", "main.c:2:3: error: missing semicolon", "failed (exit 2)"} {
		if !strings.Contains(followed, want) {
			t.Errorf("the followed output does not show %q:\n%s", want, followed)
		}
	}
	if visited := read(t, art, "visited.txt"); !regexp.MustCompile(`main\.c +.*L2`).MatchString(visited) {
		t.Errorf("next-error did not visit main.c line 2:\n%s", visited)
	}

	// At 80 columns every column shows, and the failed row says so.
	panel := read(t, art, "panel.txt")
	header := firstLine(panel, "Label")
	for _, col := range []string{"Id", "Kind", "Owner", "Label", "State", "Runtime", "Output"} {
		if !strings.Contains(header, col) {
			t.Errorf("no %q column in the 80-column header %q", col, header)
		}
	}
	row := regexp.MustCompile(`(?m)^  [0-9]{6} command +/person .* failed 2 +[0-9]+s +[0-9]+ B$`)
	if !row.MatchString(panel) {
		t.Errorf("no failed row with every column at 80 columns:\n%s", panel)
	}
	for _, line := range strings.Split(panel, "\n") {
		if len([]rune(line)) > 80 {
			t.Errorf("a line wider than the terminal: %q", line)
		}
	}
	if d := read(t, art, "dismissed.txt"); strings.Contains(d, "failed 2") {
		t.Errorf("d did not dismiss the failed row:\n%s", d)
	}

	// The typed line reached A, not B, which ended while it was typed.
	if a := read(t, art, "output-a.txt"); !strings.Contains(a, "A got:hello") {
		t.Errorf("A's output does not have the line:\n%s", a)
	}
	logs, _ := filepath.Glob(filepath.Join(art, "state", "*", "executions", "*.log"))
	sawB := false
	for _, log := range logs {
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "B done") {
			sawB = true
			if strings.Contains(string(b), "hello") {
				t.Errorf("B got the line meant for A: %q", b)
			}
		}
	}
	if !sawB {
		t.Errorf("no log of B among %v", logs)
	}

	// The first output reached the screen soon after the command wrote
	// it: not after the seconds Emacs's M-x spent looking for a shorter
	// name to suggest (its loop reads no process output and redraws
	// nothing). The bound is loose for a loaded machine; the figure is
	// logged.
	ms, err := strconv.Atoi(strings.TrimSpace(read(t, art, "first-output-ms.txt")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first output on screen %d ms after the command wrote it", ms)
	if ms > 1000 {
		t.Errorf("the first output took %d ms to show:\n%s", ms, read(t, art, "first-output.txt"))
	}

	if q := read(t, art, "quit.txt"); !strings.Contains(q, "1 command still running under mevedel-exec") {
		t.Errorf("C-x C-c did not ask:\n%s", q)
	}
	if stderr := read(t, art, "helper-stderr.txt"); strings.Contains(stderr, "DATA RACE") ||
		strings.Contains(stderr, "panic") {
		t.Errorf("the helper reported:\n%s", stderr)
	}
}

// dumpAll returns every screen the script saved, for a failure message.
func dumpAll(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	for _, f := range files {
		if s, err := os.ReadFile(f); err == nil {
			b.WriteString("\n--- " + filepath.Base(f) + " ---\n")
			b.Write(s)
		}
	}
	return b.String()
}

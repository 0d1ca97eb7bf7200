package e2e

// Input and the environment a command starts with.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
)

func TestPipeInput(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	// stdin is at EOF: a command that reads it does not hang.
	if o := s.mustStart("cat; echo eof", nil); o.Output != "eof\n" {
		t.Fatalf("stdin not at EOF: %q", o.Output)
	}
	o := s.mustStart("trap 'echo got-int; exit 130' INT; echo ready; while :; do sleep 0.05; done", map[string]any{"yieldMs": 0})
	id := o.Facts.ExecutionID
	s.observeUntil(o, "ready")
	e := h.wantError("exec/observe", map[string]any{"sessionId": s.id, "executionId": id, "chars": "y\n"}, -32003, "refused")
	if !strings.Contains(e.Message, "tty") {
		t.Fatalf("refusal does not say to use tty: %q", e.Message)
	}
	typed := s.mustObserve(id, map[string]any{"chars": "\u0003"})
	out, final := s.waitFinal(id, nil)
	out = typed.Output + out
	f := final.Facts
	if !strings.Contains(out, "got-int") || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 130 || f.Signal != "" {
		t.Fatalf("trapped Ctrl-C is an exit 130: %q %+v", out, f)
	}
	// Untrapped, SIGINT ends the group: a signal, not an exit code.
	o = s.mustStart("echo ready; sleep 1000", map[string]any{"yieldMs": 0})
	s.observeUntil(o, "ready")
	var facts execution.Facts
	h.mustCall("exec/interrupt", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, &facts)
	_, final = s.waitFinal(o.Facts.ExecutionID, nil)
	if f := final.Facts; f.Termination != execution.Signaled || f.Signal != "SIGINT" || f.ExitCode != nil {
		t.Fatalf("interrupt: %+v", f)
	}
}

func TestPtyInput(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart(`[ -t 0 ] && echo tty; read -r line; echo "got:$line"`, map[string]any{"yieldMs": 0, "tty": true})
	if !o.Facts.TTY {
		t.Fatalf("facts: %+v", o.Facts)
	}
	id := o.Facts.ExecutionID
	typed := s.mustObserve(id, map[string]any{"chars": "hello\n"})
	out, final := s.waitFinal(id, nil)
	out = o.Output + typed.Output + out
	if !strings.Contains(out, "got:hello") || !strings.Contains(out, "tty") || final.Facts.Status != execution.StatusCompleted {
		t.Fatalf("pty: %q %+v", out, final.Facts)
	}
	// Ctrl-C through the terminal.
	o = s.mustStart("echo ready; sleep 1000", map[string]any{"yieldMs": 0, "tty": true})
	s.observeUntil(o, "ready")
	s.mustObserve(o.Facts.ExecutionID, map[string]any{"chars": "\u0003"})
	if _, final := s.waitFinal(o.Facts.ExecutionID, nil); final.Facts.Signal != "SIGINT" {
		t.Fatalf("pty Ctrl-C: %+v", final.Facts)
	}
}

func TestEnvironmentDefaults(t *testing.T) {
	t.Parallel()
	h := startHelper(t, withEnv("TERM=xterm-256color", "PAGER=less", "COLORTERM=truecolor"))
	s := h.open(nil)
	o := s.mustStart("env", map[string]any{"env": map[string]string{"MEVEDEL_E2E": "1", "GH_PAGER": "more", "EXTRA": "x"}})
	got := map[string]string{}
	for _, line := range strings.Split(o.Output, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	want := map[string]string{
		"NO_COLOR": "1", "TERM": "dumb", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "COLORTERM": "",
		"PAGER": "cat", "GIT_PAGER": "cat", "GH_PAGER": "more", "MEVEDEL_EXECUTION": "1", "EXTRA": "x",
	}
	for k, v := range want {
		if gv, ok := got[k]; !ok || gv != v {
			t.Errorf("%s=%q (present %v), want %q", k, gv, ok, v)
		}
	}
}

// The login shell runs once per helper, not once per session (each
// project of a person's has one), and from initialize on, while the
// client opens its first session: its profile may take most of a second.
func TestLoginEnvironmentIsCapturedOncePerHelper(t *testing.T) {
	t.Parallel()
	profile := `echo run >> "$HOME/profile-runs"
[ -p "$HOME/ran" ] && echo ran > "$HOME/ran"
export FROM_PROFILE=captured
`
	h := startHelper(t, withProfile(profile), func(_ *client.Options, home string) {
		if err := mkfifo(filepath.Join(home, "ran")); err != nil {
			panic(err)
		}
	})
	h.mustCall("initialize", map[string]any{"clientName": "e2e"}, nil)
	// No session is open yet: the profile runs all the same.
	ran := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(h.home, "ran"))
		if err == nil && string(b) != "ran\n" {
			err = fmt.Errorf("read %q", b)
		}
		ran <- err
	}()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitBound):
		t.Fatal("the login shell did not run after initialize")
	}
	if err := os.Remove(filepath.Join(h.home, "ran")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if o := h.open(nil).mustStart(`echo "v=$FROM_PROFILE"`, nil); o.Output != "v=captured\n" {
			t.Fatalf("session %d: %q", i, o.Output)
		}
	}
	runs, _ := os.ReadFile(filepath.Join(h.home, "profile-runs"))
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Fatalf("the profile ran %d times for two sessions, want once", n)
	}
}

func TestLoginEnvironmentSnapshot(t *testing.T) {
	t.Parallel()
	profile := `echo run >> "$HOME/profile-runs"
export FROM_PROFILE=first
myfunc() { echo f; }
export -f myfunc
alias myalias=echo
notexported=1
echo "profile noise on stdout"
`
	h := startHelper(t, withProfile(profile))
	s := h.open(nil)
	for i := 0; i < 3; i++ {
		o := s.mustStart(`echo "v=$FROM_PROFILE"; type -t myfunc; type -t myalias || echo no-alias; echo "n=$notexported"`, nil)
		if o.Output != "v=first\nfunction\nno-alias\nn=\n" {
			t.Fatalf("run %d: %q", i, o.Output)
		}
	}
	runs, _ := os.ReadFile(filepath.Join(h.home, "profile-runs"))
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Fatalf("the profile ran %d times for 3 commands, want once", n)
	}
	// A changed profile is captured again.
	if err := os.WriteFile(filepath.Join(h.home, ".bash_profile"), []byte(strings.Replace(profile, "=first", "=second-value", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if o := s.mustStart(`echo "v=$FROM_PROFILE"`, nil); o.Output != "v=second-value\n" {
		t.Fatalf("after the profile changed: %q", o.Output)
	}
}

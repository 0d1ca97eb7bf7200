package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/client"
)

// autogroupNice is the nice of pid's scheduling autogroup, and whether the
// kernel has autogroups at all.
func autogroupNice(t *testing.T, pid int) (string, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/autogroup")
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	_, nice, _ := strings.Cut(strings.TrimSpace(string(b)), " nice ")
	return nice, true
}

// A helper started with --nice runs every command at that niceness, and
// what the command starts inherits it: a build beside the editor yields
// the CPU to it. Leading its session, as under an editor, the helper sets
// it on its session's autogroup, and a terminal start on its own session's.
func TestCommandsRunAtTheHelpersNiceness(t *testing.T) {
	t.Parallel()
	h := startHelper(t, func(o *client.Options, _ string) {
		o.Args, o.OwnSession = []string{"serve", "--nice", "7"}, true
	})
	s := h.open(nil)
	for _, c := range []struct {
		name  string
		start map[string]any
		want  string
	}{
		{"a shell command", map[string]any{"command": "nice"}, "7\n"},
		{"a child of its shell", map[string]any{"command": "sh -c nice; true"}, "7\n"},
		{"a program run directly", map[string]any{"command": nil, "argv": []string{"nice"}}, "7\n"},
		{"a terminal start", map[string]any{"command": "nice", "tty": true}, "7\r\n"},
		{"a confined command", map[string]any{"command": "nice", "sandbox": confined(h.home)}, "7\n"},
	} {
		if out, o := s.runEnded(c.start); out != c.want || o.Facts.ExitCode == nil || *o.Facts.ExitCode != 0 {
			t.Errorf("%s: printed %q (%s), want %q", c.name, out, ended(o), c.want)
		}
	}
	wantGroupNice(t, h, "7")
	// Unprivileged, the kernel takes one autogroup change in 100 ms, so a
	// terminal start's is certain only for root.
	if os.Geteuid() == 0 {
		if out, o := s.runEnded(map[string]any{"command": "cat /proc/self/autogroup", "tty": true}); !strings.HasSuffix(strings.TrimSpace(out), "nice 7") && !strings.Contains(out, "No such file") {
			t.Errorf("a terminal start's autogroup: %q (%s), want nice 7", out, ended(o))
		}
	}

	// Without --nice, commands run at the helper's own.
	plain := startHelper(t).open(nil)
	if out, o := plain.runEnded(map[string]any{"command": "nice"}); out != "0\n" {
		t.Errorf("without --nice: printed %q (%s), want 0", out, ended(o))
	}
}

// An unprivileged helper, as a person runs it, yields the same way: its
// commands at the nice, and its session's autogroup (which the kernel may
// make it retry for: one unprivileged change in 100 ms).
func TestUnprivilegedHelperYieldsToo(t *testing.T) {
	t.Parallel()
	sudoSetup(t)
	uid := sudoFixture.uids[sudoNoPassword]
	dir := ownedDir(t, uid)
	home := filepath.Join(dir, "home")
	mkdirOwned(t, dir, home, uid)
	h := startHelper(t, func(o *client.Options, _ string) {
		o.Bin, o.Env, o.Args, o.OwnSession = sudoFixture.bin, baseEnv(home), []string{"serve", "--nice", "7"}, true
		o.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	})
	h.home = home
	s := h.openAt(filepath.Join(dir, "state"), nil)
	if out, o := s.runEnded(map[string]any{"command": "nice; id -u", "cwd": home}); out != "7\n"+strconv.Itoa(uid)+"\n" {
		t.Errorf("printed %q (%s), want nice 7 as uid %d", out, ended(o), uid)
	}
	wantGroupNice(t, h, "7")
}

// wantGroupNice waits for the helper to say it set its session's
// autogroup, which it does off its start, then checks the nice there.
func wantGroupNice(t *testing.T, h *helper, want string) {
	t.Helper()
	if _, ok := autogroupNice(t, h.c.Child().Pid()); !ok {
		return // a kernel without autogroups
	}
	if !h.stderr.Wait(waitBound, func(s string) bool { return strings.Contains(s, "scheduling group") }) {
		t.Fatalf("the helper did not say it set its session's autogroup: %s", h.stderr.String())
	}
	if nice, _ := autogroupNice(t, h.c.Child().Pid()); nice != want {
		t.Errorf("the helper's session autogroup has nice %q, want %s (its log: %s)", nice, want, h.stderr.String())
	}
}

// A niceness Linux does not know, or one that would raise the commands'
// priority, is refused before the helper serves.
func TestNicenessOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"20", "-1", "x"} {
		stderr := &strings.Builder{}
		child, err := client.Spawn(client.Options{Bin: helperBin, Args: []string{"serve", "--nice", n}, Env: baseEnv(t.TempDir()), Stderr: stderr})
		if err != nil {
			t.Fatal(err)
		}
		<-child.Exited()
		if code := child.ExitCode(); code != 2 || !strings.Contains(stderr.String(), "nice") {
			t.Errorf("serve --nice %s: exit %d, stderr %q; want 2 and why", n, code, stderr.String())
		}
	}
}

package process

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The native shim makes the program it runs a child subreaper: an orphan
// of the shell is re-parented to the shell, not to init.
func TestNativeShimMakesTheShellASubreaper(t *testing.T) {
	err := startNativeShim()
	if subreaperCode == nil {
		if err == nil {
			t.Fatal("a native shim without code for this architecture")
		}
		return // the executable's shim mode serves here (e2e covers it)
	}
	if err != nil {
		t.Fatal(err)
	}
	bash, err := LookBash()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "pid")
	// The subshell has ended when its line returns: its child is then
	// someone else's.
	script := `(sleep 30 & echo $! > "$1"); p=$(< "$1"); read -r -a st < /proc/$p/stat; kill $p; echo "$$ ${st[3]}"`
	for _, shim := range []bool{true, false} {
		cmd := exec.Command(bash, "-c", script, "bash", f)
		if shim {
			cmd = exec.Command(nativeShimPath(), bash, "bash", "-c", script, "bash", f)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("shim %v: %v", shim, err)
		}
		shell, parent, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		if adopted := shell == parent; adopted != shim {
			t.Errorf("shim %v: the orphan's parent is %s, the shell %s", shim, parent, shell)
		}
	}
	// A program that cannot run: exit 127, as a shell says.
	err = exec.Command(nativeShimPath(), "/nonexistent", "x").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 127 {
		t.Fatalf("a missing program: %v, want exit 127", err)
	}
}

// The shield flags: "i" runs its program with the group's stop signals
// ignored and an inherited copy of the shim at innerShimFd; "-d", run from
// that copy, closes it and gives the signals back as defaults.
func TestNativeShimShieldModes(t *testing.T) {
	if startNativeShim() != nil {
		return // no native shim here: the probe falls back to env(1)
	}
	bash, err := LookBash()
	if err != nil {
		t.Fatal(err)
	}
	// SigIgn's bits: SIGHUP, SIGINT, SIGQUIT and SIGTERM are 0x4007.
	show := `grep -E '^SigIgn' /proc/self/status; [ -e /proc/self/fd/200 ] && echo copy; true`
	inner := `"$1" -d "$2" bash -c "$3"`
	out, err := exec.Command(nativeShimPath(), "-i", bash, "bash", "-c", show+"; "+inner, "bash", InnerShim(), bash, show).Output()
	if err != nil {
		t.Fatal(err)
	}
	// What this process was started with ignoring stays so either way.
	ignored := func(line string) uint64 {
		_, hex, _ := strings.Cut(line, "\t")
		v, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			t.Fatalf("SigIgn line %q: %v", line, err)
		}
		return v & 0x4007
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || ignored(lines[0]) != 0x4007 || lines[1] != "copy" || ignored(lines[2]) != 0 {
		t.Errorf("shielded, then reset:\n%s", out)
	}
}

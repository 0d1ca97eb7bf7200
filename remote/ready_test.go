package remote

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/remote/agent"
)

// The wrapper's readiness probe, run here by a real sh with a PATH that
// holds only what the probe itself uses and bash: setsid is found where
// the wrapper also looks (/usr/bin), bwrap and rg are not; the boot id
// comes from the agent's test hook, as the agent would read it.
func TestWrapperProbeSaysWhatIsLacking(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, p := range []string{"bash", "cat", "uname"} {
		real, err := exec.LookPath(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, filepath.Join(bin, p)); err != nil {
			t.Fatal(err)
		}
	}
	boot := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(boot, []byte("  b007-1d \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", wrapperProbe)
	cmd.Env = []string{"PATH=" + bin, agent.BootIDFileVar + "=" + boot}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	end := strings.Index(string(out), probeEnd)
	if end < 0 {
		t.Fatalf("no end marker in %q", out)
	}
	rd, err := parseWrapperProbe(out[:end])
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if rd.Mode != ModeWrapper || rd.Incarnation.BootID != "b007-1d" || rd.Incarnation.Hostname != host ||
		!slices.Equal(rd.Lacks, []string{"bwrap", "rg"}) || len(rd.Missing) != 0 || rd.Err("h") != nil {
		t.Fatalf("%+v", rd)
	}
}

// What a mode needs is missing, and refuses with the programs named; what
// it does not need is only lacking.
func TestReadinessMissingByMode(t *testing.T) {
	t.Parallel()
	lacks := []string{"setsid", "rg"}
	if rd := readiness(ModeAgent, Incarnation{}, lacks); len(rd.Missing) != 0 || rd.Err("h") != nil {
		t.Fatalf("agent: %+v", rd)
	}
	rd := readiness(ModeWrapper, Incarnation{}, lacks)
	err := rd.Err("ssh:me@h#22")
	if !slices.Equal(rd.Missing, []string{"setsid"}) || err == nil || !strings.Contains(err.Error(), "ssh:me@h#22 lacks setsid") {
		t.Fatalf("wrapper: %+v: %v", rd, err)
	}
	if _, err := parseWrapperProbe([]byte("junk")); err == nil {
		t.Fatal("junk parsed")
	}
}

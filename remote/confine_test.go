package remote

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// A command granted a box or limits runs under the host agent or not at
// all: where the host's commands go through the wrapper (a test binary
// deploys no agent), the start fails and nothing ran on the host.
func TestConfinedStartNeverFallsBackToTheWrapper(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	p := newPool(t, srv)
	dir := t.TempDir()
	hc, err := p.Confine(testCtx(t), target(dir), sandbox.Policy{Mode: sandbox.Required})
	if err != nil || hc.Agent || hc.Why == "" {
		t.Fatalf("Confine without an agent: %+v, %v; want Agent false and why", hc, err)
	}
	marker := filepath.Join(dir, "ran")
	for _, r := range []Runner{
		{Pool: p, Target: target(dir), Sandbox: &sandbox.Policy{Mode: sandbox.Required, WritableRoots: []string{dir}}},
		{Pool: p, Target: target(dir), Resources: &sandbox.Resources{Pids: 8}},
	} {
		proc, err := r.Start(testCtx(t), process.Spec{Command: "touch " + marker})
		if err == nil {
			proc.Wait()
			t.Fatalf("a confined start ran through the wrapper")
		}
		if !strings.Contains(err.Error(), "nothing was run") {
			t.Errorf("error %q does not say that nothing ran", err)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a refused confined start ran on the host: %v", err)
	}
	// The same start without confinement runs: the host is reachable.
	proc, err := Runner{Pool: p, Target: target(dir)}.Start(testCtx(t), process.Spec{Command: "touch " + marker})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := proc.Wait(); err != nil || ex.Code != 0 {
		t.Fatalf("unconfined start: %+v %v", ex, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the unconfined command did not run: %v", err)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// groupsLeft lists the cgroups the helper made for its executions that
// are still there.
func groupsLeft(t *testing.T, h *helper) []string {
	t.Helper()
	return groupsOf(h.c.Child().Pid())
}

// groupsOf lists the cgroups that the helper (or host agent) with pid
// made for its executions and that are still there.
func groupsOf(pid int) []string {
	pattern := "mevedel-exec-" + strconv.Itoa(pid) + "-*"
	var left []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if ok, _ := filepath.Match(pattern, d.Name()); ok {
			left = append(left, p)
			return filepath.SkipDir
		}
		return nil
	})
	return left
}

func TestLimitsMemoryHogEndsWithResourceLimit(t *testing.T) {
	t.Parallel()
	memoryHogEndsWithResourceLimit(t, here(t))
}

// memoryHogEndsWithResourceLimit: a confined command over its memory
// limit ends resource-limit/memory, and its group goes.
func memoryHogEndsWithResourceLimit(t *testing.T, w where) {
	work := t.TempDir()
	// tail holds a line without a newline in memory: a gigabyte of zeros.
	o := w.s.mustStart("head -c 1G /dev/zero | tail -n 1 | wc -c",
		map[string]any{"cwd": w.dir(work), "resources": map[string]any{"memoryBytes": 64 << 20}, "sandbox": confined(work)})
	f := o.Facts
	if f.Termination != execution.ResourceLimit || f.Limit != sandbox.LimitMemory {
		t.Fatalf("termination %s limit %q signal %q, want resource-limit/memory; output %q", f.Termination, f.Limit, f.Signal, o.Output)
	}
	if f.Resources == nil || f.Resources.Applied[sandbox.LimitMemory] == "" {
		t.Errorf("facts.resources %+v: the memory limit is not said to be applied", f.Resources)
	}
	w.wantBubblewrap(t, f)
	w.wantGroupsGone(t)
}

func TestLimitsPidsCapAForkLoop(t *testing.T) {
	t.Parallel()
	pidsCapAForkLoop(t, here(t))
}

// pidsCapAForkLoop: a fork loop under a cap of 8 processes ends
// resource-limit/pids with fewer than 8 started; it returns the facts.
func pidsCapAForkLoop(t *testing.T, w where) execution.Facts {
	// A script file: the helper refuses backgrounding in a command's own
	// text, not in what it runs.
	dir := t.TempDir()
	script := filepath.Join(dir, "forks.sh")
	if err := os.WriteFile(script, []byte("i=0\nwhile [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); echo started $i; done\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := w.s.mustStart("sh "+script, map[string]any{"cwd": w.dir(dir), "resources": map[string]any{"pids": 8}})
	f := o.Facts
	if f.Termination != execution.ResourceLimit || f.Limit != sandbox.LimitPids {
		t.Fatalf("termination %s limit %q, want resource-limit/pids; output %q", f.Termination, f.Limit, o.Output)
	}
	most := 0
	for _, line := range strings.Split(o.Output, "\n") {
		if n, err := strconv.Atoi(strings.TrimPrefix(line, "started ")); err == nil {
			most = max(most, n)
		}
	}
	// The shell itself counts: fewer than 8 sleeps ever started.
	if most == 0 || most >= 8 {
		t.Errorf("%d sleeps started under a cap of 8 processes; output %q", most, o.Output)
	}
	w.wantGroupsGone(t)
	return f
}

func TestLimitsCPUSeconds(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("exec bash -c 'while :; do :; done'", map[string]any{"resources": map[string]any{"cpuSeconds": 1}})
	f := o.Facts
	if f.Termination != execution.ResourceLimit || f.Limit != sandbox.LimitCPU || f.Resources.Applied[sandbox.LimitCPU] != sandbox.ViaRlimit {
		t.Fatalf("termination %s limit %q signal %q resources %+v, want resource-limit/cpu by rlimit", f.Termination, f.Limit, f.Signal, f.Resources)
	}
	// A command within its limits ends as usual.
	o = s.mustStart("echo fine", map[string]any{"resources": map[string]any{"cpuSeconds": 5, "memoryBytes": 256 << 20, "pids": 32}})
	if o.Facts.Termination != execution.Exited || o.Facts.Outcome != execution.Success || o.Output != "fine\n" {
		t.Errorf("a command within its limits: %s %s %q", o.Facts.Termination, o.Facts.Outcome, o.Output)
	}
}

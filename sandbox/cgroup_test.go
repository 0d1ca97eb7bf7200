package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroups lays out a cgroup mount and a /proc/self/cgroup under a
// temporary directory: detect reads only files and directories.
func fakeCgroups(t *testing.T, self string, dirs ...string) (root, selfFile string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "cgroup")
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	selfFile = filepath.Join(base, "self")
	if err := os.WriteFile(selfFile, []byte(self), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, selfFile
}

func TestDetectV1(t *testing.T) {
	root, self := fakeCgroups(t, "8:pids:/\n4:memory:/process_api/abc\n0::/\n", "memory/process_api/abc", "pids")
	m := detect(root, self)
	if m.memory != filepath.Join(root, "memory/process_api/abc") || m.pids != filepath.Join(root, "pids") || m.v2 != "" {
		t.Errorf("v1: %+v", m)
	}
}

func TestDetectV2WithDelegation(t *testing.T) {
	root, self := fakeCgroups(t, "0::/user/helper\n", "user/helper")
	for name, text := range map[string]string{"cgroup.controllers": "cpu memory pids", "user/helper/cgroup.controllers": "memory pids"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := detect(root, self)
	dir := filepath.Join(root, "user/helper")
	if m.v2 != dir {
		t.Fatalf("v2: %+v", m)
	}
	// The helper moved into a leaf and enabled the controllers for its
	// children.
	sub, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	procs, _ := os.ReadFile(filepath.Join(dir, leafName, "cgroup.procs"))
	if !strings.Contains(string(sub), "+memory") || strings.TrimSpace(string(procs)) == "" {
		t.Errorf("delegation: subtree_control %q, leaf procs %q", sub, procs)
	}
}

func TestDetectNeither(t *testing.T) {
	root, self := fakeCgroups(t, "0::/\n")
	if m := detect(root, self); m.reason == "" || m.v2 != "" || m.memory != "" {
		t.Errorf("no hierarchy: %+v", m)
	}
	if m := detect(root, filepath.Join(root, "missing")); m.reason == "" {
		t.Errorf("no /proc/self/cgroup: %+v", m)
	}
}

func TestNewGroupSaysWhatCannotBeApplied(t *testing.T) {
	saved := probed.m
	probed.once.Do(func() {})
	probed.m = machine{reason: "no cgroup hierarchy the helper may write"}
	defer func() { probed.m = saved }()
	g := NewGroup("mevedel-exec-test", Resources{MemoryBytes: 1 << 20, Pids: 4, CPUSeconds: 2})
	defer g.Close()
	f := g.Facts()
	if f.NotApplied[LimitMemory] == "" || f.NotApplied[LimitPids] == "" || f.Applied[LimitCPU] != ViaRlimit {
		t.Errorf("facts %+v", f)
	}
	path, argv := g.Wrap("/bin/true", []string{"/bin/true"})
	if path != "/bin/sh" || argv[4] != "2" || argv[len(argv)-2] != "--" {
		t.Errorf("trampoline %s %q", path, argv)
	}
}

func TestCounter(t *testing.T) {
	f := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(f, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := counter(f, "oom_kill"); n != 3 {
		t.Errorf("oom_kill = %d", n)
	}
}

func TestSweepRemovesTheEmptyGroupsOfGoneHelpers(t *testing.T) {
	parent := t.TempDir()
	gone := filepath.Join(parent, groupPrefix+"999999999-exec-a")
	mine := filepath.Join(parent, GroupName("exec-b"))
	other := filepath.Join(parent, "someone-else")
	for _, d := range []string{gone, mine, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweep(parent)
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("a dead helper's group is still there: %v", err)
	}
	for _, d := range []string{mine, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// On cgroup v2 the group is made under the delegated directory, the
// limits written to it, and the command cloned into it by descriptor.
func TestNewGroupOnV2(t *testing.T) {
	dir := t.TempDir()
	saved := probed.m
	probed.once.Do(func() {})
	probed.m = machine{v2: dir}
	defer func() { probed.m = saved }()
	g := NewGroup("mevedel-exec-v2", Resources{Pids: 9})
	f := g.Facts()
	if f.Applied[LimitPids] != ViaCgroupV2 || f.NotApplied != nil {
		t.Fatalf("facts %+v", f)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "mevedel-exec-v2", "pids.max")); string(b) != "9" {
		t.Errorf("pids.max = %q", b)
	}
	if _, ok := g.CgroupFD(); !ok {
		t.Error("no descriptor to clone into")
	}
	if path, _ := g.Wrap("/bin/true", []string{"/bin/true"}); path != "/bin/true" {
		t.Errorf("a trampoline without v1 groups or a CPU limit: %s", path)
	}
	// A plain directory stands in for the group here: Close removes what
	// it can (the file written makes rmdir fail, which Close reports).
	if err := g.Close(); err == nil {
		t.Error("Close removed a directory that still holds a file")
	}
}

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestResolveAddsTheProtectedDefaults(t *testing.T) {
	home := t.TempDir()
	repo := filepath.Join(home, "repo")
	sub := filepath.Join(repo, "src")
	if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(home, "state")
	got, err := Policy{Mode: BestEffort, WritableRoots: []string{"~/repo/src", sub}}.Resolve(Where{Home: home, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if got.Network != NetworkAllow || got.Mode != BestEffort {
		t.Errorf("mode %q network %q", got.Mode, got.Network)
	}
	if !slices.Equal(got.WritableRoots, []string{sub}) {
		t.Errorf("writable roots %v, want %s once", got.WritableRoots, sub)
	}
	if !slices.Contains(got.ReadOnlyPaths, filepath.Join(repo, ".git")) {
		t.Errorf("read-only %v lacks the repository's .git above the root", got.ReadOnlyPaths)
	}
	for _, p := range []string{filepath.Join(home, ".ssh"), filepath.Join(home, ".gnupg"), state} {
		if !slices.Contains(got.InaccessiblePaths, p) {
			t.Errorf("inaccessible %v lacks %s", got.InaccessiblePaths, p)
		}
	}
	if got.Writable(filepath.Join(repo, ".git", "config")) || !got.Writable(filepath.Join(sub, "a.go")) || got.Writable(filepath.Join(repo, "README")) {
		t.Errorf("Writable disagrees with the policy %+v", got)
	}
}

func TestResolveRefusesBadPolicies(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Policy{
		"mode":          {Mode: "strict"},
		"network":       {Network: "lan"},
		"relative":      {WritableRoots: []string{"src"}},
		"missing":       {WritableRoots: []string{filepath.Join(dir, "none")}},
		"file":          {WritableRoots: []string{file}},
		"nul":           {ReadOnlyPaths: []string{"/a\x00b"}},
		"relative hide": {InaccessiblePaths: []string{"secret"}},
	} {
		if _, err := p.Resolve(Where{Home: dir}); err == nil {
			t.Errorf("%s: %+v resolved", name, p)
		}
	}
}

func TestResolveFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	got, err := Policy{WritableRoots: []string{link}, InaccessiblePaths: []string{filepath.Join(link, "not-yet", "secret")}}.Resolve(Where{})
	if err != nil {
		t.Fatal(err)
	}
	if got.WritableRoots[0] != real || !slices.Contains(got.InaccessiblePaths, filepath.Join(real, "not-yet", "secret")) {
		t.Errorf("links not resolved: %+v", got)
	}
}

func TestOverLaysAStartOverTheSessionDefault(t *testing.T) {
	def := &Policy{Mode: Required, WritableRoots: []string{"/w"}, Network: NetworkDeny}
	got := (&Policy{Mode: Off}).Over(def)
	if got.Mode != Off || got.Network != NetworkDeny || !slices.Equal(got.WritableRoots, []string{"/w"}) {
		t.Errorf("%+v", got)
	}
	if got := (*Policy)(nil).Over(nil); got.Mode != "" {
		t.Errorf("nil over nil: %+v", got)
	}
	r := (&Resources{Pids: 5}).Over(&Resources{Pids: 1, MemoryBytes: 9})
	if r != (Resources{Pids: 5, MemoryBytes: 9}) {
		t.Errorf("resources %+v", r)
	}
}

func TestBoxMountOrder(t *testing.T) {
	home := t.TempDir()
	ssh := filepath.Join(home, ".ssh")
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(home, "key.pem")
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(home, "state")
	scratch := filepath.Join(state, "scratch", "x")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := Policy{Mode: Required, WritableRoots: []string{home}, InaccessiblePaths: []string{key}, Network: NetworkDeny}.Resolve(Where{Home: home, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBox(Probe{Path: "/usr/bin/bwrap"}, a, scratch, state, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	args := strings.Join(b.Args(), " ")
	order := []string{
		"--ro-bind / /",
		"--unshare-net",
		"--bind " + home + " " + home,
		"--ro-bind " + filepath.Join(state, emptyFile) + " " + key,
		"--tmpfs " + ssh,
		"--tmpfs " + filepath.Join(home, ".gnupg"), // missing but creatable
		"--bind " + scratch + " " + scratch,
		"--remount-ro " + ssh,
	}
	at := 0
	for _, want := range order {
		i := strings.Index(args[at:], want)
		if i < 0 {
			t.Fatalf("bwrap options %q lack %q after position %d", args, want, at)
		}
		at += i + len(want)
	}
	path, argv := b.Wrap("/usr/bin/ls", []string{"ls", "-l"})
	if path != "/usr/bin/bwrap" || !slices.Equal(argv[len(argv)-3:], []string{"--", "ls", "-l"}) {
		t.Errorf("wrapped %s %q", path, argv)
	}
}

func TestBoxReleaseRemovesOnlyWhatBwrapMade(t *testing.T) {
	root := t.TempDir()
	keep := filepath.Join(root, "keep") // existed before: stays
	if err := os.Mkdir(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(keep, "a", "b")
	a, err := Policy{Mode: Required, WritableRoots: []string{root}, InaccessiblePaths: []string{made}}.Resolve(Where{})
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := NewBox(Probe{Path: "bwrap"}, a, "", root, nil)
	b2, _ := NewBox(Probe{Path: "bwrap"}, a, "", root, nil)
	// What bwrap would make on the host for the mount point.
	if err := os.MkdirAll(made, 0o700); err != nil {
		t.Fatal(err)
	}
	b1.Release()
	if _, err := os.Stat(made); err != nil {
		t.Fatalf("released while another box uses it: %v", err)
	}
	b2.Release()
	if _, err := os.Stat(filepath.Join(keep, "a")); !os.IsNotExist(err) {
		t.Errorf("the made mount point is still there: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a directory that existed before was removed: %v", err)
	}
}

func TestWrapShieldsBwrapFromGroupSignals(t *testing.T) {
	b, err := NewBox(Probe{Path: "/usr/bin/bwrap", Env: "/usr/bin/env"}, Policy{Mode: Required, Network: NetworkAllow}, "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	path, argv := b.Wrap("/bin/bash", []string{"/bin/bash", "-c", "true"})
	want := []string{"/usr/bin/env", "--ignore-signal=" + shielded, "/usr/bin/bwrap"}
	if path != "/usr/bin/env" || !slices.Equal(argv[:3], want) ||
		!slices.Equal(argv[len(argv)-5:], []string{"/usr/bin/env", "--default-signal=" + shielded, "/bin/bash", "-c", "true"}) {
		t.Errorf("wrapped %s %q", path, argv)
	}
}

func TestWrapThroughTheShimRunsThePathAsGiven(t *testing.T) {
	b, err := NewBox(Probe{Path: "/usr/bin/bwrap", Shim: "/proc/self/fd/200", Env: "/usr/bin/env"}, Policy{Mode: Required, Network: NetworkAllow}, "", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	path, argv := b.Wrap("/bin/bash", []string{"bash", "-c", "true"})
	if path != "/usr/bin/bwrap" || argv[0] != "/usr/bin/bwrap" || !b.ShieldedByShim() ||
		!slices.Equal(argv[len(argv)-7:], []string{"--", "/proc/self/fd/200", "-d", "/bin/bash", "bash", "-c", "true"}) {
		t.Errorf("wrapped %s %q", path, argv)
	}
}

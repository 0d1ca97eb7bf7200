package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDenialsReadsWhatThePolicyExplains(t *testing.T) {
	home := t.TempDir()
	work := filepath.Join(home, "work")
	ssh := filepath.Join(home, ".ssh")
	for _, d := range []string{work, ssh} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ssh, "id_rsa"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Policy{Mode: Required, WritableRoots: []string{work}}.Resolve(Where{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	out := "touch: cannot touch '/etc/passwd': Read-only file system\n" +
		"bash: line 1: " + home + "/out.txt: Read-only file system\n" +
		"mkdir: cannot create directory ‘../up’: Read-only file system\n" +
		"PermissionError: [Errno 13] Permission denied: '/usr/lib/x'\n" +
		"cat: " + ssh + "/id_*: No such file or directory\n" +
		// Not the sandbox: inside a writable root, or absent on the host.
		"touch: cannot touch 'inside.txt': Read-only file system\n" +
		"cat: " + ssh + "/none: No such file or directory\n" +
		"cat: /nonexistent: No such file or directory\n" +
		"touch: cannot touch '/etc/passwd': Read-only file system\n"
	got := Denials(out, work, a)
	want := []Denial{
		{"/etc/passwd", "write"},
		{filepath.Join(home, "out.txt"), "write"},
		{filepath.Join(home, "up"), "write"},
		{"/usr/lib/x", "write"},
		{filepath.Join(ssh, "id_*"), "read"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("denials\n got %+v\nwant %+v", got, want)
	}
	if got := Denials("all fine\n", work, a); got != nil {
		t.Errorf("denials of clean output: %+v", got)
	}
}

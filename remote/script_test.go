package remote

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/process"
)

// The wrapper run here, as a child that does not lead its group (sshd
// makes its children session leaders, so only this test takes the setsid
// path).
func TestWrapperMakesItsOwnGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", wrapperCommand(launchSpec{Spec: process.Spec{
		Command: `printf 'pid=%s\n' "$$"; read -r s </proc/$$/stat; set -- ${s##*) }; echo "pgid=$3"`,
		Dir:     dir,
		Env:     []string{"PATH=/usr/bin:/bin"},
	}}))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	line := readIdentity(bufioReader(out))
	if line.err != nil {
		t.Fatalf("identity: %v in %q", line.err, out)
	}
	if line.pid != line.pgid {
		t.Fatalf("pid %d, pgid %d: not a group leader", line.pid, line.pgid)
	}
	rest := string(out[strings.Index(string(out), "\n")+1:])
	want := "pid=" + strconv.Itoa(line.pid) + "\npgid=" + strconv.Itoa(line.pid) + "\n"
	if rest != want {
		t.Fatalf("command output %q, want %q", rest, want)
	}
}

func TestWrapperDirectories(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	os.Mkdir(filepath.Join(home, "sub dir"), 0o700)
	for _, tt := range []struct {
		dir, want, failure string
	}{
		{dir: "~", want: home},
		{dir: "~/sub dir", want: filepath.Join(home, "sub dir")},
		{dir: "sub dir", want: filepath.Join(home, "sub dir")},
		{dir: "", want: home},
		{dir: "/nonexistent", failure: "working directory: "},
	} {
		cmd := exec.Command("/bin/sh", "-c", wrapperCommand(launchSpec{Spec: process.Spec{Command: "pwd", Dir: tt.dir}}))
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
		out, _ := cmd.CombinedOutput()
		line := readIdentity(bufioReader(out))
		if tt.failure != "" {
			if !strings.HasPrefix(line.failure, tt.failure) || !strings.Contains(line.failure, tt.dir) {
				t.Errorf("dir %q: failure %q in %q", tt.dir, line.failure, out)
			}
			continue
		}
		if line.err != nil {
			t.Errorf("dir %q: %v in %q", tt.dir, line.err, out)
			continue
		}
		if got := strings.TrimSpace(string(out[strings.Index(string(out), "\n")+1:])); got != tt.want {
			t.Errorf("dir %q: pwd %q, want %q", tt.dir, got, tt.want)
		}
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

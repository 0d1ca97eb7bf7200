package process

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child started through the keeper: what it leaves behind (a daemon
// of a new session, as podman's conmon is) is the keeper's to reap, never
// this process's, and the child's exit comes once that is gone too, with
// the program's own status.
func TestStartChildKeeperReapsWhatItLeaves(t *testing.T) {
	_ = UseShim()
	defer shimExe.Store("")
	hold, release, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	defer release.Close()
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("bash", "-c", `setsid cat <&3 >/dev/null 2>&1 & echo $!; exit 3`)
	cmd.Stdout, cmd.ExtraFiles = w, []*os.File{hold}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c, err := StartChild(cmd)
	w.Close()
	hold.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	daemon, _ := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || daemon == 0 {
		t.Fatalf("no pid: %q %v", line, err)
	}
	// Once bash is gone the daemon is the keeper's child.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok := Stat(daemon)
		if ok && st.PPid == c.Pid() {
			break
		}
		if !ok || time.Now().After(deadline) {
			t.Fatalf("daemon %d: parent %d (%v), want the keeper %d", daemon, st.PPid, ok, c.Pid())
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-c.Done():
		t.Fatal("the child ended while what it left was alive")
	default:
	}
	release.Close() // the daemon reads EOF and exits
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not end once everything was gone")
	}
	if st := c.Status(); st.ExitStatus() != 3 {
		t.Fatalf("status %v, want the program's exit 3", st)
	}
}

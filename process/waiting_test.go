package process

import (
	"bufio"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startTTY starts command on a pty, drains its output into lines (nil:
// discarded) and stops it at the end of the test.
func startTTY(t *testing.T, command string, tty bool, lines chan<- string) Process {
	t.Helper()
	p, err := (&Local{}).Start(context.Background(), Spec{Command: command, Dir: t.TempDir(), TTY: tty, Env: []string{"PATH=" + os.Getenv("PATH"), "TERM=dumb"}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if lines == nil {
			_, _ = io.Copy(io.Discard, p.Output())
			return
		}
		sc := bufio.NewScanner(p.Output())
		for sc.Scan() {
			select {
			case lines <- strings.TrimRight(sc.Text(), "\r"):
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = p.Signal(unix.SIGKILL)
		_, _ = p.Wait()
		_ = p.CloseOutput()
	})
	return p
}

// eventually polls cond until it holds or the bound passes.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// never checks cond stays false over several looks spread over d.
func never(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("%s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWaitingForInputReadsTheKernel(t *testing.T) {
	for _, c := range []struct{ name, command string }{
		{"bash read", `read -p "Name? " x; echo "got $x"`},
		{"child reads, shell waits", `python3 -c 'input("Name? ")'; echo done`},
		{"cat", `cat`},
		{"password from /dev/tty", `read -s x </dev/tty`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startTTY(t, c.command, true, nil)
			eventually(t, 5*time.Second, "reported waiting", func() bool { return WaitingForInput(p.Pid()) })
		})
	}
	for _, c := range []struct {
		name, command string
		tty           bool
	}{
		{"sleeping", `sleep 100`, true},
		{"busy writing", `yes > /dev/null`, true},
		{"tight loop", `while :; do :; done`, true},
		{"reader with a busy sibling", `yes >/dev/null & read x; wait`, true},
		{"no terminal", `read x; sleep 100`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startTTY(t, c.command, c.tty, nil)
			// Let it get going: the shell has forked what it runs.
			eventually(t, 5*time.Second, "started", func() bool { return len(Descendants(p.Pid())) >= 1 })
			never(t, time.Second, "reported waiting", func() bool { return WaitingForInput(p.Pid()) })
		})
	}
}

func TestListeningFindsTheTreesPorts(t *testing.T) {
	lines := make(chan string, 16)
	p := startTTY(t, `python3 -c '
import socket,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print("port", s.getsockname()[1], flush=True); time.sleep(100)'`, true, lines)
	var port int
	select {
	case l := <-lines:
		port, _ = strconv.Atoi(strings.TrimPrefix(l, "port "))
	case <-time.After(10 * time.Second):
		t.Fatal("no port printed")
	}
	if port == 0 {
		t.Fatal("no port")
	}
	var got []Listener
	eventually(t, 5*time.Second, "listening", func() bool { got = Listening(p.Pid()); return len(got) > 0 })
	if got[0].Port != port || got[0].Address != "127.0.0.1" || got[0].Pid == 0 {
		t.Fatalf("listening %+v, want 127.0.0.1:%d", got, port)
	}
	q := startTTY(t, `sleep 100`, true, nil)
	if l := Listening(q.Pid()); len(l) != 0 {
		t.Fatalf("sleep listens on %+v", l)
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0016":                         "0.0.0.0:22",
		"00000000000000000000000000000000:0050": ":::80",
		"00000000000000000000000001000000:0050": "::1:80",
		"0000000000000000FFFF00000100007F:0050": "127.0.0.1:80",
	} {
		a, p, ok := ParseProcAddr(in)
		if got := a + ":" + strconv.Itoa(p); !ok || got != want {
			t.Errorf("%s: got %s (%v), want %s", in, got, ok, want)
		}
	}
}

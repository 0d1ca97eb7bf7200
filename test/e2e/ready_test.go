package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/rpc"
)

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func listensOn(f execution.Facts, port int) bool {
	return slices.ContainsFunc(f.Listening, func(l process.Listener) bool { return l.Port == port && l.Pid > 0 })
}

// fetch gets http://addr/ and returns the body.
func fetch(t *testing.T, addr string) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", addr, resp.Status)
	}
	return string(b)
}

func TestReadyPortYieldsWhenTheServerListens(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	dir := t.TempDir()
	port := freePort(t)
	t0 := time.Now()
	// The server takes a moment before it listens: the yield waits for it.
	o := s.mustStart(fmt.Sprintf("sleep 1; exec python3 -m http.server %d --bind 127.0.0.1 --directory %s", port, dir),
		map[string]any{"readyPort": port, "yieldMs": 60000})
	took := time.Since(t0)
	if o.Final || !o.Facts.Ready || o.Facts.ReadyPort != port || !listensOn(o.Facts, port) {
		t.Fatalf("start %+v", o.Facts)
	}
	if took < time.Second || took > 20*time.Second {
		t.Fatalf("ready yield after %v", took)
	}
	fetch(t, fmt.Sprintf("127.0.0.1:%d", port))
	// Live facts keep showing the port.
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 1 || !listensOn(list.Executions[0], port) {
		t.Fatalf("list %+v", list.Executions)
	}

	// The same with only yieldMs waits its whole yield.
	other := freePort(t)
	t1 := time.Now()
	y := s.mustStart(fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1 --directory %s", other, dir), map[string]any{"yieldMs": 2500})
	if waited := time.Since(t1); waited < 2500*time.Millisecond || y.Final || y.Facts.Ready {
		t.Fatalf("without readyPort: after %v %+v", waited, y.Facts)
	}
	var n struct{ Stopped int }
	h.mustCall("exec/stopAll", map[string]any{"sessionId": s.id}, &n)
	if n.Stopped != 2 {
		t.Fatalf("stopped %d", n.Stopped)
	}
}

func TestReadyPatternYieldsOnTheLine(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	for _, tty := range []bool{false, true} {
		t0 := time.Now()
		o := s.mustStart(`echo starting; sleep 2; printf '\033[32mserver ready on 4242\033[0m\n'; sleep 100`,
			map[string]any{"readyPattern": `ready on \d+$`, "yieldMs": 60000, "tty": tty})
		took := time.Since(t0)
		if o.Final || !o.Facts.Ready || o.Facts.ReadyLine != "server ready on 4242" {
			t.Fatalf("tty %v: start %+v", tty, o.Facts)
		}
		if took < 2*time.Second || took > 20*time.Second {
			t.Fatalf("tty %v: ready yield after %v", tty, took)
		}
		if !strings.Contains(o.Output, "ready on 4242") {
			t.Fatalf("tty %v: output %q", tty, o.Output)
		}
		s.mustCall(t, "exec/stop", o.Facts.ExecutionID)
	}
}

func TestExitBeforeReadyIsTheFinalResult(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart(`echo not today; exit 3`, map[string]any{"readyPort": freePort(t), "readyPattern": "never", "yieldMs": 60000})
	if !o.Final || o.Facts.ExitCode == nil || *o.Facts.ExitCode != 3 || o.Facts.Ready || !strings.Contains(o.Output, "not today") {
		t.Fatalf("final %+v %q", o.Facts, o.Output)
	}
}

func TestReadyBadParams(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	for _, p := range []map[string]any{
		{"readyPattern": "("},
		{"readyPort": 70000},
		{"readyPort": -1},
	} {
		p["sessionId"], p["command"] = s.id, "true"
		h.wantError("exec/start", p, -32602, "invalid-params")
	}
	// The connection survives.
	if o := s.mustStart("true", nil); !o.Final {
		t.Fatalf("%+v", o)
	}
}

// A remote server started with readyPort yields when it listens on the
// host; exec/forward makes it reachable here until unforward or its end.
func TestRemoteReadyPortAndForward(t *testing.T) { inModesAndHop(t, testRemoteReadyPortAndForward) }

func testRemoteReadyPortAndForward(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "marker-7c1e.txt"), []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	o := s.mustStart(fmt.Sprintf("sleep 1; exec /usr/bin/python3 -m http.server %d --bind 127.0.0.1", port),
		map[string]any{"readyPort": port, "yieldMs": 60000, "cwd": tramp(srv, dir)})
	if o.Final || !o.Facts.Ready || o.Facts.ReadyPort != port || !listensOn(o.Facts, port) {
		t.Fatalf("start %+v", o.Facts)
	}
	id := o.Facts.ExecutionID
	forward := func() string {
		t.Helper()
		var r struct{ LocalAddress string }
		h.mustCall("exec/forward", map[string]any{"sessionId": s.id, "executionId": id, "port": port}, &r)
		if !strings.HasPrefix(r.LocalAddress, "127.0.0.1:") || r.LocalAddress == fmt.Sprintf("127.0.0.1:%d", port) {
			t.Fatalf("localAddress %q", r.LocalAddress)
		}
		return r.LocalAddress
	}
	addr := forward()
	if body := fetch(t, addr); !strings.Contains(body, "marker-7c1e.txt") {
		t.Fatalf("through the forward: %q", body)
	}
	h.mustCall("exec/unforward", map[string]any{"sessionId": s.id, "executionId": id, "port": port}, nil)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after unforward", addr)
	}
	h.wantError("exec/unforward", map[string]any{"sessionId": s.id, "executionId": id, "port": port}, -32001, "not-found")

	// Forwarded again, it closes when the execution settles.
	addr = forward()
	fetch(t, addr)
	s.mustCall(t, "exec/stop", id)
	if !testsupport.Poll(waitBound, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatalf("%s still accepts after the execution ended", addr)
	}
	h.wantError("exec/forward", map[string]any{"sessionId": s.id, "executionId": id, "port": port}, -32003, "refused")
	h.wantError("exec/forward", map[string]any{"sessionId": s.id, "executionId": id, "port": 0}, -32602, "invalid-params")
}

// While a readyPort watch runs (here after the start yielded), a change
// of the listening set is announced before the port itself is listened on,
// and the port then makes the execution ready.
func TestListeningChangesAreAnnouncedWhileWaitingForThePort(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	first, ready := freePort(t), freePort(t)
	gate := fifo(t, "second")
	o := s.mustStart(fmt.Sprintf(`exec python3 -c '
import socket
a=socket.socket(); a.bind(("127.0.0.1", %d)); a.listen()
open(%q).read()
b=socket.socket(); b.bind(("127.0.0.1", %d)); b.listen()
import time; time.sleep(100)'`, first, gate, ready), map[string]any{"readyPort": ready, "yieldMs": 0})
	id := o.Facts.ExecutionID
	if o.Final || o.Facts.Ready {
		t.Fatalf("start %+v", o.Facts)
	}
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && listensOn(f, first) && !f.Ready })
	release(t, gate)
	f := h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.Ready })
	if f.ReadyPort != ready || !listensOn(f, ready) || !listensOn(f, first) {
		t.Fatalf("ready facts %+v", f)
	}
	s.mustCall(t, "exec/stop", id)
}

// A listing answers with the ports as last read, and reads the stale ones
// after it answers: a change found then is announced in exec/changed, so
// a table seeded by listings learns of a new port without a poll of its
// own and a listing of hundreds of executions never waits for /proc.
func TestListingAnnouncesPortsItFoundStale(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	port := freePort(t)
	gate := fifo(t, "listen")
	o := s.mustStart(fmt.Sprintf(`exec python3 -c '
import socket
open(%q).read()
a=socket.socket(); a.bind(("127.0.0.1", %d)); a.listen()
import time; time.sleep(100)' >/dev/null 2>&1`, gate, port), map[string]any{"yieldMs": 0})
	id := o.Facts.ExecutionID
	release(t, gate)
	announced := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, n := range h.notes {
			var p rpc.ChangedParams
			if n.Method == rpc.NotifyChanged && json.Unmarshal(n.Params, &p) == nil &&
				slices.ContainsFunc(p.Changed, func(f execution.Facts) bool { return f.ExecutionID == id && listensOn(f, port) }) {
				return true
			}
		}
		return false
	}
	// Only listings: no observe, no follow, no readyPort.
	if !testsupport.Poll(waitBound, func() bool {
		h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, nil)
		return announced()
	}) {
		t.Fatal("the port the listings found was never announced")
	}
	s.mustCall(t, "exec/stop", id)
}

// A followed execution (a panel's inspector shows it) announces its
// listening set when it changes, with no readyPort and no output to carry
// the news; unfollowed, a later change stays unannounced until facts are
// taken.
func TestFollowedListeningIsAnnounced(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	first, second := freePort(t), freePort(t)
	gate1, gate2 := fifo(t, "first"), fifo(t, "second")
	o := s.mustStart(fmt.Sprintf(`exec python3 -c '
import socket
open(%q).read()
a=socket.socket(); a.bind(("127.0.0.1", %d)); a.listen()
open(%q).read()
b=socket.socket(); b.bind(("127.0.0.1", %d)); b.listen()
import time; time.sleep(100)' >/dev/null 2>&1`, gate1, first, gate2, second), map[string]any{"yieldMs": 0})
	id := o.Facts.ExecutionID
	follow := func(on bool) {
		h.mustCall("exec/follow", map[string]any{"sessionId": s.id, "executionId": id, "as": "user", "follow": on}, nil)
	}
	follow(true)
	release(t, gate1)
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && listensOn(f, first) })

	// Unfollowed: the helper reads no more ports for it on its own. The
	// second port shows once a listing asks (the listing reads stale
	// ports after it answers, and announces what changed), never before.
	follow(false)
	release(t, gate2)
	h.mu.Lock()
	asked := len(h.notes)
	h.mu.Unlock()
	var f execution.Facts
	for deadline := time.Now().Add(waitBound); !listensOn(f, second); {
		if time.Now().After(deadline) {
			t.Fatalf("the second port never showed: %+v", f.Listening)
		}
		var list struct{ Executions []execution.Facts }
		h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
		for _, x := range list.Executions {
			if x.ExecutionID == id {
				f = x
			}
		}
	}
	h.mu.Lock()
	for _, n := range h.notes[:asked] {
		var p rpc.ChangedParams
		if n.Method == rpc.NotifyChanged && json.Unmarshal(n.Params, &p) == nil {
			for _, c := range p.Changed {
				if c.ExecutionID == id && listensOn(c, second) {
					h.mu.Unlock()
					t.Fatal("an unfollowed execution's new port was announced before anything asked")
				}
			}
		}
	}
	h.mu.Unlock()

	// A finished execution cannot be followed.
	s.mustCall(t, "exec/stop", id)
	h.wantError("exec/follow", map[string]any{"sessionId": s.id, "executionId": id, "as": "user"}, -32003, "refused")
}

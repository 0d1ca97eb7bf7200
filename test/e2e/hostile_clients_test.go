package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// A second client while one is attached is answered -32005 and closed;
// the attached one goes on.
func TestExtraListenClientRefused(t *testing.T) {
	t.Parallel()
	l := startListener(t)
	a := l.dial(nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := a.Call(ctx, "initialize", nil, nil); err != nil {
		t.Fatal(err)
	}
	b, nc := l.rawDialNow()
	m := b.next()
	if string(m.ID) != "null" || m.Error == nil || m.Error.Code != -32005 || m.Error.Data.Kind != "unavailable" ||
		!strings.Contains(m.Error.Message, "another client is attached") {
		t.Fatalf("extra client: id %s error %+v", m.ID, m.Error)
	}
	readToEOF(t, b.out, nc)
	if err := a.Call(ctx, "initialize", nil, nil); err != nil {
		t.Fatalf("the attached client after the refusal: %v", err)
	}
	_ = a.Call(ctx, "shutdown", nil, nil)
	a.Close()
}

// A client that stops reading while executions flood notifications is
// disconnected after the stall timeout, and the helper's memory stays
// bounded meanwhile: progress is dropped, live sets are built only when
// they can be sent, and the outbox is capped.
func TestStuckClientDisconnectedWithBoundedMemory(t *testing.T) {
	l := startListenerWith(t, "--stall-timeout", "3s")
	c, nc := l.rawDial()
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":"open","method":"session/open","params":{"sessionId":"flood","stateDir":"` + dir + `"}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	// Each execution's facts carry its 64 KiB command: every progress and
	// live set is large. Each prints 100 lines a second, so there is
	// always progress to announce.
	command := ": '" + strings.Repeat("p", 64<<10) + "'; while :; do echo tick; sleep 0.01; done"
	const n = 16
	for i := range n {
		p, _ := json.Marshal(map[string]any{"sessionId": "flood", "command": command, "yieldMs": 0, "readOnly": true,
			"toolUseId": fmt.Sprintf("tool-%d", i), "cwd": "/", "env": map[string]string{"MEVEDEL_E2E": "1"}})
		c.sendFrame(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"exec/start","params":%s}`, i, p))
		m := c.next()
		var o obs
		if err := json.Unmarshal(m.Result, &o); err != nil || m.Error != nil || o.Facts.State != execution.Running {
			t.Fatalf("start %d: %+v %+v", i, m.Error, o.Facts)
		}
	}
	base := peakRSS(t, l.child.Pid())
	// From here on nothing is read.
	if !l.waitLog("disconnecting the client", 1) {
		t.Fatalf("the stuck client was not disconnected:\n%s", l.stderr.String())
	}
	peak := peakRSS(t, l.child.Pid())
	t.Logf("peak RSS %d MiB with the client reading, %d MiB when it was disconnected", base>>20, peak>>20)
	if peak-base > 96<<20 {
		t.Fatalf("peak RSS grew by %d MiB while the client did not read", (peak-base)>>20)
	}
	readToEOF(t, c.out, nc)
}

// A client that stops reading and then goes away: the helper's failed
// write ends the connection as EOF would (SIGPIPE does not kill it), so
// it shuts down in order while the client's end of stdin is still open.
func TestClientThatStopsReadingThenDies(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":1,"method":"session/open","params":{"sessionId":"a","stateDir":"` + dir + `"}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":2,"method":"exec/start","params":{"sessionId":"a","command":"echo ready; sleep 1000","yieldMs":0,"env":{"MEVEDEL_E2E":"1"},"cwd":"/"}}`)
	m := c.next()
	var o obs
	if err := json.Unmarshal(m.Result, &o); err != nil || m.Error != nil || o.Facts.Pid == 0 {
		t.Fatalf("start: %s %+v", m.Result, m.Error)
	}
	c.child.Stdout().Close()
	// Its answer has nowhere to go.
	c.sendFrame(`{"jsonrpc":"2.0","id":3,"method":"exec/list","params":{"sessionId":"a"}}`)
	select {
	case <-c.child.Exited():
	case <-time.After(waitBound):
		t.Fatalf("the helper kept running after its output was closed:\n%s", c.stderr.String())
	}
	if code := c.child.ExitCode(); code != 0 {
		t.Fatalf("exit code %d, want a clean exit:\n%s", code, c.stderr.String())
	}
	if !testsupport.WaitGone(o.Facts.Pid, 5*time.Second) {
		t.Fatal("the command survived the helper")
	}
	if got := settledInJournal(t, dir)[o.Facts.ExecutionID]; got != execution.SessionEnded {
		t.Fatalf("journal: %s settled as %q, want session-ended", o.Facts.ExecutionID, got)
	}
}

// settledInJournal returns the termination of each execution's last
// settled record in the session's journal.
func settledInJournal(t *testing.T, stateDir string) map[string]execution.Termination {
	t.Helper()
	f, err := os.Open(filepath.Join(stateDir, "transcript.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]execution.Termination{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Type        string
			ExecutionID string
			Facts       execution.Facts
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Type == "settled" {
			out[r.ExecutionID] = r.Facts.Termination
		}
	}
	return out
}

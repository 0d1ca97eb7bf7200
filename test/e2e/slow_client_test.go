package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// rssBound is what the helper may hold resident, at its peak, while a
// client does not read; the race detector's shadow memory included.
const rssBound = 150 << 20

// currentRSS is pid's resident set size now (VmRSS).
func currentRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// ticker is a command that prints a 1000-character line 20 times a
// second forever, without a process per tick: it waits on a fifo nobody
// writes, opened read-write so the open does not block.
func ticker(gate string) string {
	return fmt.Sprintf("exec 3<> %s; while :; do printf '%%01000d\\n' $SECONDS; read -t 0.05 -u 3; done", gate)
}

// A client that stops reading while executions flood output, progress
// and changes, and keeps sending requests, costs the helper bounded
// memory, and is disconnected once it has taken nothing for the stall
// timeout; the executions live on for the next client.
func TestStoppedClientBoundedAndDisconnected(t *testing.T) {
	l := startListenerWith(t, "--stall-timeout", "3s")
	c, nc := l.rawDial()
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":"open","method":"session/open","params":{"sessionId":"slow","stateDir":"` + dir + `","limits":{"maxLive":64}}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	gate := fifo(t, "gate")
	label := strings.Repeat("l", 4096)
	const n = 20
	for i := range n {
		p, _ := json.Marshal(map[string]any{"sessionId": "slow", "command": ticker(gate), "yieldMs": 0, "readOnly": true,
			"label": label, "toolUseId": fmt.Sprintf("tool-%d", i), "cwd": "/", "env": map[string]string{"MEVEDEL_E2E": "1"}})
		c.sendFrame(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"exec/start","params":%s}`, i, p))
		var o obs
		if m := c.next(); json.Unmarshal(m.Result, &o) != nil || m.Error != nil || o.Facts.State != execution.Running {
			t.Fatalf("start %d: %+v %+v", i, m.Error, o.Facts)
		}
	}
	pid := l.child.Pid()
	base := peakRSS(t, pid)
	stopped := time.Now()
	// From here on nothing is read. The client keeps asking: short
	// commands whose replies and settlements (never dropped) queue up
	// too, until its writes block or fail.
	var sender sync.WaitGroup
	sender.Go(func() {
		for i := range 200 {
			p, _ := json.Marshal(map[string]any{"sessionId": "slow", "command": "true", "readOnly": true,
				"label": label, "cwd": "/", "env": map[string]string{"MEVEDEL_E2E": "1"}})
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"short-%d","method":"exec/start","params":%s}`, i, p)
			_ = nc.SetWriteDeadline(time.Now().Add(waitBound))
			if _, err := fmt.Fprintf(nc, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
				return // the helper gave up on us
			}
		}
	})
	// The resident size, sampled until the helper gives up on the
	// client (bounded by the wait for its log line).
	var maxRSS int64
	gone := make(chan bool, 1)
	go func() { gone <- l.waitLog("disconnecting the client", 1) }()
	var disconnected bool
sample:
	for {
		maxRSS = max(maxRSS, currentRSS(t, pid))
		select {
		case disconnected = <-gone:
			break sample
		case <-time.After(50 * time.Millisecond): // a sampling period, not a wait for anything
		}
	}
	after := time.Since(stopped)
	if !disconnected {
		t.Fatalf("the stuck client was not disconnected:\n%s", l.stderr.String())
	}
	_ = nc.Close()
	sender.Wait()
	peak := peakRSS(t, pid)
	t.Logf("RSS %d MiB before, at most %d MiB sampled, peak %d MiB; disconnected %v after the client stopped reading",
		base>>20, maxRSS>>20, peak>>20, after.Round(time.Millisecond))
	if after < 3*time.Second {
		t.Errorf("disconnected %v after the client stopped reading, before the 3 s stall timeout", after)
	}
	if peak > rssBound || peak-base > 96<<20 {
		t.Fatalf("peak RSS %d MiB (from %d MiB) while the client did not read; bound %d MiB", peak>>20, base>>20, rssBound>>20)
	}

	// The next client finds the executions still running, every one.
	next := l.dial(nil)
	defer next.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var list struct{ Executions []execution.Facts }
	if err := next.Call(ctx, "exec/list", map[string]any{"sessionId": "slow", "as": "user"}, &list); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, f := range list.Executions {
		if f.ToolUseID != "" && f.State == execution.Running {
			running++
		}
	}
	if running != n {
		t.Fatalf("%d of the %d tickers run for the next client", running, n)
	}
	var stopped2 struct{ Stopped int }
	if err := next.Call(ctx, "exec/stopAll", map[string]any{"sessionId": "slow", "as": "user"}, &stopped2); err != nil {
		t.Fatal(err)
	}
	_ = next.Call(ctx, "shutdown", nil, nil)
}

// A client that pauses reading while 20 executions with 4 KiB labels
// change constantly gets, when it reads again, no backlog of exec/changed:
// changes coalesce and carry only what changed, so the bytes stay those of
// a client that always read, and the helper's memory stays bounded.
func TestPausedClientChangedBytesBounded(t *testing.T) {
	c := startStream(t)
	dir := t.TempDir()
	c.call("session/open", map[string]any{"sessionId": "a", "stateDir": dir, "limits": map[string]any{"maxLive": 32}}, nil)
	gate := fifo(t, "gate")
	const n = 20
	began := time.Now()
	var ids []string
	for i := range n {
		var o obs
		c.call("exec/start", map[string]any{"sessionId": "a", "command": ticker(gate), "yieldMs": 0, "readOnly": true,
			"label": fmt.Sprintf("%02d", i) + strings.Repeat("l", 4094), "cwd": dir, "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o)
		ids = append(ids, o.Facts.ExecutionID)
	}
	pid := c.child.Pid()
	base := peakRSS(t, pid)
	// The client reads nothing until every command has printed another
	// 60 lines (3 s of output), read from their logs on disk.
	size := func(id string) int64 {
		fi, err := os.Stat(filepath.Join(dir, "executions", id+".log"))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	from := map[string]int64{}
	for _, id := range ids {
		from[id] = size(id)
	}
	if !testsupport.Poll(waitBound, func() bool {
		for _, id := range ids {
			if size(id)-from[id] < 60*1001 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the commands did not print while the client paused")
	}
	paused := len(c.log)
	// Reading again: the listing comes after everything queued before it.
	var list struct{ Executions []execution.Facts }
	c.call("exec/list", map[string]any{"sessionId": "a", "as": "user"}, &list)
	wall := time.Since(began)
	if len(list.Executions) != n {
		t.Fatalf("%d live, want %d", len(list.Executions), n)
	}
	var bytes, backlog, notes int
	for i, m := range c.log {
		if m.Method != "exec/changed" {
			continue
		}
		notes++
		bytes += len(m.Params)
		if i >= paused {
			backlog += len(m.Params)
		}
	}
	limit := int(wall/time.Second) + 6
	bound := n * limit * 6 << 10
	peak := peakRSS(t, pid)
	t.Logf("%d exec/changed, %d KiB in %v (bound %d KiB); %d KiB of them waited for the paused client; RSS peak %d MiB from %d MiB",
		notes, bytes>>10, wall.Round(time.Millisecond), bound>>10, backlog>>10, peak>>20, base>>20)
	if bytes > bound {
		t.Errorf("exec/changed took %d KiB, bound %d KiB", bytes>>10, bound>>10)
	}
	// What waited is what changed since the client stopped reading, not
	// a live set per change: a few rounds of 20 facts at most.
	if backlog > 8*n*6<<10 {
		t.Errorf("%d KiB of exec/changed waited for the paused client", backlog>>10)
	}
	if peak > rssBound {
		t.Errorf("peak RSS %d MiB, bound %d MiB", peak>>20, rssBound>>20)
	}
	c.call("exec/stopAll", map[string]any{"sessionId": "a", "as": "user"}, nil)
}

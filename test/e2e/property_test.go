package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/sourcegraph/jsonrpc2"
)

// listener is a helper serving a unix socket, kept alive across client
// disconnects by --linger.
type listener struct {
	t      *testing.T
	child  *client.Child
	sock   string
	home   string
	stderr *testsupport.Buffer
}

func startListener(t *testing.T) *listener {
	t.Helper()
	home := t.TempDir()
	l := &listener{t: t, home: home, sock: filepath.Join(home, "helper.sock"), stderr: &testsupport.Buffer{}}
	child, err := client.Spawn(client.Options{Bin: helperBin, Args: []string{"serve", "--listen", l.sock, "--linger", "30s"},
		Env: baseEnv(home), Stderr: l.stderr})
	if err != nil {
		t.Fatal(err)
	}
	l.child = child
	t.Cleanup(func() {
		// A test that failed midway left its sessions running: end them.
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		if c, err := client.Dial(ctx, l.sock, nil); err == nil {
			_ = c.Shutdown(waitBound)
		}
		cancel()
		if err := child.Wait(waitBound); err != nil {
			t.Errorf("listening helper did not exit: %v", err)
		}
		if s := l.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic") || strings.Contains(s, "BUG") {
			t.Errorf("helper stderr:\n%s", s)
		}
		if left := testsupport.UnderHome(home, true); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
	})
	return l
}

// waitLog waits until the helper's log holds s n times.
func (l *listener) waitLog(s string, n int) bool {
	return l.stderr.Wait(waitBound, func(log string) bool { return strings.Count(log, s) >= n })
}

// dial connects to the helper. handle runs on the connection's read loop,
// in arrival order: it must never block.
func (l *listener) dial(handle client.Handler) *client.Client {
	l.t.Helper()
	// The socket appears once the helper listens, and the helper says
	// nothing when it does: this first wait polls, bounded. Later dials
	// succeed at once (the socket stays; a connection waits in the backlog
	// until the helper accepts it).
	for delay, deadline := time.Millisecond, time.Now().Add(waitBound); ; delay = min(2*delay, 50*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		c, err := client.Dial(ctx, l.sock, handle)
		cancel()
		if err == nil {
			return c
		}
		select {
		case <-l.child.Exited():
			l.t.Fatalf("the helper exited before listening: %v\n%s", err, l.stderr.String())
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("helper socket: %v", err)
		}
	}
}

// What the acknowledging client does with one send of a delivery.
type answer int

const (
	ackDurable answer = iota // the sink kept it: durable ack at once
	ackFailed                // the sink failed: error ack
	ackLate                  // the sink keeps it, the durable ack comes late
	ackNever                 // no answer: the helper's timeout restores it
	ackDrop                  // no answer, and the connection drops before the next request
)

// propMisbehaviour bounds the misbehaving answers to one delivery, so the
// doubling backoff (and the test's runtime) stays short.
const propMisbehaviour = 3

// propClient is the acknowledging side of the property test: it keeps
// records the way the Emacs facade does (a durable id is acked again, never
// handed to the sink twice), and misbehaves at random.
//
// Its handler runs on the connection's read loop and only takes c.mu
// briefly: every request it makes (acks) goes out from its own goroutine,
// since a Call on the read loop could never read its own reply.
type propClient struct {
	t    *testing.T
	l    *listener
	sid  string
	seed uint64

	acks sync.WaitGroup // ack goroutines

	mu            sync.Mutex
	conn          *client.Client
	redialed      chan struct{} // closed when conn is replaced
	over          bool          // the test has ended: record nothing more
	timers        []*time.Timer
	drops         int
	dropSoon      bool
	first         map[string]delivery          // first receipt of each id
	lastAttempt   map[connID]int               // highest attempt received per connection and id
	durable       map[string]bool              // ids the sink kept
	confirmed     map[string]bool              // ids whose durable ack the helper answered
	pending       map[string]bool              // ids the sink holds, ack not yet sent
	kept          map[string]int               // times the sink kept each id
	byExec        map[string]map[string]bool   // execution id -> delivery ids seen
	lines         map[string][]string          // monitor id -> lines kept, in order
	lineAt        map[string]map[string]string // monitor id -> line -> delivery id
	current       map[string]string            // monitor id -> the batch received last
	terminals     map[string]string            // monitor id -> terminal delivery id
	receipts      []delivery                   // in arrival order
	wakes         []wake
	busy          bool // confirmed by the helper's reply
	wakeWhileBusy int
	changed       chan struct{}
}

func (c *propClient) errorf(format string, args ...any) {
	if !c.over {
		c.t.Errorf(format, args...)
	}
}

func (c *propClient) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *propClient) handle(conn *client.Client, n note) {
	switch n.Method {
	case "mailbox/deliver":
		var d delivery
		if json.Unmarshal(n.Params, &d) != nil {
			return
		}
		c.onDelivery(conn, d)
	case "session/wake":
		var w wake
		if json.Unmarshal(n.Params, &w) != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.over {
			return
		}
		c.wakes = append(c.wakes, w)
		// A dropped connection's read loop may still hand over what was
		// buffered; such a wake was sent before the drop, so before any
		// busy reply on the new connection.
		if c.busy && conn == c.conn {
			c.wakeWhileBusy++
			c.errorf("wake %v while busy", w.DeliveryIDs)
		}
		for _, id := range w.DeliveryIDs {
			if !c.durable[id] {
				c.errorf("wake for %s before it was kept", id)
			}
		}
	}
}

type connID struct {
	conn *client.Client
	id   string
}

// choose is the answer to one send: a function of the seed, the id and
// the attempt only, so arrival order does not change it.
func (c *propClient) choose(id string, attempt int) (answer, time.Duration) {
	if attempt > propMisbehaviour {
		return ackDurable, 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	rng := rand.New(rand.NewPCG(c.seed, h.Sum64()+uint64(attempt)))
	switch r := rng.Float64(); {
	case r < 0.45:
		return ackDurable, 0
	case r < 0.60:
		return ackFailed, 0
	case r < 0.75: // sometimes after the helper's ack timeout
		return ackLate, time.Duration(rng.IntN(400)) * time.Millisecond
	case r < 0.88:
		return ackNever, 0
	default:
		return ackDrop, 0
	}
}

// ack answers id from its own goroutine.
func (c *propClient) ack(conn *client.Client, id string, durable bool) {
	p := map[string]any{"sessionId": c.sid, "deliveryId": id}
	if durable {
		p["durable"] = true
	} else {
		p["error"] = "random failure"
	}
	c.acks.Add(1)
	go func() {
		defer c.acks.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			err := conn.Call(ctx, "mailbox/ack", p, nil)
			cancel()
			if err == nil && durable {
				c.mu.Lock()
				c.confirmed[id] = true
				c.mu.Unlock()
				c.signal()
			}
			if err == nil || !durable || !errors.Is(err, jsonrpc2.ErrClosed) {
				return
			}
			// A durable ack cut off with its connection may or may not
			// have reached the helper: repeat it on the next connection
			// (acks are idempotent), so the test knows when the helper has
			// nothing pending.
			c.mu.Lock()
			next, redialed, over := c.conn, c.redialed, c.over
			c.mu.Unlock()
			if over {
				return
			}
			if next == conn {
				<-redialed // closed by the next drop, or when the test ends
				continue
			}
			conn = next
		}
	}()
}

// keepLocked hands d to the sink.
func (c *propClient) keepLocked(d delivery) {
	c.kept[d.DeliveryID]++
	c.durable[d.DeliveryID] = true
	switch d.Kind {
	case execution.KindMonitor:
		m := c.lineAt[d.Attrs.MonitorID]
		if m == nil {
			m = map[string]string{}
			c.lineAt[d.Attrs.MonitorID] = m
		}
		for _, line := range d.Lines {
			if prev, dup := m[line]; dup {
				c.errorf("line %q of %s in deliveries %s and %s", line, d.Attrs.MonitorID, prev, d.DeliveryID)
			}
			m[line] = d.DeliveryID
		}
		c.lines[d.Attrs.MonitorID] = append(c.lines[d.Attrs.MonitorID], d.Lines...)
	case execution.KindMonitorTerminal:
		c.terminals[d.Attrs.MonitorID] = d.DeliveryID
	}
	c.signal()
}

func (c *propClient) onDelivery(conn *client.Client, d delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	c.receipts = append(c.receipts, d)
	id := d.DeliveryID
	// Sends go out in order on one connection. (A dropped connection's
	// read loop may hand over its last notifications after the new
	// connection's first.)
	if k := (connID{conn, id}); d.Attempt <= c.lastAttempt[k] {
		c.errorf("delivery %s attempt %d after attempt %d", id, d.Attempt, c.lastAttempt[k])
	} else {
		c.lastAttempt[k] = d.Attempt
	}
	if f, seen := c.first[id]; seen {
		again := d
		f.Attempt, again.Attempt = 0, 0
		if !reflect.DeepEqual(f, again) {
			c.errorf("delivery %s changed between sends:\n%+v\n%+v", id, f, d)
		}
	} else {
		c.first[id] = d
		if d.Kind == execution.KindMonitor || d.Kind == execution.KindMonitorTerminal {
			// One batch in flight: the next comes only after the durable
			// ack of the one before, which the sink sends after keeping it.
			if prev := c.current[d.Attrs.MonitorID]; prev != "" && !c.durable[prev] {
				c.errorf("monitor %s: %s sent while %s was not acked", d.Attrs.MonitorID, id, prev)
			}
			if c.terminals[d.Attrs.MonitorID] != "" {
				c.errorf("monitor %s: %s after its terminal delivery", d.Attrs.MonitorID, id)
			}
			c.current[d.Attrs.MonitorID] = id
		}
	}
	if c.durable[id] {
		c.ack(conn, id, true) // our ack was lost: repeat it
		return
	}
	if c.pending[id] {
		return // the sink has it and will answer
	}
	if d.Kind == execution.KindExecution {
		if c.byExec[d.Attrs.ExecutionID] == nil {
			c.byExec[d.Attrs.ExecutionID] = map[string]bool{}
		}
		c.byExec[d.Attrs.ExecutionID][id] = true
	}
	switch a, delay := c.choose(id, d.Attempt); a {
	case ackDurable:
		c.keepLocked(d)
		c.ack(conn, id, true)
	case ackFailed:
		c.ack(conn, id, false)
	case ackLate:
		c.pending[id] = true
		c.timers = append(c.timers, time.AfterFunc(delay, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.over {
				return
			}
			delete(c.pending, id)
			c.keepLocked(d)
			c.ack(conn, id, true)
		}))
	case ackNever:
	case ackDrop:
		if c.drops < 8 {
			c.dropSoon = true
		}
	}
}

// call makes a request, first dropping and redialling the connection when
// a delivery asked for it (only the test's main goroutine drops, so no
// start is ever in flight then). A request cut off by a drop (a waiting
// observation) is made again on the new connection.
func (c *propClient) call(method string, params, result any, drop bool) error {
	_, err := c.callCut(method, params, result, drop)
	return err
}

// callCut is call, also reporting whether a drop cut the request off
// (then the helper may have answered it on the old connection).
func (c *propClient) callCut(method string, params, result any, drop bool) (cut bool, err error) {
	c.mu.Lock()
	if drop && c.dropSoon {
		c.dropSoon = false
		c.drops++
		old := c.conn
		c.mu.Unlock()
		old.Close()
		conn := c.l.dial(c.handle)
		c.mu.Lock()
		c.conn = conn
		close(c.redialed)
		c.redialed = make(chan struct{})
	}
	c.mu.Unlock()
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		conn, redialed := c.conn, c.redialed
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		err = conn.Call(ctx, method, params, result)
		cancel()
		if err == nil || !errors.Is(err, jsonrpc2.ErrClosed) {
			return cut, err
		}
		cut = true
		select {
		case <-redialed:
		case <-deadline.C:
			return cut, err
		}
	}
}

// propSeed is the run's seed: MEVEDEL_PROP_SEED reruns one.
func propSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MEVEDEL_PROP_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MEVEDEL_PROP_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (MEVEDEL_PROP_SEED=%d reruns its choices; timing still varies)", seed, seed)
	return seed
}

func TestPropertyEveryResultAckedExactlyOnce(t *testing.T) {
	seed := propSeed(t)
	l := startListener(t)
	c := &propClient{
		t: t, l: l, sid: "prop", seed: seed, redialed: make(chan struct{}),
		first: map[string]delivery{}, lastAttempt: map[connID]int{},
		durable: map[string]bool{}, confirmed: map[string]bool{}, pending: map[string]bool{}, kept: map[string]int{},
		byExec: map[string]map[string]bool{}, lines: map[string][]string{}, lineAt: map[string]map[string]string{},
		current: map[string]string{}, terminals: map[string]string{},
		changed: make(chan struct{}, 1),
	}
	c.conn = l.dial(c.handle)
	t.Cleanup(func() {
		c.mu.Lock()
		c.over = true
		close(c.redialed) // no more drops
		for _, tm := range c.timers {
			tm.Stop()
		}
		conn := c.conn
		c.mu.Unlock()
		conn.Close()
		c.acks.Wait()
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.call("session/open", map[string]any{"sessionId": c.sid, "stateDir": filepath.Join(l.home, "state"),
		"limits": map[string]any{"ackTimeoutMs": 250, "retryMs": 20}}, nil, true))
	env := map[string]string{"MEVEDEL_E2E": "1"}

	// Monitors: every line must arrive exactly once, in order.
	const monitors, monitorLines = 4, 60
	var monIDs []string
	for j := range monitors {
		var m execution.MonitorInfo
		must(c.call("monitor/start", map[string]any{"sessionId": c.sid, "env": env, "label": fmt.Sprintf("m%d", j),
			"command": fmt.Sprintf("for i in $(seq 1 %d); do echo m%d-$i; done", monitorLines, j)}, &m, true))
		monIDs = append(monIDs, m.MonitorID)
	}

	// Executions: some claimed by a waiting poll, some stopped, the rest
	// delivered. The owner's busy/idle state flips at random.
	const execs = 60
	type run struct {
		id              string
		i               int
		stopped, polled bool
		claimed         bool
		// cut: a drop cut the waiting observation off. The helper may
		// have answered it on the dead connection, consuming output there
		// (a reply can claim or consume whether or not anyone reads it).
		cut bool
	}
	var mu sync.Mutex
	var runs []*run
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(seed, 2))
	var stops, polls int
	for i := range execs {
		if rng.IntN(4) == 0 {
			state := "idle"
			if rng.IntN(2) == 0 {
				state = "busy"
			}
			if state == "idle" {
				c.mu.Lock()
				c.busy = false // wakes may come as soon as the helper reads it
				c.mu.Unlock()
			}
			must(c.call("owner/state", map[string]any{"sessionId": c.sid, "state": state}, nil, true))
			// The reply follows every wake decided before it.
			c.mu.Lock()
			c.busy = state == "busy"
			c.mu.Unlock()
		}
		gate := fifo(t, "g")
		var o obs
		must(c.call("exec/start", map[string]any{"sessionId": c.sid, "env": env, "yieldMs": 0,
			"command": fmt.Sprintf("read < %s; echo out-%d; exit %d", gate, i, i%3)}, &o, true))
		if o.Final {
			t.Fatalf("exec/start did not yield: %+v", o)
		}
		r := &run{id: o.Facts.ExecutionID, i: i}
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
		switch k := rng.IntN(10); {
		case k < 2:
			r.stopped = true
			stops++
			var so obs
			must(c.call("exec/stop", map[string]any{"sessionId": c.sid, "executionId": r.id}, &so, true))
			if !so.Final {
				t.Fatalf("stop reply not final: %+v", so)
			}
		case k < 4:
			r.polled = true
			polls++
			wg.Add(1)
			go func() {
				defer wg.Done()
				var po obs
				cut, err := c.callCut("exec/observe", map[string]any{"sessionId": c.sid, "executionId": r.id, "waitMs": 20000}, &po, false)
				mu.Lock()
				r.cut = cut
				mu.Unlock()
				if err != nil {
					t.Errorf("waiting observation of %s: %v", r.id, err)
					return
				}
				if !po.Final {
					return // cut short; the result is delivered instead
				}
				// A final reply without a delivery id claimed the result,
				// unless a delivery had already been made and kept.
				c.mu.Lock()
				seenBefore := len(c.byExec[r.id]) > 0
				c.mu.Unlock()
				mu.Lock()
				r.claimed = po.DeliveryID == "" && !seenBefore
				mu.Unlock()
				if want := fmt.Sprintf("out-%d\n", r.i); !cut && po.Output != want {
					t.Errorf("waiting observation of %s: output %q, want %q", r.id, po.Output, want)
				}
			}()
			release(t, gate)
		default:
			release(t, gate)
		}
	}
	wg.Wait()
	c.mu.Lock()
	c.busy = false // wakes may come as soon as the helper reads it
	c.mu.Unlock()
	must(c.call("owner/state", map[string]any{"sessionId": c.sid, "state": "idle"}, nil, true))

	// Wait until everything owed is kept, and the helper has answered a
	// durable ack for each.
	owedLocked := func() []string {
		var missing []string
		for _, r := range runs {
			if r.stopped || r.claimed {
				continue
			}
			ok := false
			for id := range c.byExec[r.id] {
				ok = ok || c.confirmed[id]
			}
			if !ok {
				missing = append(missing, fmt.Sprintf("execution %s (deliveries %v)", r.id, c.byExec[r.id]))
			}
		}
		for _, m := range monIDs {
			if len(c.lines[m]) != monitorLines || !c.confirmed[c.terminals[m]] {
				missing = append(missing, fmt.Sprintf("monitor %s (%d lines, terminal %q)", m, len(c.lines[m]), c.terminals[m]))
			}
		}
		for id := range c.durable {
			if !c.confirmed[id] {
				missing = append(missing, "ack of "+id)
			}
		}
		return missing
	}
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		mu.Lock()
		c.mu.Lock()
		missing := owedLocked()
		c.mu.Unlock()
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		select {
		case <-c.changed:
		case <-deadline.C:
			t.Fatalf("not kept and acked in time: %v", missing)
		}
	}

	// Every delivery the helper made is durable now: closing the session
	// discards nothing, so none was made that the client never got.
	var closed struct{ Discarded int }
	must(c.call("session/close", map[string]any{"sessionId": c.sid}, &closed, false))
	if closed.Discarded != 0 {
		t.Errorf("session/close discarded %d deliveries", closed.Discarded)
	}

	c.mu.Lock()
	var delivered, retries, duplicates, lost, afterClaim, claimed int
	stoppedIDs := map[string]bool{}
	for _, r := range runs {
		ids := c.byExec[r.id]
		switch {
		case r.stopped:
			stoppedIDs[r.id] = true
			if len(ids) > 0 {
				t.Errorf("stopped execution %s was delivered", r.id)
			}
		case r.claimed:
			claimed++
			if len(ids) > 0 {
				afterClaim++
				t.Errorf("execution %s delivered after a poll claimed it", r.id)
			}
		case len(ids) == 0:
			lost++
			t.Errorf("execution %s never delivered", r.id)
		case len(ids) > 1:
			duplicates += len(ids) - 1
			t.Errorf("execution %s delivered under %d ids", r.id, len(ids))
		default:
			delivered++
			for id := range ids {
				d := c.first[id]
				if want := fmt.Sprintf("out-%d\n", r.i); !r.cut && (d.Observation == nil || d.Observation.Output != want) {
					t.Errorf("delivery %s: observation %+v, want output %q", id, d.Observation, want)
				}
				if d.Attrs.ExitCode == nil || *d.Attrs.ExitCode != r.i%3 {
					t.Errorf("delivery %s: attrs %+v, want exit code %d", id, d.Attrs, r.i%3)
				}
			}
		}
	}
	for id := range c.byExec {
		if !slices.ContainsFunc(runs, func(r *run) bool { return r.id == id }) {
			t.Errorf("EXECUTION delivery for %s, not one of the test's commands (a monitor's?)", id)
		}
	}
	for j, m := range monIDs {
		want := make([]string, monitorLines)
		for i := range want {
			want[i] = fmt.Sprintf("m%d-%d", j, i+1)
		}
		if got := c.lines[m]; !reflect.DeepEqual(got, want) {
			lost += max(0, monitorLines-len(got))
			t.Errorf("monitor %s: lines %q, want %d in order", m, got, monitorLines)
		}
	}
	for id, n := range c.kept {
		if n > 1 {
			duplicates++
			t.Errorf("the sink got %s %d times", id, n)
		}
	}
	for _, d := range c.receipts {
		if d.Attempt > 1 {
			retries++
		}
	}
	// Wakes: only while idle, coalesced (no id twice in one), never for a
	// stop. Owed attention that nobody attends is offered again.
	wokenIDs := map[string]bool{}
	for _, w := range c.wakes {
		if len(w.DeliveryIDs) == 0 {
			t.Errorf("empty wake")
		}
		inWake := map[string]bool{}
		for _, id := range w.DeliveryIDs {
			if inWake[id] {
				t.Errorf("delivery %s twice in one wake", id)
			}
			inWake[id] = true
			wokenIDs[id] = true
		}
	}
	for id := range wokenIDs {
		if d, ok := c.first[id]; !ok {
			t.Errorf("wake for %s, never delivered", id)
		} else if stoppedIDs[d.Attrs.ExecutionID] {
			t.Errorf("wake for stopped execution %s", d.Attrs.ExecutionID)
		}
	}
	if c.wakeWhileBusy > 0 {
		t.Errorf("%d wakes while the owner was busy", c.wakeWhileBusy)
	}
	t.Logf("executions %d (delivered %d, claimed by a poll %d of %d polled, stopped %d); monitors %d with %d lines",
		execs, delivered, claimed, polls, stops, monitors, monitors*monitorLines)
	t.Logf("deliveries %d, sends %d, retries %d, connection drops %d, wakes %d for %d items, duplicates %d, lost %d, after claim %d",
		len(c.first), len(c.receipts), retries, c.drops, len(c.wakes), len(wokenIDs), duplicates, lost, afterClaim)
	c.mu.Unlock()

	must(c.call("shutdown", nil, nil, false))
}

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/sourcegraph/jsonrpc2"
)

// The acknowledging client of the property test, and the connections it
// reads in order.

// at is where the client read a message: its connection (numbered in the
// order they were dialled, across helpers) and its place among the
// messages read on it. A connection is dialled only once the one before it
// is closed, the helper serves one client at a time, and a crashed helper
// is dead before the next one starts: so `before` is the order in which
// the helpers sent what the client read.
type at struct{ conn, pos int }

func (a at) before(b at) bool { return a.conn < b.conn || a.conn == b.conn && a.pos < b.pos }

// propConn is one connection to a helper. It is a bare jsonrpc2
// connection rather than a client.Client so that replies are numbered in
// the same sequence as notifications: the test decides from that order
// whether a wake came before or after a reply.
type propConn struct {
	n, gen int            // its number; the helper generation it talks to
	rpc    *jsonrpc2.Conn // set before ready is closed
	ready  chan struct{}
	ids    atomic.Uint64
	pos    int // guarded by propClient.mu: messages read so far
}

type replyKey struct {
	conn int
	id   uint64
}

type connID struct {
	conn int
	id   string
}

type propHandler func(*jsonrpc2.Request)

func (h propHandler) Handle(_ context.Context, _ *jsonrpc2.Conn, r *jsonrpc2.Request) { h(r) }

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
// handed to the sink twice, across helper restarts too), and misbehaves at
// random.
//
// Its handler runs on the connection's read loop and only takes c.mu
// briefly: every request it makes (acks) goes out from its own goroutine,
// since a call on the read loop could never read its own reply. Nothing
// calls a connection while holding c.mu.
type propClient struct {
	t    *testing.T
	sid  string
	seed uint64

	acks sync.WaitGroup // ack goroutines

	mu       sync.Mutex
	l        *listener // the live helper
	conn     *propConn
	gen      int           // the live helper's generation, from 1
	redialed chan struct{} // closed when conn is replaced (drop or restart)
	over     bool          // the test has ended: record nothing more
	timers   []*time.Timer
	dials    int
	drops    int
	dropSoon bool
	holdNext bool           // the sink holds the next result it gets, for the crash step
	held     *delivery      // that result
	prefixes map[int]string // generation -> the session's id prefix on it
	replyAt  map[replyKey]at

	first       map[string]delivery          // first receipt of each id
	firstAt     map[string]at                // where it was read
	firstIn     map[string]map[int]delivery  // first receipt of each id per generation
	lastAttempt map[connID]int               // highest attempt received per connection and id
	durable     map[string]bool              // ids the sink kept
	confirmed   map[string]bool              // ids whose durable ack some helper answered
	ackGaveUp   map[string]string            // id -> why its durable ack was not repeated (no answer, an error)
	confirmedBy map[string]map[int]bool      // id -> generations whose helper answered a durable ack of it
	pending     map[string]bool              // ids the sink holds, ack not yet sent
	kept        map[string]int               // times the sink kept each id
	byExec      map[string]map[string]bool   // execution id -> delivery ids seen
	lines       map[string][]string          // monitor id -> lines kept, in order
	lineAt      map[string]map[string]string // monitor id -> line -> delivery id
	seenLines   map[string]map[string]bool   // monitor id -> lines received (kept or not)
	current     map[string]string            // monitor id -> the batch received last
	terminals   map[string]string            // monitor id -> terminal delivery id
	receipts    []receipt                    // in arrival order
	wakes       []wakeAt
	settledAt   map[string]at   // execution id -> its exec/settled
	running     map[string]bool // execution ids seen past queued
	changed     chan struct{}
}

type receipt struct {
	d   delivery
	at  at
	gen int
}

type wakeAt struct {
	w   wake
	at  at
	gen int
}

func newPropClient(t *testing.T, seed uint64) *propClient {
	return &propClient{
		t: t, sid: "prop", seed: seed, redialed: make(chan struct{}),
		prefixes: map[int]string{}, replyAt: map[replyKey]at{},
		first: map[string]delivery{}, firstAt: map[string]at{}, firstIn: map[string]map[int]delivery{},
		lastAttempt: map[connID]int{}, durable: map[string]bool{}, confirmed: map[string]bool{}, ackGaveUp: map[string]string{},
		confirmedBy: map[string]map[int]bool{}, pending: map[string]bool{}, kept: map[string]int{},
		byExec: map[string]map[string]bool{}, lines: map[string][]string{}, lineAt: map[string]map[string]string{},
		seenLines: map[string]map[string]bool{}, current: map[string]string{}, terminals: map[string]string{},
		settledAt: map[string]at{}, running: map[string]bool{},
		changed: make(chan struct{}, 1),
	}
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

// finish ends the client: no more records, drops or acks. It is
// registered after each listener, so it runs before any listener's own
// cleanup asks its helper to shut down (which a connection left open
// would hold up); the first run does the work.
func (c *propClient) finish() {
	c.mu.Lock()
	if c.over {
		c.mu.Unlock()
		return
	}
	c.over = true
	close(c.redialed) // no more drops
	for _, tm := range c.timers {
		tm.Stop()
	}
	pc := c.conn
	c.mu.Unlock()
	if pc != nil {
		pc.rpc.Close()
	}
	c.acks.Wait()
}

// dial connects to l's helper as generation gen. The socket appears once
// the helper listens, and the helper says nothing when it does: the first
// dial polls, bounded, as listener.dial does.
func (c *propClient) dial(l *listener, gen int) *propConn {
	t := c.t
	t.Helper()
	var nc net.Conn
	for delay, deadline := time.Millisecond, time.Now().Add(waitBound); ; delay = min(2*delay, 50*time.Millisecond) {
		var err error
		if nc, err = net.Dial("unix", l.sock); err == nil {
			break
		}
		select {
		case <-l.child.Exited():
			t.Fatalf("the helper exited before listening: %v\n%s", err, l.stderr.String())
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			t.Fatalf("helper socket: %v", err)
		}
	}
	c.mu.Lock()
	c.dials++
	pc := &propConn{n: c.dials, gen: gen, ready: make(chan struct{})}
	c.mu.Unlock()
	pc.rpc = jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(nc, jsonrpc2.VSCodeObjectCodec{}),
		propHandler(func(r *jsonrpc2.Request) {
			if r.Notif {
				var p json.RawMessage
				if r.Params != nil {
					p = *r.Params
				}
				c.handle(pc, r.Method, p)
			}
		}),
		// Called on the read loop before the caller hears of the reply,
		// so a reply is numbered among the notifications around it.
		jsonrpc2.OnRecv(func(_ *jsonrpc2.Request, resp *jsonrpc2.Response) {
			if resp != nil {
				c.mu.Lock()
				pc.pos++
				c.replyAt[replyKey{pc.n, resp.ID.Num}] = at{pc.n, pc.pos}
				c.mu.Unlock()
			}
		}),
		// Connections are dropped on purpose: the library's log line about
		// a reply cut off by a drop is expected.
		jsonrpc2.SetLogger(log.New(io.Discard, "", 0)))
	close(pc.ready)
	return pc
}

// callOn makes one request on pc. sent is the last message read before it
// went out (the helper sent those before reading it); reply is where its
// answer was read.
func (c *propClient) callOn(pc *propConn, method string, params, result any) (sent, reply at, err error) {
	<-pc.ready
	id := pc.ids.Add(1)
	c.mu.Lock()
	sent = at{pc.n, pc.pos}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	err = pc.rpc.Call(ctx, method, params, result, jsonrpc2.PickID(jsonrpc2.ID{Num: id}))
	k := replyKey{pc.n, id}
	c.mu.Lock()
	reply = c.replyAt[k]
	delete(c.replyAt, k)
	c.mu.Unlock()
	return sent, reply, err
}

// call makes a request, first dropping and redialling the connection when
// a delivery asked for it (only the test's main goroutine drops, so no
// start is ever in flight then). A request cut off by a drop (a waiting
// observation) is made again on the new connection.
func (c *propClient) call(method string, params, result any, drop bool) error {
	_, _, _, err := c.callCut(method, params, result, drop)
	return err
}

// callCut is call, also reporting whether a drop cut the request off
// (then the helper may have answered it on the old connection), when the
// request went out and where its reply was read.
func (c *propClient) callCut(method string, params, result any, drop bool) (cut bool, sent, reply at, err error) {
	c.mu.Lock()
	if drop && c.dropSoon {
		c.dropSoon = false
		c.drops++
		old, l, gen := c.conn, c.l, c.gen
		c.mu.Unlock()
		old.rpc.Close()
		pc := c.dial(l, gen)
		c.mu.Lock()
		c.conn = pc
		close(c.redialed)
		c.redialed = make(chan struct{})
	}
	c.mu.Unlock()
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		pc, redialed := c.conn, c.redialed
		c.mu.Unlock()
		sent, reply, err = c.callOn(pc, method, params, result)
		if err == nil || !errors.Is(err, jsonrpc2.ErrClosed) {
			return cut, sent, reply, err
		}
		cut = true
		select {
		case <-redialed:
		case <-deadline.C:
			return cut, sent, reply, err
		}
	}
}

func addGen(m map[string]map[int]bool, id string, gen int) {
	if m[id] == nil {
		m[id] = map[int]bool{}
	}
	m[id][gen] = true
}

// ackHooks let the crash step kill the helper right after a durable ack
// went out, or right after its answer.
type ackHooks struct{ sent, answered chan struct{} }

// ack answers id from its own goroutine.
func (c *propClient) ack(pc *propConn, id string, durable bool, hooks *ackHooks) {
	p := map[string]any{"sessionId": c.sid, "deliveryId": id}
	if durable {
		p["durable"] = true
	} else {
		p["error"] = "random failure"
	}
	var sent, answered chan struct{}
	if hooks != nil {
		sent, answered = hooks.sent, hooks.answered
	}
	c.acks.Add(1)
	go func() {
		defer c.acks.Done()
		for {
			<-pc.ready
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			w, err := pc.rpc.DispatchCall(ctx, "mailbox/ack", p, jsonrpc2.PickID(jsonrpc2.ID{Num: pc.ids.Add(1)}))
			if sent != nil {
				close(sent)
				sent = nil
			}
			if err == nil {
				err = w.Wait(ctx, nil)
			}
			cancel()
			if err == nil && durable {
				c.mu.Lock()
				c.confirmed[id] = true
				addGen(c.confirmedBy, id, pc.gen)
				c.mu.Unlock()
				c.signal()
			}
			if answered != nil {
				close(answered)
				answered = nil
			}
			if err == nil || !durable {
				return
			}
			if !errors.Is(err, jsonrpc2.ErrClosed) {
				// The test then waits for it in vain: say why.
				c.mu.Lock()
				c.ackGaveUp[id] = fmt.Sprintf("%v (connection %d)", err, pc.gen)
				c.mu.Unlock()
				return
			}
			// A durable ack cut off with its connection (a drop, or the
			// helper's death) may or may not have reached the helper:
			// repeat it on the next connection (acks are idempotent, and
			// an id the next helper does not know is success), so the test
			// knows when nothing is pending.
			c.mu.Lock()
			next, redialed, over := c.conn, c.redialed, c.over
			c.mu.Unlock()
			if over {
				return
			}
			if next == pc {
				<-redialed // closed by the next drop or restart, or when the test ends
				continue
			}
			pc = next
		}
	}()
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

// handle takes one notification, on pc's read loop.
func (c *propClient) handle(pc *propConn, method string, params json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc.pos++
	here := at{pc.n, pc.pos}
	if c.over {
		return
	}
	switch method {
	case "mailbox/deliver":
		var d delivery
		if json.Unmarshal(params, &d) == nil {
			c.onDeliveryLocked(pc, here, d)
		}
	case "session/wake":
		var w wake
		if json.Unmarshal(params, &w) != nil {
			return
		}
		c.wakes = append(c.wakes, wakeAt{w, here, pc.gen})
		for _, id := range w.DeliveryIDs {
			if !c.durable[id] {
				c.errorf("wake for %s before it was kept", id)
			}
		}
	case "exec/settled":
		var p struct{ Facts execution.Facts }
		if json.Unmarshal(params, &p) == nil {
			c.settledAt[p.Facts.ExecutionID] = here
			c.running[p.Facts.ExecutionID] = true
			c.signal()
		}
	case "exec/changed":
		// Its facts are read when it is sent: a command shown past
		// queued has its row, with its group leader, in the journal.
		var p struct{ Changed []execution.Facts }
		if json.Unmarshal(params, &p) == nil {
			for _, f := range p.Changed {
				if f.State != execution.Queued {
					c.running[f.ExecutionID] = true
				}
			}
			c.signal()
		}
	}
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

// sameResult compares a delivery the next helper re-made from its journal
// with the first one: the same id, kind, owner, attributes and output
// (its facts are rebuilt, so their version may differ).
func sameResult(a, b delivery) bool {
	if a.Kind != b.Kind || a.Owner != b.Owner || !reflect.DeepEqual(a.Attrs, b.Attrs) || (a.Observation == nil) != (b.Observation == nil) {
		return false
	}
	return a.Observation == nil || a.Observation.Output == b.Observation.Output && a.Observation.Final == b.Observation.Final
}

func (c *propClient) onDeliveryLocked(pc *propConn, here at, d delivery) {
	c.receipts = append(c.receipts, receipt{d, here, pc.gen})
	id := d.DeliveryID
	// Sends go out in order on one connection. (A dropped connection's
	// read loop may hand over its last notifications after the new
	// connection's first.)
	if k := (connID{pc.n, id}); d.Attempt <= c.lastAttempt[k] {
		c.errorf("delivery %s attempt %d after attempt %d", id, d.Attempt, c.lastAttempt[k])
	} else {
		c.lastAttempt[k] = d.Attempt
	}
	if c.firstIn[id] == nil {
		c.firstIn[id] = map[int]delivery{}
	}
	if f, seen := c.firstIn[id][pc.gen]; seen {
		again := d
		f.Attempt, again.Attempt = 0, 0
		if !reflect.DeepEqual(f, again) {
			c.errorf("delivery %s changed between sends:\n%+v\n%+v", id, f, d)
		}
	} else {
		c.firstIn[id][pc.gen] = d
	}
	if f, seen := c.first[id]; seen {
		if !sameResult(f, d) {
			c.errorf("delivery %s re-made with another result:\n%+v\n%+v", id, f, d)
		}
	} else {
		c.first[id] = d
		c.firstAt[id] = here
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
			if c.seenLines[d.Attrs.MonitorID] == nil {
				c.seenLines[d.Attrs.MonitorID] = map[string]bool{}
			}
			for _, line := range d.Lines {
				c.seenLines[d.Attrs.MonitorID][line] = true
			}
		}
	}
	c.signal()
	if c.durable[id] {
		c.ack(pc, id, true, nil) // our ack was lost, or the helper restarted before it wrote it down: repeat it
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
		if c.holdNext {
			c.holdNext, c.held = false, &d
			c.pending[id] = true
			return
		}
	}
	switch a, delay := c.choose(id, d.Attempt); a {
	case ackDurable:
		c.keepLocked(d)
		c.ack(pc, id, true, nil)
	case ackFailed:
		c.ack(pc, id, false, nil)
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
			c.ack(pc, id, true, nil)
		}))
	case ackNever:
	case ackDrop:
		if c.drops < 8 {
			c.dropSoon = true
		}
	}
}

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/transcript"
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

// startListener starts a helper serving a socket, with a 30 s linger:
// a client may go and come back.
func startListener(t *testing.T) *listener {
	t.Helper()
	return startListenerWith(t)
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

// The randomized property test of completion delivery and attention:
// whatever the client, the person, the model and a crashing helper do,
// every result reaches its owner exactly once under one delivery id, and
// only what is owed wakes, until it is attended or retired.

const (
	propSteps       = 150
	propPoolMax     = 10 // commands held at their gate at once
	propMonitorsMax = 7
	monChunks       = 3  // a monitor's lines come in gated chunks
	monChunkLines   = 15 // well under the monitor's 100 events a second
)

type runFate int

const (
	pooled        runFate = iota // held at its gate
	released                     // let through: it ends on its own
	modelStopped                 // exec/stop by its owner: the reply claims it
	personStopped                // exec/stop or exec/stopAll as the user
)

// propRun is one of the test's commands: `read < gate; echo out-i; exit i%3`.
type propRun struct {
	id, owner, gate string
	i, gen          int // gen: the helper generation that ran it
	fate            runFate
	term            execution.Termination // a person's stop's
	// Set by the poll goroutine, guarded by prop.mu.
	polled, claimed, cut bool
	pollAt               at // reply of the owner's final poll, zero if none
	// The owner polled a result a person stopped; pollClaimed: that poll
	// took it (its reply named no delivery).
	personPolled, pollClaimed bool
	lostAt                    int // the generation whose open recovered it as lost
	doneOnDisk                int // the generation whose crash found its end journaled as done
}

// propMon is a monitor printing monChunks chunks of lines, each after its gate.
type propMon struct {
	id, exec string
	j, gen   int
	gates    []string
	released int                   // chunks let through
	stopped  string                // who stopped it: "model", "person", "stopAll"
	term     execution.Termination // the stop's
}

// want is the lines of the chunks let through, in order.
func (m *propMon) want() []string {
	var out []string
	for n := 1; n <= m.released*monChunkLines; n++ {
		out = append(out, fmt.Sprintf("m%d-%d", m.j, n))
	}
	return out
}

// ended: every chunk let through and nobody stopped it, so it ends on its own.
func (m *propMon) ended() bool { return m.stopped == "" && m.released == monChunks }

// busyWindow is from a busy reply to the next idle request: no wake read
// in it may have been sent after the busy reply.
type busyWindow struct {
	gen      int
	from, to at
	open     bool // no idle yet (the helper may have crashed busy)
}

// idleRec is a busy→idle turn: owed is what was owed when the idle went out.
type idleRec struct {
	gen          int
	busyAt, sent at
	owed         []string
}

// attendRec is an owner/attend (or an owner's poll that read an end).
type attendRec struct {
	ids         []string
	sent, reply at
}

// commitRec is an owner/retire commit: covered is what it retired, owed
// then or owed later.
type commitRec struct {
	covered     map[string]bool
	sent, reply at
}

type propCounts struct {
	polls, modelStops, personStops, personPolls, stopAlls, lostRuns int
	monStops, monStopsByPerson, monLost                             int
	crashes, ackCrashes, reoffers, reofferedItems                   int
	attends, attendedItems, retires, commits, retiredItems          int
	owedPastCommit                                                  int
}

type prop struct {
	t        *testing.T
	c        *propClient
	rng      *rand.Rand
	env      map[string]string
	stateDir string

	mu    sync.Mutex // guards the fields of runs the poll goroutines set
	polls sync.WaitGroup

	runs    []*propRun
	byID    map[string]*propRun
	mons    []*propMon
	monByID map[string]*propMon
	gen     int

	busy     bool
	windows  []busyWindow
	idles    []idleRec
	attends  []attendRec
	commits  []commitRec
	barriers []at // replies that follow every wake decided before them (owner/state, owner/retire)
	covered  map[string]bool
	attended map[string]bool
	seq      uint64 // journal records read
	n        propCounts
}

func (p *prop) must(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *prop) openParams() map[string]any {
	return map[string]any{"sessionId": p.c.sid, "stateDir": p.stateDir,
		"limits": map[string]any{"ackTimeoutMs": 250, "retryMs": 20}}
}

// prefixOf is the id prefix of the open that made a delivery id.
func prefixOf(id string) string {
	if parts := strings.Split(id, "-"); len(parts) == 3 {
		return parts[1]
	}
	return ""
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// TestPropertyEveryResultAckedExactlyOnce runs a seeded random schedule:
// commands held at gates and let through, polled, stopped by the model or
// a person (one by one or all at once), gated monitors let through or
// stopped, the owner turning busy and idle and attending, the person
// retiring (at once, or begin, commit or abort), and two to four helper
// crashes (SIGKILL, mostly right after a durable ack went out or was
// answered) with a new helper on the same state directory. The client
// acks at random, drops its connection, and remembers durable ids across
// helpers.
//
// The checks are decided from the order in which the client read replies
// and notifications (at): a helper sends in order on one connection, and
// a connection starts only after the one before ended. Where that order
// cannot say what the helper decided, the schedule removes the doubt
// rather than the check: a frontier is taken only when everything let
// happen has been received (quiesce), a crash only after a checkpoint,
// and the one race the protocol leaves open (owner/attend's reply is not
// ordered after a wake taken just before it) is allowed for exactly one
// wake.
func TestPropertyEveryResultAckedExactlyOnce(t *testing.T) {
	seed := propSeed(t)
	p := &prop{t: t, rng: rand.New(rand.NewPCG(seed, 2)), env: map[string]string{"MEVEDEL_E2E": "1"},
		byID: map[string]*propRun{}, monByID: map[string]*propMon{}, covered: map[string]bool{}, attended: map[string]bool{}, gen: 1}
	l := startListener(t)
	p.c = newPropClient(t, seed)
	t.Cleanup(p.c.finish)
	p.stateDir = filepath.Join(l.home, "state")
	c := p.c
	c.l, c.gen = l, 1
	c.conn = c.dial(l, 1)
	var info execution.SessionInfo
	p.must(c.call("session/open", p.openParams(), &info, true))
	c.mu.Lock()
	c.prefixes[1] = info.IDPrefix
	c.mu.Unlock()

	crashes := map[int]bool{}
	for want := 2 + p.rng.IntN(3); len(crashes) < want; {
		crashes[20+p.rng.IntN(propSteps-30)] = true
	}
	for step := range propSteps {
		if crashes[step] {
			p.crash()
			continue
		}
		p.step()
	}
	p.finale()
	p.check()
	p.must(c.call("shutdown", nil, nil, false))
}

// step takes one random action.
func (p *prop) step() {
	pool := p.pool()
	var open []*propMon // this helper's monitors with a chunk still held
	for _, m := range p.mons {
		if m.gen == p.gen && m.stopped == "" && m.released < monChunks {
			open = append(open, m)
		}
	}
	switch k := p.rng.IntN(100); {
	case k < 18 && len(pool) > 0:
		p.release(pick(p.rng, pool))
	case k < 24 && len(pool) > 0:
		p.pollRelease(pick(p.rng, pool))
	case k < 29 && len(pool) > 0:
		p.modelStop(pick(p.rng, pool))
	case k < 35 && len(pool) > 0:
		p.personStop(pick(p.rng, pool))
	case k < 47:
		p.flip()
	case k < 53:
		p.attend()
	case k < 56:
		p.retire()
	case k < 64 && len(open) > 0:
		p.monRelease(pick(p.rng, open))
	case k < 67:
		p.monStart()
	case k < 69 && len(open) > 0:
		p.monStop(pick(p.rng, open))
	case k < 70:
		p.stopAll()
	default:
		p.start()
	}
}

// pool is this helper's commands held at their gate.
func (p *prop) pool() []*propRun {
	var out []*propRun
	for _, r := range p.runs {
		if r.gen == p.gen && r.fate == pooled {
			out = append(out, r)
		}
	}
	return out
}

// openGate lets a command past its gate: opening the fifo for writing
// waits for its reader, bounded.
func (p *prop) openGate(path string) {
	p.t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		p.must(err)
	case <-time.After(waitBound):
		p.t.Fatalf("nobody read gate %s within %v", path, waitBound)
	}
}

func (p *prop) start() {
	if len(p.pool()) >= propPoolMax {
		p.release(pick(p.rng, p.pool()))
		return
	}
	owner := execution.RootOwner
	if p.rng.IntN(8) == 0 {
		owner = "/root/sub" // its results never wake /root
	}
	i := len(p.runs)
	gate := fifo(p.t, "g")
	var o obs
	p.must(p.c.call("exec/start", map[string]any{"sessionId": p.c.sid, "owner": owner, "env": p.env, "yieldMs": 0,
		"command": fmt.Sprintf("read < %s; echo out-%d; exit %d", gate, i, i%3)}, &o, true))
	if o.Final {
		p.t.Fatalf("exec/start did not yield: %+v", o)
	}
	r := &propRun{id: o.Facts.ExecutionID, owner: owner, gate: gate, i: i, gen: p.gen}
	if o.Facts.State != execution.Queued {
		// Past queued: its row, with its group leader, is journaled.
		p.c.mu.Lock()
		p.c.running[r.id] = true
		p.c.mu.Unlock()
	}
	p.runs = append(p.runs, r)
	p.byID[r.id] = r
}

func (p *prop) release(r *propRun) {
	p.openGate(r.gate)
	r.fate = released
}

// pollRelease races the owner's waiting observation with the end.
func (p *prop) pollRelease(r *propRun) {
	r.fate = released
	p.mu.Lock()
	r.polled = true
	p.mu.Unlock()
	p.n.polls++
	p.polls.Add(1)
	go func() {
		defer p.polls.Done()
		var po obs
		cut, _, reply, err := p.c.callCut("exec/observe", map[string]any{"sessionId": p.c.sid, "owner": r.owner,
			"executionId": r.id, "waitMs": 20000}, &po, false)
		p.mu.Lock()
		// cut: a drop cut the waiting observation off. The helper may
		// have answered it on the dead connection, consuming output there
		// (a reply can claim or consume whether or not anyone reads it).
		r.cut = cut
		p.mu.Unlock()
		if err != nil {
			p.t.Errorf("waiting observation of %s: %v", r.id, err)
			return
		}
		if !po.Final {
			return // cut short; the result is delivered instead
		}
		// A final reply without a delivery id claimed the result, unless
		// a delivery had already been made and kept.
		p.c.mu.Lock()
		seenBefore := len(p.c.byExec[r.id]) > 0
		p.c.mu.Unlock()
		p.mu.Lock()
		r.claimed = po.DeliveryID == "" && !seenBefore
		r.pollAt = reply
		p.mu.Unlock()
		if want := fmt.Sprintf("out-%d\n", r.i); !cut && po.Output != want {
			p.t.Errorf("waiting observation of %s: output %q, want %q", r.id, po.Output, want)
		}
	}()
	p.openGate(r.gate)
}

// modelStop is the owner's own stop: its reply claims the result.
func (p *prop) modelStop(r *propRun) {
	var so obs
	p.must(p.c.call("exec/stop", map[string]any{"sessionId": p.c.sid, "owner": r.owner, "executionId": r.id}, &so, true))
	if !so.Final || so.Facts.Termination != execution.Stopped {
		p.t.Errorf("the owner's stop of %s answered %+v", r.id, so)
	}
	r.fate = modelStopped
	p.n.modelStops++
}

// personStop is a person's stop: the owner still gets the result, which
// wakes nobody; sometimes the owner then polls it, which takes it.
func (p *prop) personStop(r *propRun) {
	var so obs
	p.must(p.c.call("exec/stop", map[string]any{"sessionId": p.c.sid, "as": "user", "executionId": r.id}, &so, true))
	if !so.Final || so.Facts.Termination != execution.Stopped {
		p.t.Errorf("the person's stop of %s answered %+v", r.id, so)
	}
	r.fate, r.term = personStopped, execution.Stopped
	p.n.personStops++
	if p.rng.IntN(2) == 0 {
		return
	}
	var po obs
	_, _, reply, err := p.c.callCut("exec/observe", map[string]any{"sessionId": p.c.sid, "owner": r.owner, "executionId": r.id}, &po, true)
	p.must(err)
	if !po.Final {
		p.t.Errorf("the owner's poll of %s after a person's stop: %+v", r.id, po)
	}
	if po.DeliveryID != "" {
		// Only a durable ack takes a pending delivery away before the
		// poll can withdraw it: the sink must have kept it.
		p.c.mu.Lock()
		kept := p.c.durable[po.DeliveryID]
		p.c.mu.Unlock()
		if !kept {
			p.t.Errorf("the owner's poll of %s named delivery %s, which the sink never kept", r.id, po.DeliveryID)
		}
	}
	p.mu.Lock()
	r.personPolled, r.pollClaimed, r.pollAt = true, po.DeliveryID == "", reply
	p.mu.Unlock()
	p.n.personPolls++
	// A send the mailbox had already handed over may still follow the
	// poll's reply; none may follow this one.
	p.barrier()
}

// barrier restates the owner's state: no turn, but its reply follows
// every wake (and send) decided before it.
func (p *prop) barrier() {
	state := "idle"
	if p.busy {
		state = "busy"
	}
	_, _, reply, err := p.c.callCut("owner/state", map[string]any{"sessionId": p.c.sid, "state": state}, nil, true)
	p.must(err)
	p.barriers = append(p.barriers, reply)
}

// flip turns the owner busy, or idle again.
func (p *prop) flip() {
	if !p.busy {
		_, _, reply, err := p.c.callCut("owner/state", map[string]any{"sessionId": p.c.sid, "state": "busy"}, nil, true)
		p.must(err)
		p.busy = true
		p.windows = append(p.windows, busyWindow{gen: p.gen, from: reply, open: true})
		p.barriers = append(p.barriers, reply)
		if p.rng.IntN(2) == 0 {
			p.attend() // the turn reads some of what woke it
		}
		return
	}
	owed := p.owedNow()
	_, sent, reply, err := p.c.callCut("owner/state", map[string]any{"sessionId": p.c.sid, "state": "idle"}, nil, true)
	p.must(err)
	p.busy = false
	w := &p.windows[len(p.windows)-1]
	w.to, w.open = sent, false
	p.idles = append(p.idles, idleRec{gen: p.gen, busyAt: w.from, sent: sent, owed: owed})
	p.barriers = append(p.barriers, reply)
	if len(owed) > 0 {
		p.n.reoffers++
		p.n.reofferedItems += len(owed)
	}
}

// owes reports whether d can owe /root attention at all: a /root result
// that ended on its own and that the owner's poll did not read, a /root
// monitor's events, or the end of one that nobody stopped. Call with c.mu.
func (p *prop) owes(d delivery) bool {
	if d.Owner != execution.RootOwner {
		return false
	}
	switch d.Kind {
	case execution.KindExecution:
		r := p.byID[d.Attrs.ExecutionID]
		return r != nil && r.fate == released && !r.polled
	case execution.KindMonitor:
		return true
	case execution.KindMonitorTerminal:
		m := p.monByID[d.Attrs.MonitorID]
		return m != nil && m.stopped == ""
	}
	return false
}

// readByOwner reports whether d is the result of a command the owner
// polled: owed only until that poll read it, which the client cannot see.
func (p *prop) readByOwner(d delivery) bool {
	r := p.byID[d.Attrs.ExecutionID]
	return d.Kind == execution.KindExecution && r != nil && r.polled
}

// owedNow is what the owner certainly owes attention to now: made by this
// helper, a kind that owes, its durable ack answered by this helper (so
// marked owed before that answer), neither attended nor retired.
func (p *prop) owedNow() []string {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, d := range c.first {
		if prefixOf(id) == c.prefixes[p.gen] && p.owes(d) && c.confirmedBy[id][p.gen] && !p.attended[id] && !p.covered[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// neverOwed is what certainly owes nothing now.
func (p *prop) neverOwed() []string {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, d := range c.first {
		if prefixOf(id) != c.prefixes[p.gen] || p.attended[id] || p.covered[id] ||
			(!p.owes(d) && !p.readByOwner(d)) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// attend marks a few owed items seen, with something never owed among
// them, and checks the count. Mostly while busy (the model reads inside a
// turn), sometimes while idle.
func (p *prop) attend() {
	owed := p.owedNow()
	if len(owed) == 0 {
		return
	}
	p.rng.Shuffle(len(owed), func(i, j int) { owed[i], owed[j] = owed[j], owed[i] })
	ids := owed[:1+p.rng.IntN(min(3, len(owed)))]
	req := slices.Clone(ids)
	if never := p.neverOwed(); len(never) > 0 && p.rng.IntN(2) == 0 {
		req = append(req, pick(p.rng, never))
	}
	var r struct{ Attended int }
	_, sent, reply, err := p.c.callCut("owner/attend", map[string]any{"sessionId": p.c.sid, "deliveryIds": req}, &r, true)
	p.must(err)
	if r.Attended != len(ids) {
		p.t.Errorf("owner/attend %v answered %d attended, want the %d owed %v", req, r.Attended, len(ids), ids)
	}
	p.attends = append(p.attends, attendRec{ids: ids, sent: sent, reply: reply})
	for _, id := range ids {
		p.attended[id] = true
	}
	p.n.attends++
	p.n.attendedItems += len(ids)
}

// quiesce waits until everything the test let happen has been made and
// received: every command let through or stopped by a person has its
// delivery (or a poll took it), and every monitor's released lines and,
// once it ended, its terminal delivery are in. Until the test lets
// something else happen, nothing new is made: a frontier taken now
// covers exactly what has been received.
func (p *prop) quiesce() {
	p.polls.Wait()
	c := p.c
	p.waitFor("quiet", func() []string {
		var missing []string
		for _, r := range p.runs {
			if r.gen != p.gen || (r.fate != released && r.fate != personStopped) {
				continue
			}
			if len(c.byExec[r.id]) == 0 && !r.claimed && !(r.personPolled && r.pollClaimed) {
				missing = append(missing, "result of "+r.id)
			}
		}
		for _, m := range p.mons {
			if m.gen != p.gen {
				continue
			}
			if n := len(c.seenLines[m.id]); n < len(m.want()) {
				missing = append(missing, fmt.Sprintf("%d of %d lines of %s", n, len(m.want()), m.id))
			}
			if (m.ended() || m.stopped != "") && c.first[c.current[m.id]].Kind != execution.KindMonitorTerminal {
				missing = append(missing, "end of "+m.id)
			}
		}
		return missing
	})
}

// waitFor waits until missing (called with p.mu and c.mu held) is empty.
func (p *prop) waitFor(what string, missing func() []string) {
	p.t.Helper()
	p.waitUntil(what, missing, nil)
}

// waitUntil waits for missing to report nothing, woken by the client's
// changes; refresh, when set, is asked (without locks) while something
// is missing, and then every 100 ms at the most.
func (p *prop) waitUntil(what string, missing func() []string, refresh func()) {
	p.t.Helper()
	deadline := time.NewTimer(waitBound)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		p.c.mu.Lock()
		m := missing()
		p.c.mu.Unlock()
		p.mu.Unlock()
		if len(m) == 0 {
			return
		}
		var again <-chan time.Time
		if refresh != nil {
			refresh()
			again = time.After(100 * time.Millisecond) // the next listing; bounded by deadline
		}
		select {
		case <-p.c.changed:
		case <-again:
		case <-deadline.C:
			p.t.Fatalf("%s: still waiting after %v for %v", what, waitBound, m)
		}
	}
}

// waitForListed is waitFor for executions seen past queued, which also
// asks exec/list while some are missing: a client learns of changes made
// while it was reconnecting from a listing, not from exec/changed.
func (p *prop) waitForListed(what string, missing func() []string) {
	p.t.Helper()
	p.waitUntil(what, missing, func() {
		var lst struct{ Executions []execution.Facts }
		p.must(p.c.call("exec/list", map[string]any{"sessionId": p.c.sid, "as": "user"}, &lst, false))
		p.c.mu.Lock()
		for _, f := range lst.Executions {
			if f.State != execution.Queued {
				p.c.running[f.ExecutionID] = true
			}
		}
		p.c.mu.Unlock()
	})
}

// retire is the person stopping the agent's turn: owner/retire at once, or
// begin, maybe new results, then commit or abort.
func (p *prop) retire() {
	p.quiesce()
	c := p.c
	// Quiet: every result made so far has been received and none is being
	// made, so the frontier covers exactly what was received, whether
	// owed now or made durable only later.
	covered := map[string]bool{}
	c.mu.Lock()
	for id := range c.first {
		if prefixOf(id) == c.prefixes[p.gen] && !p.covered[id] {
			covered[id] = true
		}
	}
	c.mu.Unlock()
	p.n.retires++
	var res struct {
		Retired  int
		Frontier uint64
	}
	if p.rng.IntN(3) == 0 {
		owed := p.owedNow()
		_, sent, reply, err := p.c.callCut("owner/retire", map[string]any{"sessionId": c.sid}, &res, true)
		p.must(err)
		p.barriers = append(p.barriers, reply)
		p.committed(covered, owed, res.Retired, res.Frontier, sent, reply)
		return
	}
	_, _, reply, err := p.c.callCut("owner/retire", map[string]any{"sessionId": c.sid, "phase": "begin"}, &res, true)
	p.must(err)
	p.barriers = append(p.barriers, reply)
	if res.Retired != 0 {
		p.t.Errorf("owner/retire begin retired %d", res.Retired)
	}
	frontier := res.Frontier
	// Results made after the frontier stay owed, commit or not; some are
	// owed already when the commit comes.
	var late []*propRun
	for range 1 + p.rng.IntN(2) {
		if pool := p.pool(); len(pool) > 0 {
			r := pick(p.rng, pool)
			p.release(r)
			late = append(late, r)
		}
	}
	if p.rng.IntN(3) > 0 {
		p.waitFor("results made after the frontier", func() []string {
			var missing []string
			for _, r := range late {
				ok := false
				for id := range c.byExec[r.id] {
					ok = ok || c.confirmedBy[id][p.gen]
				}
				if !ok {
					missing = append(missing, r.id)
				}
			}
			return missing
		})
	}
	phase := "commit"
	if p.rng.IntN(3) == 0 {
		phase = "abort"
	}
	owed := p.owedNow()
	_, sent, reply, err := p.c.callCut("owner/retire", map[string]any{"sessionId": c.sid, "phase": phase, "frontier": frontier}, &res, true)
	p.must(err)
	p.barriers = append(p.barriers, reply)
	if phase == "abort" {
		if res.Retired != 0 {
			p.t.Errorf("owner/retire abort retired %d", res.Retired)
		}
		return
	}
	p.committed(covered, owed, res.Retired, frontier, sent, reply)
}

// committed checks a commit against its journal record: it retired what
// was owed up to the frontier, and nothing else.
func (p *prop) committed(covered map[string]bool, owed []string, retired int, frontier uint64, sent, reply at) {
	p.n.commits++
	p.n.retiredItems += retired
	recs := p.retireRecords()
	if len(recs) != 1 {
		p.t.Errorf("one commit, %d retire records: %+v", len(recs), recs)
	} else {
		rec := recs[0]
		listed := map[string]bool{}
		ids, _ := rec.Attrs["deliveryIds"].([]any)
		for _, x := range ids {
			s, _ := x.(string)
			listed[s] = true
		}
		if f, _ := rec.Attrs["frontier"].(float64); uint64(f) != frontier || len(listed) != retired {
			p.t.Errorf("retire record %+v for frontier %d, %d retired", rec, frontier, retired)
		}
		c := p.c
		c.mu.Lock()
		for id := range listed {
			d := c.first[id]
			if !covered[id] || p.attended[id] || !(p.owes(d) || p.readByOwner(d)) {
				p.t.Errorf("retired %s (%s of %s%s), which was not owed before the frontier", id, d.Kind, d.Attrs.ExecutionID, d.Attrs.MonitorID)
			}
		}
		c.mu.Unlock()
		for _, id := range owed {
			if !covered[id] {
				p.n.owedPastCommit++ // made after the frontier: it must stay owed
			}
			if covered[id] && !listed[id] {
				p.t.Errorf("%s was owed before the frontier, and the commit did not retire it (retired %v)", id, ids)
			}
		}
	}
	for id := range covered {
		p.covered[id] = true
	}
	p.commits = append(p.commits, commitRec{covered: covered, sent: sent, reply: reply})
}

// retireRecords reads the journal records not read yet and returns the
// retire records among them.
func (p *prop) retireRecords() []transcript.Record {
	var out []transcript.Record
	for {
		var r records
		p.must(p.c.call("transcript/records", map[string]any{"sessionId": p.c.sid, "since": p.seq}, &r, true))
		if len(r.Records) == 0 {
			return out
		}
		for _, rec := range r.Records {
			if rec.Type == transcript.TypeRetire {
				out = append(out, rec)
			}
		}
		p.seq = r.Next
	}
}

func (p *prop) monStart() {
	live := 0
	for _, m := range p.mons {
		if m.gen == p.gen && m.stopped == "" && m.released < monChunks {
			live++
		}
	}
	if len(p.mons) >= propMonitorsMax || live >= 3 {
		p.start()
		return
	}
	m := &propMon{j: len(p.mons), gen: p.gen}
	var cmd []string
	for k := range monChunks {
		g := fifo(p.t, "m")
		m.gates = append(m.gates, g)
		cmd = append(cmd, fmt.Sprintf("read < %s; for i in $(seq %d %d); do echo m%d-$i; done", g, k*monChunkLines+1, (k+1)*monChunkLines, m.j))
	}
	var info execution.MonitorInfo
	p.must(p.c.call("monitor/start", map[string]any{"sessionId": p.c.sid, "env": p.env, "label": fmt.Sprintf("m%d", m.j),
		"command": strings.Join(cmd, "; ")}, &info, true))
	m.id, m.exec = info.MonitorID, info.ExecutionID
	p.mons = append(p.mons, m)
	p.monByID[m.id] = m
}

func (p *prop) monRelease(m *propMon) {
	p.openGate(m.gates[m.released])
	m.released++
}

// monStop stops a monitor that still holds a chunk, once the lines it let
// through are in: its terminal must count exactly those.
func (p *prop) monStop(m *propMon) {
	want := len(m.want())
	c := p.c
	p.waitFor("lines of "+m.id+" before its stop", func() []string {
		if n := len(c.seenLines[m.id]); n < want {
			return []string{fmt.Sprintf("%d of %d lines", n, want)}
		}
		return nil
	})
	params := map[string]any{"sessionId": c.sid, "monitorId": m.id}
	m.stopped, m.term = "model", execution.Stopped
	if p.rng.IntN(2) == 0 {
		params["as"] = "user"
		m.stopped = "person"
		p.n.monStopsByPerson++
	}
	var info execution.MonitorInfo
	p.must(c.call("monitor/stop", params, &info, true))
	if info.State != "stopped" || info.Events != int64(want) {
		p.t.Errorf("monitor/stop of %s after %d lines answered %+v", m.id, want, info)
	}
	p.n.monStops++
}

// stopAll is a person stopping everything (or everything of /root): every
// command is delivered to its owner, stopped, and nothing wakes.
func (p *prop) stopAll() {
	p.quiesce() // what was let through has ended: the stop's targets are known
	owner := ""
	term := execution.Stopped
	if p.rng.IntN(2) == 0 {
		owner, term = execution.RootOwner, execution.OwnerStopped
	}
	var runs []*propRun
	for _, r := range p.pool() {
		if owner == "" || r.owner == owner {
			runs = append(runs, r)
		}
	}
	var mons []*propMon
	for _, m := range p.mons {
		if m.gen == p.gen && m.stopped == "" && m.released < monChunks {
			mons = append(mons, m) // monitors are /root's
		}
	}
	want := len(runs) + len(mons)
	params := map[string]any{"sessionId": p.c.sid, "as": "user"}
	if owner != "" {
		params["owner"] = owner
	}
	var res struct{ Stopped int }
	p.must(p.c.call("exec/stopAll", params, &res, true))
	if res.Stopped != want {
		p.t.Errorf("exec/stopAll %v stopped %d, want %d live", params, res.Stopped, want)
	}
	for _, r := range runs {
		r.fate, r.term = personStopped, term
	}
	for _, m := range mons {
		m.stopped, m.term = "stopAll", term
	}
	p.n.stopAlls++
	p.n.personStops += len(runs)
	p.n.monStops += len(mons)
	p.n.monStopsByPerson += len(mons)
}

// crash kills the helper with SIGKILL, sometimes right after a durable
// ack went out or was answered (before or after its "done" reached the
// journal), and starts a new one on the same state directory.
func (p *prop) crash() {
	t, c := p.t, p.c
	p.polls.Wait() // a poll of the old helper's command would find nothing on the next
	// Mostly, a result is held in the sink until the checkpoint has its
	// "pending" on disk; then the helper dies right after the sink's
	// durable ack went out, or right after its answer: its "done" may or
	// may not have reached the journal.
	mode := p.rng.IntN(3)
	if mode > 0 {
		c.mu.Lock()
		c.holdNext, c.held = true, nil
		c.mu.Unlock()
		if len(p.pool()) == 0 {
			p.start()
		}
		p.release(pick(p.rng, p.pool()))
		p.waitFor("a result to hold", func() []string {
			if c.held == nil {
				return []string{"held"}
			}
			return nil
		})
	}
	// The next helper kills what this one leaves running only if its row,
	// with its group leader, is on disk: each command and monitor must be
	// seen past queued (announced after its row), then checkpointed. A
	// change announced while the connection was being replaced went to
	// the old one, so a listing (whose facts are read as the change's
	// would be) is asked too, as a reconnecting client resyncs.
	p.waitForListed("rows before the crash", func() []string {
		var missing []string
		for _, r := range p.runs {
			if r.gen == p.gen && !c.running[r.id] {
				missing = append(missing, r.id)
			}
		}
		for _, m := range p.mons {
			if m.gen == p.gen && !c.running[m.exec] {
				missing = append(missing, m.exec)
			}
		}
		return missing
	})
	old := p.gen
	// What the checkpoint puts on disk, from what the client saw before
	// it asked: ends (a settlement notified, a stop's or a final poll's
	// reply, all sent after the end was journaled) and "done" marks (a
	// durable ack answered by this helper, a poll's claim).
	settled := map[string]bool{}
	c.mu.Lock()
	for _, r := range p.runs {
		if r.gen == old {
			_, notified := c.settledAt[r.id]
			if notified || r.fate == modelStopped || r.fate == personStopped || r.pollAt != (at{}) {
				settled[r.id] = true
			}
		}
		done := r.claimed || r.personPolled && r.pollClaimed
		for id := range c.byExec[r.id] {
			done = done || c.confirmedBy[id][old]
		}
		if done && r.doneOnDisk == 0 {
			r.doneOnDisk = old
		}
	}
	for _, m := range p.mons {
		if _, notified := c.settledAt[m.exec]; m.gen == old && (notified || m.stopped != "") {
			settled[m.exec] = true
		}
	}
	l := c.l
	c.mu.Unlock()
	p.must(c.call("transcript/checkpoint", map[string]any{"sessionId": c.sid}, nil, true))

	if mode > 0 {
		c.mu.Lock()
		d := *c.held
		delete(c.pending, d.DeliveryID)
		c.keepLocked(d)
		h := &ackHooks{sent: make(chan struct{}), answered: make(chan struct{})}
		c.ack(c.conn, d.DeliveryID, true, h)
		c.mu.Unlock()
		ch := h.sent
		if mode == 2 {
			ch = h.answered
		}
		select {
		case <-ch:
		case <-time.After(waitBound):
			t.Fatal("the ack before the crash did not go out")
		}
		p.n.ackCrashes++
	}
	_ = l.child.Kill()
	select {
	case <-l.child.Exited():
	case <-time.After(waitBound):
		t.Fatal("the killed helper did not exit")
	}
	c.mu.Lock()
	dead := c.conn
	c.mu.Unlock()
	dead.rpc.Close()

	g := old + 1
	nl := startListener(t)
	t.Cleanup(c.finish) // before nl's own cleanup
	pc := c.dial(nl, g)
	var info execution.SessionInfo
	if _, _, err := c.callOn(pc, "session/open", p.openParams(), &info); err != nil {
		t.Fatalf("reopening after the crash: %v", err)
	}
	// Only now may acks cut off by the crash go out again: to a session
	// that is open, after its re-made deliveries were posted.
	c.mu.Lock()
	c.l, c.conn, c.gen = nl, pc, g
	c.prefixes[g] = info.IDPrefix
	close(c.redialed)
	c.redialed = make(chan struct{})
	c.mu.Unlock()
	p.gen, p.busy = g, false // a new helper's owner is idle, and owes nothing
	p.n.crashes++
	p.recovered(old, info.Recovered, settled)
}

// recovered checks what the new helper's open recovered as lost: only the
// dead helper's executions, every one still running, none that had ended
// before the checkpoint.
func (p *prop) recovered(old int, lost []execution.Facts, settled map[string]bool) {
	t := p.t
	rec := map[string]bool{}
	monOf := map[string]*propMon{}
	for _, m := range p.mons {
		monOf[m.exec] = m
	}
	for _, f := range lost {
		rec[f.ExecutionID] = true
		if f.Termination != execution.Lost || f.Status != execution.StatusLost {
			t.Errorf("recovered %s as %s/%s", f.ExecutionID, f.Termination, f.Status)
		}
		r, m := p.byID[f.ExecutionID], monOf[f.ExecutionID]
		if (r == nil || r.gen != old) && (m == nil || m.gen != old) {
			t.Errorf("recovered %s, not one of the dead helper's", f.ExecutionID)
		}
	}
	for _, r := range p.runs {
		if r.gen != old {
			continue
		}
		switch {
		case rec[r.id] && settled[r.id]:
			t.Errorf("%s ended before the checkpoint, yet was recovered as lost", r.id)
		case rec[r.id]:
			r.lostAt = old + 1
			p.n.lostRuns++
		case r.fate == pooled:
			t.Errorf("%s was held at its gate when the helper died, yet was not recovered as lost", r.id)
		}
	}
	for _, m := range p.mons {
		if m.gen != old {
			continue
		}
		switch {
		case rec[m.exec] && settled[m.exec]:
			t.Errorf("monitor %s ended before the checkpoint, yet was recovered as lost", m.id)
		case rec[m.exec]:
			p.n.monLost++
		case m.stopped == "" && m.released < monChunks:
			t.Errorf("monitor %s was running when the helper died, yet was not recovered as lost", m.id)
		}
	}
}

// finale lets everything end, waits until every result is kept and its
// ack answered, has the owner take one last turn, and closes the session.
func (p *prop) finale() {
	p.polls.Wait()
	for _, r := range p.pool() {
		p.release(r)
	}
	for _, m := range p.mons {
		for m.gen == p.gen && m.stopped == "" && m.released < monChunks {
			p.monRelease(m)
		}
	}
	c := p.c
	p.waitFor("everything kept and acked", func() []string {
		var missing []string
		for _, r := range p.runs {
			if r.lostAt > 0 || r.fate == modelStopped || r.claimed || r.personPolled || r.fate == pooled {
				continue // nothing to deliver, or nothing required (checked below)
			}
			ok := false
			for id := range c.byExec[r.id] {
				ok = ok || c.confirmed[id]
			}
			if !ok {
				missing = append(missing, fmt.Sprintf("execution %s (deliveries %v)", r.id, c.byExec[r.id]))
			}
		}
		for _, m := range p.mons {
			// Monitor deliveries do not survive a crash: an earlier
			// helper's monitor is checked below, not waited for.
			if m.gen == p.gen && (len(c.lines[m.id]) != len(m.want()) || !c.confirmed[c.terminals[m.id]]) {
				missing = append(missing, fmt.Sprintf("monitor %s (%d lines, terminal %q)", m.id, len(c.lines[m.id]), c.terminals[m.id]))
			}
		}
		for id := range c.durable {
			if !c.confirmed[id] {
				missing = append(missing, "ack of "+id+" "+c.ackGaveUp[id])
			}
		}
		slices.Sort(missing)
		return missing
	})
	// The last turn: everything still owed is offered when it ends.
	if !p.busy {
		p.flip()
	}
	p.flip()
	// Every delivery the helper made is durable now: closing the session
	// discards nothing, so none was made that the client never got.
	var closed struct{ Discarded int }
	p.must(c.call("session/close", map[string]any{"sessionId": c.sid}, &closed, false))
	if closed.Discarded != 0 {
		p.t.Errorf("session/close discarded %d deliveries", closed.Discarded)
	}
}

// check checks, once everything is over, what the client saw.
func (p *prop) check() {
	t, c := p.t, p.c
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	receiptsOf := map[string][]receipt{}
	for _, rc := range c.receipts {
		receiptsOf[rc.d.Attrs.ExecutionID] = append(receiptsOf[rc.d.Attrs.ExecutionID], rc)
	}

	// Every result exactly once, under one id, with its content.
	var delivered, claimed, duplicates, lost, afterClaim, lostSeen int
	for _, r := range p.runs {
		ids := c.byExec[r.id]
		switch {
		case r.fate == modelStopped:
			if len(ids) > 0 {
				afterClaim++
				t.Errorf("execution %s stopped by its owner, then delivered", r.id)
			}
		case r.claimed:
			claimed++
			if len(ids) > 0 {
				afterClaim++
				t.Errorf("execution %s delivered after a poll claimed it", r.id)
			}
		case len(ids) > 1:
			duplicates += len(ids) - 1
			t.Errorf("execution %s delivered under %d ids: %v", r.id, len(ids), ids)
		case r.lostAt > 0:
			lostSeen += len(ids) // sent before its end reached the journal
		case r.personPolled, r.fate == pooled:
			// The owner's poll took it, or the sink did (a late ack);
			// a command still held when its helper died was reported then.
		case len(ids) == 0:
			lost++
			t.Errorf("execution %s never delivered", r.id)
		default:
			delivered++
		}
		for id := range ids {
			d := c.first[id]
			switch want := fmt.Sprintf("out-%d\n", r.i); {
			case d.Owner != r.owner:
				t.Errorf("delivery %s of %s to %s, want %s", id, r.id, d.Owner, r.owner)
			case r.fate == personStopped:
				if d.Attrs.Status != execution.StatusStopped || d.Attrs.Termination != r.term || d.Observation == nil || d.Observation.Output != "" {
					t.Errorf("delivery %s of %s, stopped by a person: attrs %+v, observation %+v", id, r.id, d.Attrs, d.Observation)
				}
			case !r.cut && (d.Observation == nil || d.Observation.Output != want):
				t.Errorf("delivery %s: observation %+v, want output %q", id, d.Observation, want)
			case d.Attrs.Termination != execution.Exited || d.Attrs.ExitCode == nil || *d.Attrs.ExitCode != r.i%3:
				t.Errorf("delivery %s: attrs %+v, want exit code %d", id, d.Attrs, r.i%3)
			}
		}
		if r.personPolled {
			// The poll withdrew a pending delivery: a send already handed
			// to the forwarder may follow its reply, none the next barrier.
			if b, ok := p.barrierAfter(r.pollAt); ok {
				for _, rc := range receiptsOf[r.id] {
					if rc.gen == r.gen && b.before(rc.at) {
						t.Errorf("delivery %s of %s sent after the owner's poll took it", rc.d.DeliveryID, r.id)
					}
				}
			}
		}
	}
	for id := range c.byExec {
		if p.byID[id] == nil {
			t.Errorf("EXECUTION delivery for %s, not one of the test's commands (a monitor's?)", id)
		}
	}

	// Re-made deliveries: a result the dead helper's journal still showed
	// pending, under its original id; never a monitor's, a claimed one,
	// one journaled done or one recovered as lost.
	prefixGen := map[string]int{}
	for g, pre := range c.prefixes {
		prefixGen[pre] = g
	}
	remade := map[string]bool{}
	for _, rc := range c.receipts {
		id := rc.d.DeliveryID
		g := prefixGen[prefixOf(id)]
		if g == rc.gen {
			continue
		}
		remade[id] = true
		r := p.byID[rc.d.Attrs.ExecutionID]
		switch {
		case rc.d.Kind != execution.KindExecution:
			t.Errorf("helper %d re-made %s delivery %s of helper %d: only results survive a crash", rc.gen, rc.d.Kind, id, g)
		case r == nil:
			t.Errorf("helper %d re-made %s for an unknown execution %s", rc.gen, id, rc.d.Attrs.ExecutionID)
		case r.fate == modelStopped || r.claimed:
			t.Errorf("helper %d re-made %s of %s, which a reply had claimed", rc.gen, id, r.id)
		case r.doneOnDisk > 0 && r.doneOnDisk < rc.gen:
			t.Errorf("helper %d re-made %s of %s, whose delivery helper %d had journaled done before its crash", rc.gen, id, r.id, r.doneOnDisk)
		case r.lostAt > 0 && r.lostAt <= rc.gen:
			t.Errorf("helper %d re-made %s of %s, which helper %d recovered as lost", rc.gen, id, r.id, r.lostAt)
		}
	}

	// Monitors: every line once, in order; a crash may cut the tail off.
	for _, m := range p.mons {
		got, want, term := c.lines[m.id], m.want(), c.terminals[m.id]
		crashed := m.gen < p.gen
		switch {
		case crashed && (len(got) > len(want) || !slices.Equal(got, want[:len(got)])):
			t.Errorf("monitor %s (its helper crashed): lines %q, want a prefix of %d in order", m.id, got, len(want))
		case crashed && term != "" && len(got) != len(want):
			t.Errorf("monitor %s: terminal %s after %d of %d lines", m.id, term, len(got), len(want))
		case !crashed && !slices.Equal(got, want):
			lost += max(0, len(want)-len(got))
			t.Errorf("monitor %s: lines %q, want %d in order", m.id, got, len(want))
		}
		if term == "" {
			if !crashed {
				t.Errorf("monitor %s: no terminal delivery", m.id)
			}
			continue
		}
		a := c.first[term].Attrs
		if a.Events == nil || *a.Events != int64(len(want)) {
			t.Errorf("monitor %s: terminal %+v, want %d events", m.id, a, len(want))
		}
		if m.stopped != "" && (a.Status != execution.StatusStopped || a.Termination != m.term) ||
			m.stopped == "" && (a.Status != execution.StatusCompleted || a.Termination != execution.Exited) {
			t.Errorf("monitor %s (stopped by %q): terminal %+v", m.id, m.stopped, a)
		}
	}
	for id, n := range c.kept {
		if n > 1 {
			duplicates++
			t.Errorf("the sink got %s %d times", id, n)
		}
	}
	retries := 0
	for _, rc := range c.receipts {
		if rc.d.Attempt > 1 {
			retries++
		}
	}

	// Wakes: coalesced, only while idle, only for what owes attention and
	// only from the helper that made it, never after the commit that
	// retired it.
	wokenIDs := map[string]bool{}
	wakeWhileBusy := 0
	for _, wa := range c.wakes {
		w := wa.w
		if len(w.DeliveryIDs) == 0 || w.Owner != execution.RootOwner || w.SessionID != c.sid {
			t.Errorf("wake %+v", w)
		}
		inWake := map[string]bool{}
		for _, id := range w.DeliveryIDs {
			if inWake[id] {
				t.Errorf("delivery %s twice in one wake", id)
			}
			inWake[id] = true
			wokenIDs[id] = true
			d, ok := c.first[id]
			switch {
			case !ok:
				t.Errorf("wake for %s, never delivered", id)
			case prefixOf(id) != c.prefixes[wa.gen]:
				t.Errorf("helper %d woke for %s, made by helper %d (a re-made delivery, or attention owed before a crash)", wa.gen, id, prefixGen[prefixOf(id)])
			case p.owes(d) || p.readByOwner(d):
			case d.Kind == execution.KindMonitorTerminal:
				t.Errorf("wake for %s, the end of monitor %s, which was stopped", id, d.Attrs.MonitorID)
			case d.Owner != execution.RootOwner:
				t.Errorf("wake for %s, a result of %s", id, d.Owner)
			default:
				t.Errorf("wake for %s, the result of %s, which was stopped", id, d.Attrs.ExecutionID)
			}
		}
		for _, bw := range p.windows {
			if bw.gen == wa.gen && bw.from.before(wa.at) && (bw.open || !bw.to.before(wa.at)) {
				wakeWhileBusy++
				t.Errorf("wake %v read after the busy reply and before the idle request", w.DeliveryIDs)
			}
		}
		for _, cr := range p.commits {
			if cr.reply.before(wa.at) {
				for _, id := range w.DeliveryIDs {
					if cr.covered[id] {
						t.Errorf("wake for %s after the retire commit that covered it", id)
					}
				}
			}
		}
	}

	// Attended (or read by the owner's poll): owner/attend answers
	// directly, not after the wakes decided before it, so one wake taken
	// before the attend was handled may still follow its reply; only one
	// (the forwarder sends one at a time), and before the next reply
	// that follows every wake decided before it.
	reads := slices.Clone(p.attends)
	for _, r := range p.runs {
		if r.pollAt != (at{}) && len(c.byExec[r.id]) > 0 {
			reads = append(reads, attendRec{ids: slices.Collect(maps.Keys(c.byExec[r.id])), sent: r.pollAt, reply: r.pollAt})
		}
	}
	for _, a := range reads {
		var after []wakeAt
		for _, wa := range c.wakes {
			if a.reply.before(wa.at) && slices.ContainsFunc(wa.w.DeliveryIDs, func(id string) bool { return slices.Contains(a.ids, id) }) {
				after = append(after, wa)
			}
		}
		b, ok := p.barrierAfter(a.reply)
		if len(after) > 1 || len(after) == 1 && ok && b.before(after[0].at) {
			t.Errorf("attended %v, then woken for them again %d times (the last %v)", a.ids, len(after), after[len(after)-1].w.DeliveryIDs)
		}
	}

	// Offered again: whatever was owed when the owner turned idle is in
	// the first wake after its busy reply (none can come between: the
	// owner was busy), less what a request sent meanwhile took off.
	for _, ir := range p.idles {
		if len(ir.owed) == 0 {
			continue
		}
		var first *wakeAt
		for i := range c.wakes {
			wa := &c.wakes[i]
			if wa.gen == ir.gen && ir.busyAt.before(wa.at) && (first == nil || wa.at.before(first.at)) {
				first = wa
			}
		}
		if first == nil {
			t.Errorf("owed %v when the owner turned idle (busy reply at %v, idle request after %v), never offered again", ir.owed, ir.busyAt, ir.sent)
			continue
		}
		gone := map[string]bool{}
		for _, a := range p.attends {
			if !a.sent.before(ir.sent) && a.sent.before(first.at) {
				for _, id := range a.ids {
					gone[id] = true
				}
			}
		}
		for _, cr := range p.commits {
			if !cr.sent.before(ir.sent) && cr.sent.before(first.at) {
				maps.Copy(gone, cr.covered)
			}
		}
		for _, id := range ir.owed {
			if !gone[id] && !slices.Contains(first.w.DeliveryIDs, id) {
				t.Errorf("%s was owed when the owner turned idle, and the wake after it (%v) left it out", id, first.w.DeliveryIDs)
			}
		}
	}

	n := p.n
	t.Logf("executions %d (delivered %d, claimed by a poll %d of %d polled, stopped by the model %d, by a person %d (%d of them then polled by the owner, %d stopAll), lost in crashes %d (%d deliveries of them made before)); monitors %d with up to %d lines (stopped %d, %d by a person; lost in crashes %d)",
		len(p.runs), delivered, claimed, n.polls, n.modelStops, n.personStops, n.personPolls, n.stopAlls, n.lostRuns, lostSeen,
		len(p.mons), monChunks*monChunkLines, n.monStops, n.monStopsByPerson, n.monLost)
	t.Logf("deliveries %d, sends %d, retries %d, re-made after a crash %d, connection drops %d, crashes %d (%d right after a durable ack)",
		len(c.first), len(c.receipts), retries, len(remade), c.drops, n.crashes, n.ackCrashes)
	t.Logf("wakes %d for %d items (%d while busy), re-offers %d (%d items), attends %d (%d items), retires %d (%d committed, %d items retired, %d owed items left owed), duplicates %d, lost %d, after claim %d",
		len(c.wakes), len(wokenIDs), wakeWhileBusy, n.reoffers, n.reofferedItems, n.attends, n.attendedItems, n.retires, n.commits, n.retiredItems, n.owedPastCommit, duplicates, lost, afterClaim)
}

// barrierAfter is the first reply after a that follows every wake decided
// before its request.
func (p *prop) barrierAfter(a at) (at, bool) {
	var next at
	found := false
	for _, b := range p.barriers {
		if a.before(b) && (!found || b.before(next)) {
			next, found = b, true
		}
	}
	return next, found
}

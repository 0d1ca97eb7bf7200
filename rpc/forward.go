package rpc

import (
	"context"
	"sync"

	"github.com/mevedel/mevedel-exec/execution"
)

// forwarder sends notifications to Emacs in the order they were raised,
// from one goroutine, so producers never block on the pipe.
//
// Its queue stays bounded however long the client does not read:
// execution changes coalesce per session and wakes per owner, their
// payload built only when the client can take it (so a burst of changes,
// or a client that is behind, costs one snapshot); progress coalesces per
// execution and is dropped while the client is behind (it is advisory).
// Settlements, deliveries and wakes are never dropped: there is one per
// execution or per delivery attempt. A followed execution's output
// coalesces per execution, its bytes taken when the note is written. A
// client that stays stuck is disconnected by its stream.
type forwarder struct {
	send   func(method string, params any)
	behind func() bool // the client is behind: drop progress
	room   func()      // waits until the client can take a message
	// takes, when set, says whether a wake for the session has a client
	// to go to; without one the wake stays due, for the next to attach.
	takes func(*execution.Session) bool

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*note                       // guarded by mu
	changed  map[*execution.Session]bool   // guarded by mu; a change note is queued
	wakes    map[wakeKey]bool              // guarded by mu; a wake note is queued
	progress map[progressKey]*note         // guarded by mu; the queued progress note of an execution
	outputs  map[*execution.Execution]bool // guarded by mu; an output note is queued
	closed   bool                          // guarded by mu
	done     chan struct{}                 // closed once, when run returns
}

type note struct {
	method  string
	params  any                  // guarded by forwarder.mu while queued (progress is replaced)
	session *execution.Session   // set for a coalesced exec/changed or wake
	owner   string               // set for a coalesced wake
	exec    *execution.Execution // set for a coalesced exec/output
	then    func()               // run in order instead of a send
}

// progressKey names one execution's coalesced progress.
type progressKey struct{ session, execution string }

// wakeKey names one owner's coalesced wake.
type wakeKey struct {
	s     *execution.Session
	owner string
}

func newForwarder(send func(string, any), behind func() bool, room func()) *forwarder {
	f := &forwarder{
		send: send, behind: behind, room: room,
		changed: map[*execution.Session]bool{}, wakes: map[wakeKey]bool{}, progress: map[progressKey]*note{},
		outputs: map[*execution.Execution]bool{},
		done:    make(chan struct{}),
	}
	f.cond = sync.NewCond(&f.mu)
	go f.run()
	return f
}

func (f *forwarder) push(n *note) {
	if n.method == NotifyProgress && f.behind() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	switch {
	case n.method == NotifyProgress:
		p := n.params.(ProgressParams)
		k := progressKey{p.SessionID, p.ExecutionID}
		if q := f.progress[k]; q != nil {
			q.params = p // the newer facts and tail replace the queued ones
			return
		}
		f.progress[k] = n
	case n.session != nil && n.method == NotifyWake:
		k := wakeKey{n.session, n.owner}
		if f.wakes[k] {
			return
		}
		f.wakes[k] = true
	case n.exec != nil:
		if f.outputs[n.exec] {
			return
		}
		f.outputs[n.exec] = true
	case n.session != nil:
		if f.changed[n.session] {
			return
		}
		f.changed[n.session] = true
	}
	f.queue = append(f.queue, n)
	f.cond.Signal()
}

func (f *forwarder) run() {
	defer close(f.done)
	for {
		f.mu.Lock()
		for len(f.queue) == 0 && !f.closed {
			f.cond.Wait()
		}
		if len(f.queue) == 0 {
			f.mu.Unlock()
			return
		}
		n := f.queue[0]
		if n.session != nil || n.exec != nil {
			// Its payload is built when the client can take it: until
			// then it stays queued and further changes coalesce into it,
			// so a client that is behind costs no snapshots. Only this
			// goroutine takes from the queue, so n stays its head.
			f.mu.Unlock()
			f.room()
			f.mu.Lock()
		}
		f.queue[0] = nil
		f.queue = f.queue[1:]
		switch {
		case n.method == NotifyProgress:
			p := n.params.(ProgressParams)
			delete(f.progress, progressKey{p.SessionID, p.ExecutionID})
		case n.session != nil && n.method == NotifyWake:
			delete(f.wakes, wakeKey{n.session, n.owner})
		case n.session != nil:
			delete(f.changed, n.session)
		case n.exec != nil:
			delete(f.outputs, n.exec)
		}
		f.mu.Unlock()
		switch {
		case n.then != nil:
			n.then()
			continue
		case n.method == NotifyProgress && f.behind():
			continue
		}
		switch {
		case n.session != nil && n.method == NotifyWake:
			// Taken now, so every mark made while this waited joins it,
			// and an owner that turned busy meanwhile gets none.
			if f.takes != nil && !f.takes(n.session) {
				continue
			}
			ids, ok := n.session.TakeWake(n.owner)
			if !ok {
				continue
			}
			n.params = WakeParams{SessionID: n.session.ID(), Owner: n.owner, DeliveryIDs: ids}
		case n.exec != nil:
			// Taken now, so what was spooled while this waited joins it.
			off, length, text, ok := n.exec.TakeOutput()
			if !ok {
				continue
			}
			n.params = OutputParams{SessionID: n.exec.SessionID(), ExecutionID: n.exec.ID(), Offset: off, Length: length, Text: text}
		case n.session != nil:
			// Taken now, so every change made while this waited joins it.
			changed, grown, ok := n.session.TakeChanged()
			if !ok {
				continue
			}
			n.params = ChangedParams{SessionID: n.session.ID(), Changed: changed, Grown: grown}
		}
		f.send(n.method, n.params)
	}
}

// close sends what is queued, then stops.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	f.cond.Signal()
	f.mu.Unlock()
	<-f.done
}

// The forwarder is the manager's Events sink.

func (f *forwarder) Changed(s *execution.Session) {
	f.push(&note{method: NotifyChanged, session: s})
}

func (f *forwarder) Output(e *execution.Execution) {
	f.push(&note{method: NotifyOutput, exec: e})
}

func (f *forwarder) Settled(facts execution.Facts) {
	f.push(&note{method: NotifySettled, params: SettledParams{SessionID: facts.SessionID, Facts: facts}})
}

func (f *forwarder) Progress(facts execution.Facts, tail string) {
	f.push(&note{method: NotifyProgress, params: ProgressParams{
		SessionID: facts.SessionID, ExecutionID: facts.ExecutionID, ToolUseID: facts.ToolUseID, Facts: facts, Tail: tail,
	}})
}

func (f *forwarder) Deliver(d execution.Delivery) {
	f.push(&note{method: NotifyDeliver, params: d})
}

func (f *forwarder) Delivered(d execution.Delivery) {
	f.push(&note{method: NotifyDelivered, params: DeliveredParams{
		SessionID: d.SessionID, DeliveryID: d.DeliveryID, ExecutionID: d.Attrs.ExecutionID, Owner: d.Owner,
	}})
}

func (f *forwarder) Wake(s *execution.Session, owner string) {
	f.push(&note{method: NotifyWake, session: s, owner: owner})
}

// after runs fn once every notification queued before it has been sent:
// a reply that must not overtake them goes this way.
func (f *forwarder) after(fn func()) {
	f.mu.Lock()
	closed := f.closed
	if !closed {
		f.queue = append(f.queue, &note{then: fn})
		f.cond.Signal()
	}
	f.mu.Unlock()
	if closed {
		fn()
	}
}

var _ execution.Events = (*forwarder)(nil)

// notifyCtx is the context of notification writes; they are bounded by
// the connection, not by a request.
var notifyCtx = context.Background()

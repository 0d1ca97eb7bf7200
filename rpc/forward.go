package rpc

import (
	"context"
	"sync"

	"github.com/mevedel/mevedel-exec/execution"
)

// forwarder sends notifications to Emacs in the order they were raised,
// from one goroutine, so producers never block on the pipe. Live-set
// changes of a session coalesce: the snapshot is taken when the
// notification is sent, so a burst of changes costs one message.
type forwarder struct {
	send func(method string, params any)

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []note                      // guarded by mu
	changed map[*execution.Session]bool // guarded by mu; a change note is queued
	closed  bool                        // guarded by mu
	done    chan struct{}               // closed once, when run returns
}

type note struct {
	method  string
	params  any
	session *execution.Session // set for a coalesced exec/changed
}

func newForwarder(send func(string, any)) *forwarder {
	f := &forwarder{send: send, changed: map[*execution.Session]bool{}, done: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	go f.run()
	return f
}

func (f *forwarder) push(n note) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if n.session != nil {
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
		f.queue[0] = note{}
		f.queue = f.queue[1:]
		if n.session != nil {
			delete(f.changed, n.session)
		}
		f.mu.Unlock()
		if n.session != nil {
			n.params = ChangedParams{SessionID: n.session.ID(), Live: n.session.Live()}
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
	f.push(note{method: NotifyChanged, session: s})
}

func (f *forwarder) Settled(facts execution.Facts) {
	f.push(note{method: NotifySettled, params: SettledParams{SessionID: facts.SessionID, Facts: facts}})
}

func (f *forwarder) Progress(facts execution.Facts, tail string) {
	f.push(note{method: NotifyProgress, params: ProgressParams{
		SessionID: facts.SessionID, ExecutionID: facts.ExecutionID, ToolUseID: facts.ToolUseID, Facts: facts, Tail: tail,
	}})
}

var _ execution.Events = (*forwarder)(nil)

// notifyCtx is the context of notification writes; they are bounded by
// the connection, not by a request.
var notifyCtx = context.Background()

package execution

import (
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"
)

// DeliveryKind says what a delivery carries.
type DeliveryKind string

const (
	KindExecution       DeliveryKind = "EXECUTION"
	KindMonitor         DeliveryKind = "MONITOR"
	KindMonitorTerminal DeliveryKind = "MONITOR_TERMINAL"
	// KindInputRequested: a tty execution waits for input (one per wait).
	KindInputRequested DeliveryKind = "INPUT_REQUESTED"
)

// DeliveryAttrs are the structured attributes of a delivery. A view builds
// its notice from these, never from output text (output can spoof).
type DeliveryAttrs struct {
	ExecutionID string      `json:"executionId,omitempty"`
	MonitorID   string      `json:"monitorId,omitempty"`
	Label       string      `json:"label,omitempty"`
	Command     string      `json:"command,omitempty"`
	Status      Status      `json:"status,omitempty"`
	Termination Termination `json:"termination,omitempty"`
	ExitCode    *int        `json:"exitCode,omitempty"`
	Signal      string      `json:"signal,omitempty"`
	Events      *int64      `json:"events,omitempty"` // monitors: events so far, 0 included
	Suppressed  int64       `json:"suppressed,omitempty"`
	Reason      string      `json:"reason,omitempty"`
	Prompt      string      `json:"prompt,omitempty"` // INPUT_REQUESTED: the last partial line
}

// Delivery is one mailbox/deliver notification. It is frozen when made:
// every resend carries the same id and content.
type Delivery struct {
	SessionID   string        `json:"sessionId"`
	Owner       string        `json:"owner"`
	DeliveryID  string        `json:"deliveryId"`
	Kind        DeliveryKind  `json:"kind"`
	Attrs       DeliveryAttrs `json:"attrs"`
	Text        string        `json:"text,omitempty"` // MONITOR_TERMINAL: the one notice line
	Observation *Observation  `json:"observation,omitempty"`
	Lines       []string      `json:"lines,omitempty"`
	Attempt     int           `json:"attempt"` // 1 on the first send
}

// Mailbox tuning. Limits may shorten the ack timeout and first backoff
// (tests do); the doubling cap is fixed.
const (
	defaultAckTimeout = 10 * time.Second
	defaultRetry      = time.Second
	maxRetry          = 30 * time.Second
)

// parcel is a delivery waiting for its durable ack.
type parcel struct {
	d        Delivery
	inFlight bool          // sent, waiting for the ack
	due      time.Time     // in flight: ack deadline; otherwise next send
	backoff  time.Duration // the wait before the next resend
	// durable runs once, after the durable ack (outside the mailbox lock).
	durable func(Delivery)
	// discard runs once if the session closes first.
	discard func()
}

// mailbox holds a session's pending deliveries and (re)sends them from
// one goroutine until each is durably acknowledged.
type mailbox struct {
	s          *Session
	ackTimeout time.Duration // immutable
	retry      time.Duration // immutable
	kick       chan struct{} // buffered; wakes the sender

	// handing is held by the sender from choosing what to send until it
	// is handed to the session's events, and by withdraw: a delivery
	// taken back was then either never handed over or handed over before
	// withdraw returned, so whatever is ordered after the withdrawal (the
	// poll's reply, the next request's) follows its last send.
	handing   sync.Mutex
	mu        sync.Mutex
	parcels   map[string]*parcel // guarded by mu
	order     []*parcel          // guarded by mu; creation order, for sending
	seq       int                // guarded by mu
	connected bool               // guarded by mu
	closed    bool               // guarded by mu
}

func newMailbox(s *Session) *mailbox {
	mb := &mailbox{
		s:          s,
		ackTimeout: defaultAckTimeout,
		retry:      defaultRetry,
		kick:       make(chan struct{}, 1),
		parcels:    map[string]*parcel{},
		connected:  true,
	}
	if s.limits.AckTimeoutMs > 0 {
		mb.ackTimeout = time.Duration(s.limits.AckTimeoutMs) * time.Millisecond
	}
	if s.limits.RetryMs > 0 {
		mb.retry = time.Duration(s.limits.RetryMs) * time.Millisecond
	}
	return mb
}

func (mb *mailbox) poke() {
	select {
	case mb.kick <- struct{}{}:
	default:
	}
}

// post queues d for delivery and returns its id. It reports false when
// the session is closing: then nothing is delivered.
func (mb *mailbox) post(d Delivery, durable func(Delivery), discard func()) (string, bool) {
	mb.mu.Lock()
	if mb.closed {
		mb.mu.Unlock()
		return "", false
	}
	d.SessionID = mb.s.id
	if d.DeliveryID == "" {
		d.DeliveryID = mb.nextIDLocked()
	}
	p := &parcel{d: d, due: time.Now(), backoff: mb.retry, durable: durable, discard: discard}
	mb.parcels[d.DeliveryID] = p
	mb.order = append(mb.order, p)
	mb.mu.Unlock()
	mb.poke()
	return d.DeliveryID, true
}

// nextID draws a delivery id before the delivery is made, so the journal
// can name it: a delivery re-made after a crash keeps its id.
func (mb *mailbox) nextID() string {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.nextIDLocked()
}

func (mb *mailbox) nextIDLocked() string {
	mb.seq++
	return statedir.DeliveryID(mb.s.prefix, mb.seq)
}

// withdraw takes back a delivery its owner has read otherwise; a late ack
// for it is then an unknown id, which is success. It reports whether the
// delivery was still pending.
func (mb *mailbox) withdraw(id string) bool {
	mb.handing.Lock()
	defer mb.handing.Unlock()
	mb.mu.Lock()
	defer mb.mu.Unlock()
	p, ok := mb.parcels[id]
	if ok {
		mb.removeLocked(p)
	}
	return ok
}

// ack handles mailbox/ack. Unknown and already retired ids are success:
// acks are idempotent. A failure for a parcel that is not in flight (its
// ack timed out already) changes nothing.
func (mb *mailbox) ack(id string, durable bool) {
	mb.mu.Lock()
	p, ok := mb.parcels[id]
	if !ok {
		mb.mu.Unlock()
		return
	}
	if durable {
		mb.removeLocked(p)
		mb.mu.Unlock()
		if p.durable != nil {
			p.durable(p.d)
		}
		return
	}
	if p.inFlight {
		mb.restoreLocked(p, time.Now())
	}
	mb.mu.Unlock()
	mb.poke()
}

func (mb *mailbox) removeLocked(p *parcel) {
	delete(mb.parcels, p.d.DeliveryID)
	for i, q := range mb.order {
		if q == p {
			mb.order = append(mb.order[:i], mb.order[i+1:]...)
			break
		}
	}
}

// restoreLocked takes a parcel back from flight and schedules its resend
// with a doubling backoff.
func (mb *mailbox) restoreLocked(p *parcel, now time.Time) {
	p.inFlight = false
	p.due = now.Add(p.backoff)
	p.backoff = min(2*p.backoff, maxRetry)
}

// setConnected follows the connection: losing it restores every parcel in
// flight; a new one gets them again after their backoff.
func (mb *mailbox) setConnected(up bool) {
	mb.mu.Lock()
	mb.connected = up
	if !up {
		now := time.Now()
		for _, p := range mb.order {
			if p.inFlight {
				mb.restoreLocked(p, now)
			}
		}
	}
	mb.mu.Unlock()
	mb.poke()
}

// close discards every pending delivery and returns how many there were.
func (mb *mailbox) close() int {
	mb.mu.Lock()
	mb.closed = true
	dropped := mb.order
	mb.order, mb.parcels = nil, map[string]*parcel{}
	mb.mu.Unlock()
	mb.poke()
	for _, p := range dropped {
		if p.discard != nil {
			p.discard()
		}
	}
	return len(dropped)
}

// run sends due parcels and expires unanswered ones until the session
// closes.
func (mb *mailbox) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var send []Delivery
		now := time.Now()
		next := now.Add(time.Hour)
		mb.handing.Lock()
		mb.mu.Lock()
		if mb.closed {
			mb.mu.Unlock()
			mb.handing.Unlock()
			return
		}
		for _, p := range mb.order {
			switch {
			case p.inFlight && !now.Before(p.due):
				mb.restoreLocked(p, now) // no ack in time
			case !p.inFlight && mb.connected && !now.Before(p.due):
				p.inFlight = true
				p.due = now.Add(mb.ackTimeout)
				p.d.Attempt++
				send = append(send, p.d)
			}
			if (p.inFlight || mb.connected) && p.due.Before(next) {
				next = p.due
			}
		}
		mb.mu.Unlock()
		for _, d := range send {
			mb.s.m.events.Deliver(d) // only queues: never waits on the client
		}
		mb.handing.Unlock()
		timer.Reset(time.Until(next))
		select {
		case <-mb.kick:
		case <-timer.C:
		}
	}
}

// Ack handles mailbox/ack: durable, or a failure to keep the record.
func (s *Session) Ack(id string, durable bool) { s.mail.ack(id, durable) }

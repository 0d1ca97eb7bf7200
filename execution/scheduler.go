package execution

import "sync"

// scheduler is a session's readers/writer queue in arrival order. Readers
// share the read lane; an exclusive ticket runs alone. The queue is strictly
// FIFO at its head, so a waiting exclusive ticket holds back every reader
// that arrived after it (no writer starvation).
type scheduler struct {
	mu      sync.Mutex
	queue   []*ticket // guarded by mu; waiting tickets, oldest first
	readers int       // guarded by mu; admitted read tickets
	writer  bool      // guarded by mu; an exclusive ticket is admitted
}

type ticketState int

const (
	ticketWaiting ticketState = iota
	ticketHeld
	ticketReleased
)

type ticket struct {
	lane     Lane
	admitted chan struct{} // closed once, on admission
	state    ticketState   // guarded by scheduler.mu
}

// enqueue adds a ticket at the tail and admits what can run.
func (s *scheduler) enqueue(lane Lane) *ticket {
	t := &ticket{lane: lane, admitted: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, t)
	s.pump()
	s.mu.Unlock()
	return t
}

// release gives the lane back (or leaves the queue). It is idempotent, so
// settle, abort and yield can all call it.
func (s *scheduler) release(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch t.state {
	case ticketWaiting:
		for i, q := range s.queue {
			if q == t {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
	case ticketHeld:
		if t.lane == LaneRead {
			s.readers--
		} else {
			s.writer = false
		}
	case ticketReleased:
		return
	}
	t.state = ticketReleased
	s.pump()
}

// pump admits tickets from the head while they are compatible.
func (s *scheduler) pump() {
	for len(s.queue) > 0 {
		t := s.queue[0]
		switch {
		case s.writer:
			return
		case t.lane == LaneRead:
			s.readers++
		case s.readers == 0:
			s.writer = true
		default:
			return
		}
		s.queue = s.queue[1:]
		t.state = ticketHeld
		close(t.admitted)
	}
}

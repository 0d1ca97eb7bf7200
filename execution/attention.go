package execution

import "sync"

// Wake marks: which results owe an owner its attention, and whether the
// owner is idle enough to be woken for them.

// ownerMarks is the wake state of one owner; it lives in memory only.
type ownerMarks struct {
	busy    bool
	owed    []string // delivery ids owing attention, oldest first
	retired uint64   // epoch of the last owner/retire
}

// attention is a session's wake bookkeeping.
type attention struct {
	mu     sync.Mutex
	owners map[string]*ownerMarks // guarded by mu
	epoch  uint64                 // guarded by mu; bumped by every retire
}

func (a *attention) marks(owner string) *ownerMarks {
	m := a.owners[owner]
	if m == nil {
		m = &ownerMarks{}
		a.owners[owner] = m
	}
	return m
}

// now returns the current epoch, taken when a result is made so a later
// owner/retire covers it.
func (s *Session) attentionEpoch() uint64 {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	return s.att.epoch
}

// owe marks id as owing owner's attention, unless an owner/retire after
// epoch retired it. An idle owner is woken.
func (s *Session) owe(owner, id string, epoch uint64) {
	s.att.mu.Lock()
	m := s.att.marks(owner)
	if m.retired > epoch {
		s.att.mu.Unlock()
		return
	}
	m.owed = append(m.owed, id)
	idle := !m.busy
	s.att.mu.Unlock()
	if idle {
		s.m.events.Wake(s, owner)
	}
}

// TakeWake hands out what owner owes attention to, coalesced into one
// wake, when the owner is idle; ok is false when there is nothing to wake
// for. The forwarder calls it when it sends the wake, so every mark made
// until then joins.
func (s *Session) TakeWake(owner string) (ids []string, ok bool) {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	m := s.att.marks(owner)
	if m.busy || len(m.owed) == 0 {
		return nil, false
	}
	ids, m.owed = m.owed, nil
	return ids, true
}

// SetOwnerState records busy or idle; an owner turning idle with
// attention owed is woken.
func (s *Session) SetOwnerState(owner string, busy bool) {
	s.att.mu.Lock()
	m := s.att.marks(owner)
	m.busy = busy
	wake := !busy && len(m.owed) > 0
	s.att.mu.Unlock()
	if wake {
		s.m.events.Wake(s, owner)
	}
}

// RetireOwner retires all attention owner owes up to now, including
// results not yet durable; what arrives later stays owed. Monitors keep
// running.
func (s *Session) RetireOwner(owner string) int {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	m := s.att.marks(owner)
	n := len(m.owed)
	m.owed = nil
	s.att.epoch++
	m.retired = s.att.epoch
	return n
}

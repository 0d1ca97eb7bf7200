package execution

import (
	"slices"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/transcript"
)

// Attention: which results an owner owes attention to, and when it is
// offered a wake for them. A result that ended on its own owes attention
// once its delivery is durable. It stays owed until the owner attends it
// (owner/attend, or a poll that read its end) or the person retires it
// (owner/retire), and it is offered again each time the owner turns idle,
// with anything newer. Marks live in memory: after a crash nothing is owed,
// and a re-made delivery never wakes.

// owedItem is one delivery owing attention.
type owedItem struct {
	id  string // deliveryId
	seq uint64 // when its result was made, on the session's attention clock
}

// ownerMarks is the attention state of one owner.
type ownerMarks struct {
	busy bool
	owed []owedItem // oldest first
	// due: a wake should be offered (something new became owed while
	// idle, or the owner turned idle with something owed).
	due bool
	// retiredTo: results made at or before it are retired, including
	// those whose delivery becomes durable only later.
	retiredTo uint64
}

// attention is a session's attention bookkeeping.
type attention struct {
	mu     sync.Mutex
	owners map[string]*ownerMarks // guarded by mu
	clock  uint64                 // guarded by mu; ticks once per result made
}

func (a *attention) marks(owner string) *ownerMarks {
	m := a.owners[owner]
	if m == nil {
		m = &ownerMarks{}
		a.owners[owner] = m
	}
	return m
}

// attentionTick stamps a result as it is made, so a retirement whose
// frontier is at or after it covers it.
func (s *Session) attentionTick() uint64 {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	s.att.clock++
	return s.att.clock
}

// owe marks id as owing owner's attention, unless a retirement covered its
// result. An idle owner is offered a wake.
func (s *Session) owe(owner, id string, seq uint64) {
	s.att.mu.Lock()
	m := s.att.marks(owner)
	if seq <= m.retiredTo {
		s.att.mu.Unlock()
		return
	}
	m.owed = append(m.owed, owedItem{id: id, seq: seq})
	wake := !m.busy
	m.due = m.due || wake
	s.att.mu.Unlock()
	if wake {
		s.m.events.Wake(s, owner)
	}
}

// TakeWake hands out every delivery owner owes attention to, coalesced
// into one wake, when the owner is idle and a wake is due; ok is false
// otherwise. The forwarder calls it when it sends the wake, so every mark
// made until then joins. What it hands out stays owed.
func (s *Session) TakeWake(owner string) (ids []string, ok bool) {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	m := s.att.marks(owner)
	if m.busy || !m.due || len(m.owed) == 0 {
		return nil, false
	}
	m.due = false
	ids = make([]string, len(m.owed))
	for i, it := range m.owed {
		ids[i] = it.id
	}
	return ids, true
}

// SetOwnerState records busy or idle; an owner turning idle with
// attention owed is offered it again.
func (s *Session) SetOwnerState(owner string, busy bool) {
	s.att.mu.Lock()
	m := s.att.marks(owner)
	turnedIdle := m.busy && !busy
	m.busy = busy
	wake := turnedIdle && len(m.owed) > 0
	m.due = m.due || wake
	s.att.mu.Unlock()
	if wake {
		s.m.events.Wake(s, owner)
	}
}

// Attend marks the deliveries ids as seen by owner (its model read them in
// a turn): they are owed no more. It returns how many were owed.
func (s *Session) Attend(owner string, ids []string) int {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	m := s.att.marks(owner)
	n := 0
	kept := m.owed[:0]
	for _, it := range m.owed {
		if slices.Contains(ids, it.id) {
			n++
			continue
		}
		kept = append(kept, it)
	}
	m.owed = kept
	return n
}

// RetireBegin snapshots the frontier of a retirement: what is owed (or
// made, still to become durable) up to it. Nothing changes until the
// commit.
func (s *Session) RetireBegin() uint64 {
	s.att.mu.Lock()
	defer s.att.mu.Unlock()
	return s.att.clock
}

// RetireCommit retires everything owner owes up to frontier, including
// results made by then whose delivery is not durable yet; what came after
// it stays owed. Monitors keep running. The retirement is journaled.
func (s *Session) RetireCommit(owner string, frontier uint64) (int, error) {
	s.att.mu.Lock()
	if frontier > s.att.clock {
		s.att.mu.Unlock()
		return 0, fault.New(fault.InvalidParams, "frontier %d is ahead of the session's attention (%d): take it from a begin", frontier, s.att.clock)
	}
	m := s.att.marks(owner)
	retired := []string{}
	kept := m.owed[:0]
	for _, it := range m.owed {
		if it.seq <= frontier {
			retired = append(retired, it.id)
			continue
		}
		kept = append(kept, it)
	}
	m.owed = kept
	m.retiredTo = max(m.retiredTo, frontier)
	s.att.mu.Unlock()
	s.journal.Append(transcript.Record{
		Type: transcript.TypeRetire, Owner: owner,
		Attrs: map[string]any{"frontier": frontier, "deliveryIds": retired},
	})
	return len(retired), nil
}

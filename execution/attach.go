package execution

import (
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// A daemon's sessions outlive the connections that opened them: a later
// session/open of the same state directory attaches to the live session
// instead of recovering it, and results wait in the mailbox until a
// client that takes them (the agent client) is attached.

// Attach returns the open session id when its state directory is
// stateDir, with what session/open answers an attaching client: the same
// idPrefix, its live executions, and Attached set. ok is false when no
// session holds id or stateDir (then the caller opens it). A state
// directory open under another id, or id open on another directory, is a
// conflict: both would claim the same journal.
func (m *Manager) Attach(id, stateDir string) (sess *Session, info SessionInfo, ok bool, err error) {
	if !filepath.IsAbs(stateDir) {
		return nil, SessionInfo{}, false, fault.New(fault.InvalidParams, "stateDir must be an absolute path, got %q", stateDir)
	}
	stateDir = filepath.Clean(stateDir)
	m.mu.Lock()
	if m.down {
		m.mu.Unlock()
		return nil, SessionInfo{}, false, fault.New(fault.Unavailable, "the helper is shutting down")
	}
	s := m.sessions[id]
	if s == nil {
		for other, o := range m.sessions {
			if o.stateDir.Root == stateDir {
				m.mu.Unlock()
				return nil, SessionInfo{}, false, fault.New(fault.Conflict, "state directory %s is open as session %q; open it with that sessionId", stateDir, other)
			}
		}
		m.mu.Unlock()
		return nil, SessionInfo{}, false, nil
	}
	m.mu.Unlock()
	if s.stateDir.Root != stateDir {
		return nil, SessionInfo{}, false, fault.New(fault.Conflict, "session %s is already open on %s", id, s.stateDir.Root)
	}
	return s, SessionInfo{
		SessionID: id, StateDir: s.stateDir.Root, IDPrefix: s.prefix, Recovered: []Facts{},
		Journal: s.journal.Health(), Attached: true, Live: s.Live(), Target: s.Target(),
	}, true, nil
}

// Sessions returns the open sessions, by id.
func (m *Manager) Sessions() []*Session {
	m.mu.Lock()
	out := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.id, b.id) })
	return out
}

// StateDir returns the session's state directory.
func (s *Session) StateDir() string { return s.stateDir.Root }

// IDPrefix returns the prefix of this open's execution ids.
func (s *Session) IDPrefix() string { return s.prefix }

// Pending returns how many deliveries wait for their durable ack.
func (s *Session) Pending() int {
	s.mail.mu.Lock()
	defer s.mail.mu.Unlock()
	return len(s.mail.order)
}

// Recent returns the facts of every execution the session still holds,
// the settled ones it retains included, visible to c, in exec/list order.
func (s *Session) Recent(c Caller) []Facts {
	s.mu.Lock()
	execs := make([]*Execution, 0, len(s.execs))
	for _, e := range s.execs {
		if c.sees(e.owner) {
			execs = append(execs, e)
		}
	}
	s.mu.Unlock()
	out := make([]Facts, 0, len(execs))
	digests := map[string]uint64{}
	for _, e := range execs {
		out = append(out, e.factsWith(digests))
	}
	sortFacts(out)
	return out
}

// AgentAttached follows the session's agent client: without one the
// mailbox holds its deliveries; when one attaches every pending delivery
// goes to it at once (same deliveryId) and a wake owed while nobody
// could take it is offered again.
func (s *Session) AgentAttached(up bool) {
	s.mail.setConnected(up)
	if !up {
		return
	}
	s.mail.resendNow()
	s.att.mu.Lock()
	var due []string
	for owner, m := range s.att.owners {
		if m.due && !m.busy && len(m.owed) > 0 {
			due = append(due, owner)
		}
	}
	s.att.mu.Unlock()
	for _, owner := range due {
		s.m.events.Wake(s, owner)
	}
}

// resendNow makes every parcel not in flight due now, rather than after
// its backoff: a client has just attached to take them.
func (mb *mailbox) resendNow() {
	now := time.Now()
	mb.mu.Lock()
	for _, p := range mb.order {
		if !p.inFlight {
			p.due = now
		}
	}
	mb.mu.Unlock()
	mb.poke()
}

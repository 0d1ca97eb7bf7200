package rpc

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

// peer is one connection being served.
type peer struct {
	conn *jsonrpc2.Conn
	st   *Stream

	mu      sync.Mutex
	waiting map[jsonrpc2.ID]context.CancelCauseFunc // guarded by mu; cancellable requests
	gone    bool                                    // guarded by mu; no longer served
}

func (p *peer) isGone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone
}

// attachment is who has a session open on a daemon: at most one agent
// client, which takes its deliveries and wakes, and observers.
type attachment struct {
	agent     *peer
	observers map[*peer]bool
}

// served returns the connections served now.
func (s *Server) served() []*peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		out = append(out, p)
	}
	return out
}

// leave forgets a connection that ended. Its waiting requests are
// cancelled (nobody reads their replies); on a daemon it leaves every
// session it had open, which go on: an agent's results wait in the
// mailbox for the next agent client.
func (s *Server) leave(p *peer) {
	p.mu.Lock()
	p.gone = true
	for id, cancel := range p.waiting {
		cancel(errDisconnected)
		delete(p.waiting, id)
	}
	p.mu.Unlock()
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	s.mu.Lock()
	delete(s.peers, p.conn)
	var orphaned []string
	for sid, a := range s.attached {
		delete(a.observers, p)
		if a.agent == p {
			a.agent = nil
			orphaned = append(orphaned, sid)
		}
		if a.agent == nil && len(a.observers) == 0 {
			delete(s.attached, sid)
		}
	}
	s.mu.Unlock()
	for _, sid := range orphaned {
		if sess, err := s.mgr.Session(sid); err == nil {
			sess.AgentAttached(false)
		}
	}
}

// attachTo records p in session sess with role. An agent replaces the
// agent before it (a restarted Emacs whose old connection has not yet
// been noticed gone), which is then an observer; the mailbox then takes
// back what was in flight to that one and sends every pending delivery to
// p. Changes of a session's agent and of its mailbox are made together,
// under attachMu, so a leaving agent's disconnect cannot land after a new
// agent's attach.
func (s *Server) attachTo(p *peer, sess *execution.Session, role string) {
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	if s.attach(p, sess.ID(), role) {
		sess.AgentAttached(false)
		sess.AgentAttached(true)
	}
}

// attach records p in session sid with role and reports whether the
// session's agent changed. The caller holds attachMu.
func (s *Server) attach(p *peer, sid, role string) (agentChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.attached[sid]
	if a == nil {
		a = &attachment{observers: map[*peer]bool{}}
		s.attached[sid] = a
	}
	if role == RoleObserver {
		if a.agent != p {
			a.observers[p] = true
		}
		return false
	}
	delete(a.observers, p)
	if a.agent == p {
		return false
	}
	if a.agent != nil {
		a.observers[a.agent] = true
	}
	a.agent = p
	return true
}

// detach takes p out of session sid (an observer's session/close).
func (s *Server) detach(p *peer, sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.attached[sid]; a != nil {
		delete(a.observers, p)
		if a.agent == nil && len(a.observers) == 0 {
			delete(s.attached, sid)
		}
	}
}

// roleIn returns p's role in session sid on a daemon, "" when p has not
// opened it. Off a daemon the one client is the agent of every session.
func (s *Server) roleIn(p *peer, sid string) string {
	if !s.daemon {
		return RoleAgent
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.attached[sid]
	switch {
	case a == nil:
		return ""
	case a.agent == p:
		return RoleAgent
	case a.observers[p]:
		return RoleObserver
	}
	return ""
}

func checkRole(role string) error {
	switch role {
	case "", RoleAgent, RoleObserver:
		return nil
	}
	return fault.New(fault.InvalidParams, `role must be "agent", "observer" or absent, got %q`, role)
}

// noteSession returns the session a notification is about, and whether
// only the session's agent client takes it (deliveries and wakes).
func noteSession(params any) (sid string, agentOnly bool) {
	switch v := params.(type) {
	case execution.Delivery:
		return v.SessionID, true
	case WakeParams:
		return v.SessionID, true
	case SettledParams:
		return v.SessionID, false
	case ProgressParams:
		return v.SessionID, false
	case ChangedParams:
		return v.SessionID, false
	case OutputParams:
		return v.SessionID, false
	case DeliveredParams:
		return v.SessionID, false
	}
	return "", false
}

// targets returns the connections a notification goes to: off a daemon
// the one client; on a daemon the clients of its session (deliveries and
// wakes to its agent client only).
func (s *Server) targets(params any) []*peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.daemon {
		out := make([]*peer, 0, 1)
		for _, p := range s.peers {
			out = append(out, p)
		}
		return out
	}
	sid, agentOnly := noteSession(params)
	a := s.attached[sid]
	if a == nil {
		return nil
	}
	out := make([]*peer, 0, 1+len(a.observers))
	if a.agent != nil {
		out = append(out, a.agent)
	}
	if !agentOnly {
		for p := range a.observers {
			out = append(out, p)
		}
	}
	return out
}

// route is the forwarder's send.
func (s *Server) route(method string, params any) {
	for _, p := range s.targets(params) {
		_ = p.st.writeNotification(method, params)
	}
}

// behind reports whether a client is behind: progress is then dropped.
func (s *Server) behind() bool {
	for _, p := range s.served() {
		if p.st.behind() {
			return true
		}
	}
	return false
}

// waitRoom waits until every client can take a message (a client that
// stays stuck is disconnected by its stream's stall timeout).
func (s *Server) waitRoom() {
	for _, p := range s.served() {
		p.st.waitRoom()
	}
}

// takesWake reports whether a wake for sess has a client to go to.
func (s *Server) takesWake(sess *execution.Session) bool {
	if !s.daemon {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.attached[sess.ID()]
	return a != nil && a.agent != nil
}

func (s *Server) daemonStatus(req *jsonrpc2.Request, r *reply) {
	if err := decode(req, &struct{}{}); err != nil {
		r.fail(err)
		return
	}
	sessions := s.mgr.Sessions()
	res := DaemonStatusResult{Pid: os.Getpid(), ServerVersion: ServerVersion, ProtocolVersion: ProtocolVersion, Daemon: s.daemon, Sessions: []DaemonSession{}}
	s.mu.Lock()
	res.Clients = len(s.peers)
	agents := map[string]bool{}
	observers := map[string]int{}
	for sid, a := range s.attached {
		agents[sid] = a.agent != nil
		observers[sid] = len(a.observers)
	}
	s.mu.Unlock()
	for _, sess := range sessions {
		sid := sess.ID()
		res.Sessions = append(res.Sessions, DaemonSession{
			SessionID: sid, StateDir: sess.StateDir(), IDPrefix: sess.IDPrefix(),
			Agent: agents[sid] || !s.daemon, Observers: observers[sid],
			Live: len(sess.Live()), Pending: sess.Pending(),
		})
	}
	r.ok(res)
}

// idle reports whether a daemon may exit: no client, and nothing any
// session runs or still has to deliver.
func (s *Server) idle() bool {
	s.mu.Lock()
	clients := len(s.peers)
	s.mu.Unlock()
	if clients > 0 {
		return false
	}
	for _, sess := range s.mgr.Sessions() {
		if len(sess.Live()) > 0 || sess.Pending() > 0 {
			return false
		}
	}
	return true
}

// firstClientGrace is how long a daemon no client has come to yet stays
// however short its idle period.
const firstClientGrace = 30 * time.Second

// ServeDaemon serves every client of l at once until the idle period
// passes with no client and nothing running or waiting to be delivered
// (idle 0: never), Stop's shutdown has finished, or accepting fails.
// Only clients of this process's uid are served; others are refused with
// an error response (-32005). Sessions belong to the server: a client
// that leaves leaves them running. l is closed on return.
func (s *Server) ServeDaemon(l net.Listener, idle time.Duration) error {
	if !s.daemon {
		return fmt.Errorf("ServeDaemon needs a server made with Options.Daemon")
	}
	defer l.Close()
	var conns sync.WaitGroup
	accepted := make(chan error, 1)
	// A new daemon waits for its first client (its starter connects
	// next) before an idle period counts.
	var came atomic.Bool
	firstBy := time.Now().Add(max(idle, firstClientGrace))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				accepted <- err
				return
			}
			if why := peerRefusal(c); why != "" {
				go refuse(c, why, s.logger)
				continue
			}
			came.Store(true)
			conns.Add(1)
			go func() {
				defer conns.Done()
				s.serveConn(c, c, c, false)
				c.Close()
			}()
		}
	}()
	var tick <-chan time.Time
	if idle > 0 {
		t := time.NewTicker(min(max(idle/4, 10*time.Millisecond), 5*time.Second))
		defer t.Stop()
		tick = t.C
	}
	var idleSince time.Time
loop:
	for {
		select {
		case err := <-accepted:
			s.logger.Printf("rpc: accepting clients: %v; shutting down", err)
			break loop
		case <-s.stopped:
			break loop
		case <-s.downDone: // a client's shutdown request: the daemon ends
			break loop
		case <-s.aborted:
			break loop
		case now := <-tick:
			switch {
			case !came.Load() && now.Before(firstBy), !s.idle():
				idleSince = time.Time{}
			case idleSince.IsZero():
				idleSince = now
			case now.Sub(idleSince) >= idle:
				s.logger.Printf("no client and nothing running for %v; exiting", idle)
				break loop
			}
		}
	}
	l.Close()
	err := s.finish()
	// A client that came at the last moment is told by its end of input.
	for _, p := range s.served() {
		_ = p.conn.Close()
	}
	conns.Wait()
	return err
}

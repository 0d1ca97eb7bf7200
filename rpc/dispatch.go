package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

// The method table and what every handler shares: the read loop's
// dispatch (requests held back until the session they name has opened),
// strict decoding, authority, and the role checks of a daemon's clients.
// The handlers themselves are in methods.go, mailbox.go, transcript.go,
// unknown.go, portforward.go and follow.go; the connection and the
// server's life in server.go.

// maxWaitMs caps waits so a huge value cannot overflow a duration: a
// year, as good as forever.
const maxWaitMs = 365 * 24 * 3600 * 1000

// maxTimeoutMs bounds timeoutMs the same way: a year is as good as none.
const maxTimeoutMs = maxWaitMs

// Handle implements jsonrpc2.Handler. It runs on the read loop.
func (s *Server) Handle(_ context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	s.loop.Lock()
	defer s.loop.Unlock()
	s.mu.Lock()
	p := s.peers[conn]
	s.mu.Unlock()
	if p == nil {
		return // a connection given up: nobody reads its replies
	}
	if s.holdBack(p, req) {
		return
	}
	s.dispatch(p, req)
}

// dispatch handles one request; the caller holds loop.
func (s *Server) dispatch(pr *peer, req *jsonrpc2.Request) {
	if req.Notif {
		if req.Method == MethodCancelRequest {
			var p CancelParams
			if decode(req, &p) == nil {
				pr.mu.Lock()
				cancel := pr.waiting[p.ID]
				pr.mu.Unlock()
				if cancel != nil {
					cancel(errCancelled)
				}
			}
			return
		}
		s.logger.Printf("rpc: ignoring notification %q", req.Method)
		return
	}
	r := &reply{s: s, p: pr, id: req.ID}
	defer func() {
		if v := recover(); v != nil {
			s.logger.Printf("rpc: BUG: panic handling %s: %v", req.Method, v)
			r.fail(errors.New("internal error"))
		}
	}()
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down && req.Method != MethodShutdown {
		r.fail(fault.New(fault.Unavailable, "the helper is shutting down"))
		return
	}
	h, ok := handlers[req.Method]
	if !ok {
		r.fail(fault.New(kindNoMethod, "method not found: %s", req.Method))
		return
	}
	h(s, req, r)
}

// holdBack keeps back, while a session/open runs off the loop, what
// must not overtake it: a request that names that session, a cancel of a
// request kept back, and a shutdown, which waits for everything before it
// (and keeps back everything after it). releaseHeld handles them, in
// arrival order, once the open has answered: as if the open had been
// handled on the loop. Requests for other sessions go on meanwhile. The
// caller holds loop.
func (s *Server) holdBack(p *peer, req *jsonrpc2.Request) bool {
	if len(s.opening) == 0 && len(s.held) == 0 {
		return false
	}
	h := held{peer: p, req: req}
	hold := slices.ContainsFunc(s.held, func(h held) bool { return h.all })
	switch {
	case hold:
	case req.Method == MethodShutdown && !req.Notif:
		hold, h.all = true, true
	case req.Notif && req.Method == MethodCancelRequest:
		var p CancelParams
		if decode(req, &p) == nil {
			for _, k := range s.held {
				if !k.req.Notif && k.req.ID == p.ID && k.peer == h.peer {
					hold, h.sid = true, k.sid
				}
			}
		}
	case req.Params != nil:
		var p struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(*req.Params, &p) == nil && s.opening[p.SessionID] {
			hold, h.sid = true, p.SessionID
		}
	}
	if hold {
		s.held = append(s.held, h)
	}
	return hold
}

// releaseHeld marks the open of session sid answered and handles what no
// longer has to wait, in arrival order.
func (s *Server) releaseHeld(sid string) {
	s.loop.Lock()
	defer s.loop.Unlock()
	delete(s.opening, sid)
	q := s.held
	s.held = nil
	blocked := false // a shutdown waits: everything after it too
	for _, h := range q {
		switch {
		case blocked, h.sid != "" && s.opening[h.sid]:
			// A held open of the same id runs in turn; what names it waits.
		case h.all && (len(s.opening) > 0 || len(s.held) > 0):
			blocked = true
		default:
			if !h.peer.isGone() {
				s.dispatch(h.peer, h.req)
			}
			continue
		}
		s.held = append(s.held, h)
	}
}

type handler func(s *Server, req *jsonrpc2.Request, r *reply)

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		MethodInitialize:    (*Server).initialize,
		MethodShutdown:      (*Server).shutdownRequest,
		MethodSessionOpen:   (*Server).sessionOpen,
		MethodSessionClose:  (*Server).sessionClose,
		MethodExecStart:     (*Server).execStart,
		MethodExecObserve:   (*Server).execObserve,
		MethodExecStop:      (*Server).execStop,
		MethodExecInterrupt: (*Server).execInterrupt,
		MethodExecList:      (*Server).execList,
		MethodExecStopAll:   (*Server).execStopAll,
		MethodExecAnalyze:   (*Server).execAnalyze,
		MethodSpoolRead:     (*Server).spoolRead,
		MethodSpoolGrep:     (*Server).spoolGrep,
		MethodSpoolGlob:     (*Server).spoolGlob,
		MethodSpoolStat:     (*Server).spoolStat,
		MethodMonitorStart:  (*Server).monitorStart,
		MethodMonitorStop:   (*Server).monitorStop,
		MethodMonitorList:   (*Server).monitorList,
		MethodOwnerState:    (*Server).ownerState,
		MethodOwnerRetire:   (*Server).ownerRetire,
		MethodOwnerAttend:   (*Server).ownerAttend,
		MethodMailboxAck:    (*Server).mailboxAck,
		MethodDaemonStatus:  (*Server).daemonStatus,
		MethodExecForward:   (*Server).execForward,
		MethodExecUnforward: (*Server).execUnforward,
		MethodExecFollow:    (*Server).execFollow,

		MethodTranscriptRecords:         (*Server).transcriptRecords,
		MethodTranscriptCheckpoint:      (*Server).transcriptCheckpoint,
		MethodSessionCanRewind:          (*Server).sessionCanRewind,
		MethodSessionUnknownOutcome:     (*Server).sessionUnknownOutcome,
		MethodSessionAcknowledgeUnknown: (*Server).sessionAcknowledgeUnknown,
	}
}

// decode reads params strictly: unknown fields are an error, so a typo
// never silently falls back to a default. Every string is then checked
// against its bound (limits.go).
func decode(req *jsonrpc2.Request, v any) error {
	if req.Params == nil || bytes.Equal(bytes.TrimSpace(*req.Params), []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(*req.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if why := numberBounds(err); why != "" {
			return fault.New(fault.InvalidParams, "invalid params for %s: %s", req.Method, why)
		}
		return fault.New(fault.InvalidParams, "invalid params for %s: %w", req.Method, err)
	}
	return checkBounds(v)
}

func caller(a Authority) (execution.Caller, error) {
	switch a.As {
	case "":
		return execution.Caller{Owner: a.Owner}, nil
	case "user":
		return execution.Caller{Owner: a.Owner, User: true}, nil
	}
	return execution.Caller{}, fault.New(fault.InvalidParams, `as must be "user" or absent, got %q`, a.As)
}

func (s *Server) session(id string) (*execution.Session, error) {
	if id == "" {
		return nil, fault.New(fault.InvalidParams, "sessionId is required")
	}
	return s.mgr.Session(id)
}

// prepare decodes params into p and resolves the caller (from auth) and
// the session (from sid), which point into p. On failure it replies and
// returns ok false.
func (s *Server) prepare(req *jsonrpc2.Request, r *reply, p any, auth *Authority, sid *string) (c execution.Caller, sess *execution.Session, ok bool) {
	err := decode(req, p)
	if err == nil {
		c, err = caller(*auth)
	}
	if err == nil {
		sess, err = s.session(*sid)
	}
	if err == nil {
		switch s.roleIn(r.p, *sid) {
		case "":
			err = fault.New(fault.NotFound, "session %q is not open on this connection: session/open it first (role observer to watch it)", *sid)
		case RoleObserver:
			c.User = true // an observer is the person at another client
			err = observerMay(req.Method, *sid, auth.As)
		}
	}
	if err != nil {
		r.fail(err)
		return c, nil, false
	}
	return c, sess, true
}

// prepareSession is prepare for the methods that take no authority: the
// session's own bookkeeping (acks, owner state, the journal).
func (s *Server) prepareSession(req *jsonrpc2.Request, r *reply, p any, sid *string) (*execution.Session, bool) {
	var none Authority
	_, sess, ok := s.prepare(req, r, p, &none, sid)
	return sess, ok
}

// agentOnly are what a daemon's observer (a panel, the command line) may
// not do: take the agent's deliveries or speak for the model's owners,
// which would swallow results the agent never gets. A start or monitor
// (true) is allowed as the person, with as: "user".
var agentOnly = map[string]bool{
	MethodMailboxAck: false, MethodOwnerRetire: false, MethodOwnerAttend: false, MethodOwnerState: false,
	MethodExecStart: true, MethodMonitorStart: true,
}

// observerMay refuses what agentOnly reserves for the agent client.
func observerMay(method, sid, as string) error {
	asUser, reserved := agentOnly[method]
	switch {
	case !reserved, asUser && as == "user":
		return nil
	case asUser:
		return fault.New(fault.NotFound, "%s as a model owner is not allowed for role observer in session %q: an observer starts only with as \"user\"; a model owner's start belongs to the session's agent client", method, sid)
	}
	return fault.New(fault.NotFound, "%s is not allowed for role observer in session %q: only the session's agent client takes deliveries and speaks for its owners", method, sid)
}

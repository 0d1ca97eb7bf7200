package rpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/execution/analyze"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

// Server dispatches requests in arrival order. Its handler never blocks:
// requests that wait (start with yield, observe with wait, stop, close,
// shutdown) or read much (open, spool reads, globs, journal records) hand
// their reply to a goroutine that the session or the server owns, and every
// request gets exactly one reply.
type Server struct {
	logger     *log.Logger
	stall      time.Duration
	mgr        *execution.Manager
	fwd        *forwarder
	instanceID string
	// daemon: many clients at once, and sessions outlive them
	// (ServeDaemon); otherwise one client at a time gets everything.
	daemon bool
	wg     sync.WaitGroup // server-owned goroutines

	// loop is held while a request is dispatched: on the read loop, or
	// when the requests held back for an opening session are let through.
	// A shutdown begun outside the loop takes it once before it waits for
	// the sessions, so no handler that began earlier still holds one.
	loop    sync.Mutex
	opening map[string]bool // guarded by loop; sessions whose open runs off the loop
	held    []held          // guarded by loop; what waits for them, in arrival order

	// attachMu orders changes of a session's agent with its mailbox's
	// (attachTo, leave); taken before mu.
	attachMu sync.Mutex

	mu       sync.Mutex
	peers    map[*jsonrpc2.Conn]*peer    // guarded by mu; the connections served now
	attached map[string]*attachment      // guarded by mu; daemon: who has each session open
	down     bool                        // guarded by mu; shutdown has begun
	sessions map[*execution.Session]bool // guarded by mu; opened, not yet ended
	downDone chan struct{}               // closed once, when shutdown finished

	stopped   chan struct{} // closed once Stop's shutdown has finished
	stopOnce  sync.Once
	aborted   chan struct{} // closed by Abort
	abortOnce sync.Once
}

// held is a request kept back until the open of the session it names
// has answered.
type held struct {
	peer *peer
	req  *jsonrpc2.Request
	sid  string // the session it waits for
	all  bool   // a shutdown: it waits for every open, and everything after it waits for it
}

// Options configure a Server.
type Options struct {
	Logger *log.Logger // nil: stderr
	// StallTimeout is how long a client may take no byte of output while
	// some waits for it before it is disconnected (0: DefaultStallTimeout).
	StallTimeout time.Duration
	// Daemon serves many clients at once (ServeDaemon): a session belongs
	// to the helper, results go to its agent client, and a client that
	// leaves leaves its sessions running.
	Daemon bool
	// Hidden are control paths of this helper that every confined
	// command is kept from besides the defaults (its --listen socket).
	Hidden []string
}

// ErrAborted says the server stopped serving without waiting for its
// executions to end (Abort).
var ErrAborted = errors.New("aborted before every execution ended")

// NewServer returns a server; Serve or ServeListener serve it.
func NewServer(o Options) *Server {
	if o.Logger == nil {
		o.Logger = log.New(os.Stderr, "mevedel-exec: ", log.LstdFlags)
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	s := &Server{
		logger:     o.Logger,
		stall:      o.StallTimeout,
		instanceID: newInstanceID(),
		daemon:     o.Daemon,
		opening:    map[string]bool{},
		peers:      map[*jsonrpc2.Conn]*peer{},
		attached:   map[string]*attachment{},
		sessions:   map[*execution.Session]bool{},
		downDone:   make(chan struct{}),
		stopped:    make(chan struct{}),
		aborted:    make(chan struct{}),
	}
	s.fwd = newForwarder(s.route, s.behind, s.waitRoom)
	s.fwd.takes = s.takesWake
	s.mgr = execution.NewManager(s.fwd)
	s.mgr.Hide(o.Hidden...)
	if s.daemon {
		// A session's results wait for its agent client.
		s.mgr.SetConnected(false)
	}
	return s
}

// Serve speaks the protocol on r/w until r reaches EOF, a frame header
// cannot be read past, a write to w fails or stalls, or Stop's shutdown
// has finished. Ending the connection is a shutdown: unless the server is
// aborted, every live execution has ended as session-ended when it
// returns.
func (s *Server) Serve(r io.Reader, w io.Writer) error {
	s.serveConn(r, w, nil, false)
	return s.finish()
}

// Stop makes the shutdown the shutdown request makes, from outside the
// read loop, and once it has finished stops serving. It does not wait.
func (s *Server) Stop() {
	wait := s.beginShutdown(true)
	// Not server-owned: finish may already be waiting for those.
	go func() {
		wait()
		s.stopOnce.Do(func() { close(s.stopped) })
	}()
}

// Done is closed once the shutdown has finished.
func (s *Server) Done() <-chan struct{} { return s.downDone }

// Abort stops serving at once, without waiting for the shutdown or for
// the client to take what waits for it.
func (s *Server) Abort() {
	s.abortOnce.Do(func() { close(s.aborted) })
	for _, p := range s.served() {
		p.st.out.fail(ErrAborted)
	}
}

// Live returns the facts of every live execution of every session, those
// of sessions being closed included.
func (s *Server) Live() []execution.Facts {
	s.mu.Lock()
	sessions := make([]*execution.Session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	var out []execution.Facts
	for _, sess := range sessions {
		out = append(out, sess.Live()...)
	}
	return out
}

// serveConn serves one connection until it ends. Requests still waiting
// then are cancelled: nobody is left to read their replies. A client that
// reattaches gets the pending deliveries again, once notifications reach
// it: a resend made before would go nowhere and wait out its ack timeout.
func (s *Server) serveConn(r io.Reader, w io.Writer, closer io.Closer, reattached bool) {
	var conn *jsonrpc2.Conn
	ready := make(chan struct{})
	st := newStream(r, w, closer, s.logger, s.stall, func(err error) {
		<-ready
		s.logger.Printf("rpc: %v; disconnecting the client", err)
		_ = conn.Close()
	})
	st.hold()
	conn = jsonrpc2.NewConn(context.Background(), st, s, jsonrpc2.SetLogger(s.logger), st.AttachParams())
	close(ready)
	p := &peer{conn: conn, st: st, waiting: map[jsonrpc2.ID]context.CancelCauseFunc{}}
	s.mu.Lock()
	s.peers[conn] = p
	s.mu.Unlock()
	st.release() // the handler knows its connection before the first request
	if reattached {
		s.mgr.SetConnected(true)
	}
	select {
	case <-conn.DisconnectNotify():
	case <-s.stopped:
		// What the shutdown announced goes out before the connection ends.
		flushed := make(chan struct{})
		s.fwd.after(func() { close(flushed) })
		select {
		case <-flushed:
		case <-s.aborted:
		}
		_ = conn.Close()
	case <-s.aborted:
		st.out.fail(ErrAborted) // what waits for the client is dropped
		_ = conn.Close()
	}
	s.leave(p)
}

// finish shuts everything down and waits for it, unless aborted.
func (s *Server) finish() error {
	wait := s.beginShutdown(true)
	done := make(chan struct{})
	go func() {
		wait()
		// The connection is gone, so no handler starts any more; one under
		// way when it went may still start a server-owned goroutine.
		s.loop.Lock()
		s.loop.Unlock() // a barrier: wait for the holder, hold nothing
		s.mgr.CloseRemote()
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-s.aborted:
		return ErrAborted
	}
	s.fwd.close()
	return nil
}

func newInstanceID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	const hex = "0123456789abcdef"
	out := make([]byte, 16)
	for i, c := range b {
		out[2*i], out[2*i+1] = hex[c>>4], hex[c&15]
	}
	return string(out)
}

// beginShutdown stops taking requests and detaches every session at once,
// so nothing behind the shutdown is served; the returned function waits
// until everything has ended (every caller waits for the first). outside
// says it is called off the read loop.
func (s *Server) beginShutdown(outside bool) (wait func()) {
	s.mu.Lock()
	first := !s.down
	s.down = true
	s.mu.Unlock()
	if !first {
		return func() { <-s.downDone }
	}
	sessions := s.mgr.BeginShutdown()
	return func() {
		if outside {
			// A handler that began before down was set may still be
			// using a session; those after it see down.
			s.loop.Lock()
			s.loop.Unlock() // a barrier: wait for the holder, hold nothing
		}
		for _, sess := range sessions {
			sess.Wait()
			s.untrack(sess)
		}
		close(s.downDone)
	}
}

func (s *Server) track(sess *execution.Session) {
	s.mu.Lock()
	s.sessions[sess] = true
	s.mu.Unlock()
}

func (s *Server) untrack(sess *execution.Session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
}

// reply answers one request exactly once.
type reply struct {
	s    *Server
	p    *peer // the connection the request came on
	id   jsonrpc2.ID
	sent atomic.Bool
}

func (r *reply) ok(result any) { r.send(result, nil) }

func (r *reply) fail(err error) { r.send(nil, err) }

func (r *reply) observation(o execution.Observation) { r.ok(o) }

// answer replies with result, or with err when there is one.
func (r *reply) answer(result any, err error) {
	if err != nil {
		r.fail(err)
		return
	}
	r.ok(result)
}

func (r *reply) send(result any, err error) {
	if !r.sent.CompareAndSwap(false, true) {
		r.s.logger.Printf("rpc: BUG: second reply to request %s dropped", r.id)
		return
	}
	r.p.mu.Lock()
	delete(r.p.waiting, r.id)
	r.p.mu.Unlock()
	if err != nil {
		_ = r.p.conn.ReplyWithError(notifyCtx, r.id, toError(err))
		return
	}
	if result == nil {
		result = Empty{}
	}
	_ = r.p.st.writeResult(r.id, result)
}

// cancellable registers the request so $/cancelRequest can reach it.
func (r *reply) cancellable() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	r.p.mu.Lock()
	if r.p.gone {
		cancel(errDisconnected)
	} else {
		r.p.waiting[r.id] = cancel
	}
	r.p.mu.Unlock()
	return ctx
}

// maxWaitMs caps waits so a huge value cannot overflow a duration: a
// year, as good as forever.
const maxWaitMs = 365 * 24 * 3600 * 1000

// maxTimeoutMs bounds timeoutMs the same way: a year is as good as none.
const maxTimeoutMs = maxWaitMs

var (
	errCancelled    = errors.New("request cancelled by the client")
	errDisconnected = execution.ErrCallerGone
)

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

func (s *Server) initialize(req *jsonrpc2.Request, r *reply) {
	var p InitializeParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	if p.ProtocolVersion != 0 && p.ProtocolVersion != ProtocolVersion {
		r.fail(fault.New(fault.InvalidParams, "protocol version %d is not supported; this helper speaks version %d", p.ProtocolVersion, ProtocolVersion))
		return
	}
	r.ok(InitializeResult{ServerName: ServerName, ServerVersion: ServerVersion, ProtocolVersion: ProtocolVersion, InstanceID: s.instanceID, Pid: os.Getpid()})
}

func (s *Server) shutdownRequest(req *jsonrpc2.Request, r *reply) {
	wait := s.beginShutdown(false)
	s.goOwned(func() {
		wait()
		r.ok(Empty{})
	})
}

// goOwned runs f on a goroutine the server waits for before it returns.
func (s *Server) goOwned(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Server) sessionOpen(req *jsonrpc2.Request, r *reply) {
	var p SessionOpenParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	if err := execution.CheckRemoteArtifactDir(p.RemoteArtifactDir); err != nil {
		r.fail(err)
		return
	}
	if p.SessionID == "" {
		r.fail(fault.New(fault.InvalidParams, "sessionId is required"))
		return
	}
	if err := execution.CheckDefaults(p.Sandbox, p.Resources); err != nil {
		r.fail(err)
		return
	}
	if err := checkRole(p.Role); err != nil {
		r.fail(err)
		return
	}
	if s.daemon && s.attachOpen(r, p) {
		return
	}
	// An open may replay a long journal and kill what a crashed helper
	// left (up to 3 s): off the loop, with what names the session held
	// back until it has answered.
	sid := p.SessionID
	s.opening[sid] = true
	s.goOwned(func() {
		info, err := s.mgr.Open(sid, p.StateDir, p.Limits)
		if err == nil {
			if sess, serr := s.mgr.Session(sid); serr == nil {
				sess.SetRemoteArtifactDir(p.RemoteArtifactDir)
				sess.SetDefaults(p.Sandbox, p.Resources)
				s.track(sess)
				if s.daemon {
					s.attachTo(r.p, sess, p.Role)
				}
			}
		}
		r.answer(info, err)
		s.releaseHeld(sid)
	})
}

// attachOpen answers a daemon's session/open of a session it has open
// already: the client attaches to it (same idPrefix, its live executions
// listed). An agent client then gets every pending delivery again. It
// reports false when the session is not open (the caller opens it).
func (s *Server) attachOpen(r *reply, p SessionOpenParams) bool {
	sess, info, ok, err := s.mgr.Attach(p.SessionID, p.StateDir)
	if err != nil {
		r.fail(err)
		return true
	}
	if !ok {
		return false
	}
	// A delivery sent to p may come before this reply, as after a
	// recovering open.
	s.attachTo(r.p, sess, p.Role)
	r.ok(info)
	return true
}

func (s *Server) sessionClose(req *jsonrpc2.Request, r *reply) {
	var p SessionCloseParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	if p.SessionID == "" {
		r.fail(fault.New(fault.InvalidParams, "sessionId is required"))
		return
	}
	if s.daemon {
		switch s.roleIn(r.p, p.SessionID) {
		case "":
			r.fail(fault.New(fault.NotFound, "session %q is not open on this connection", p.SessionID))
			return
		case RoleObserver:
			// An observer leaves; the session goes on for the others.
			s.detach(r.p, p.SessionID)
			r.ok(SessionCloseResult{})
			return
		}
	}
	s.mu.Lock()
	att := s.attached[p.SessionID]
	s.mu.Unlock()
	sess, err := s.mgr.Detach(p.SessionID)
	if err != nil {
		r.fail(err)
		return
	}
	s.goOwned(func() {
		sess.Wait()
		s.untrack(sess)
		s.mu.Lock()
		if att != nil && s.attached[p.SessionID] == att {
			delete(s.attached, p.SessionID) // its clients heard its end
		}
		s.mu.Unlock()
		r.ok(SessionCloseResult{Discarded: sess.Discarded()})
	})
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

// prepareAgent is prepareSession for what only the session's agent client
// may do: take deliveries (mailbox/ack) and speak for the model's owners
// (owner/*). An observer (a panel, the command line) that could would
// swallow results its agent never gets.
func (s *Server) prepareAgent(req *jsonrpc2.Request, r *reply, p any, sid *string) (*execution.Session, bool) {
	sess, ok := s.prepareSession(req, r, p, sid)
	if ok && s.roleIn(r.p, *sid) == RoleObserver {
		r.fail(observerRefused(req.Method, *sid))
		return nil, false
	}
	return sess, ok
}

// prepareOwned is prepare for a start: an observer starts only as the
// person (as: "user"), never as one of the model's owners, whose results
// go to the agent client.
func (s *Server) prepareOwned(req *jsonrpc2.Request, r *reply, p any, auth *Authority, sid *string) (execution.Caller, *execution.Session, bool) {
	c, sess, ok := s.prepare(req, r, p, auth, sid)
	if ok && auth.As != "user" && s.roleIn(r.p, *sid) == RoleObserver {
		r.fail(fault.New(fault.NotFound, "%s as a model owner is not allowed for role observer in session %q: an observer starts only with as \"user\"; a model owner's start belongs to the session's agent client", req.Method, *sid))
		return c, nil, false
	}
	return c, sess, ok
}

func observerRefused(method, sid string) error {
	return fault.New(fault.NotFound, "%s is not allowed for role observer in session %q: only the session's agent client takes deliveries and speaks for its owners", method, sid)
}

func (s *Server) execStart(req *jsonrpc2.Request, r *reply) {
	var p ExecStartParams
	c, sess, ok := s.prepareOwned(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	var yield *time.Duration
	if p.YieldMs != nil {
		if *p.YieldMs < 0 {
			r.fail(fault.New(fault.InvalidParams, "yieldMs must not be negative"))
			return
		}
		if *p.YieldMs <= maxWaitMs { // beyond that, as good as waiting for the end
			d := time.Duration(*p.YieldMs) * time.Millisecond
			yield = &d
		}
	}
	var timeout time.Duration
	if p.TimeoutMs != nil {
		if *p.TimeoutMs <= 0 {
			r.fail(fault.New(fault.InvalidParams, "timeoutMs must be positive"))
			return
		}
		timeout = time.Duration(min(*p.TimeoutMs, maxTimeoutMs)) * time.Millisecond
	}
	ctx := r.cancellable()
	sess.StartAndAwait(ctx, c, execution.StartParams{
		Command: p.Command, Argv: p.Argv, Stdin: p.Stdin, Cwd: p.Cwd, TTY: p.TTY, Lane: p.Lane, ReadOnly: p.ReadOnly,
		Env: p.Env, Label: p.Label, ToolUseID: p.ToolUseID, Timeout: timeout, Scratch: p.Scratch, Kind: p.Kind,
		ReadyPattern: p.ReadyPattern, ReadyPort: p.ReadyPort,
		Sandbox: p.Sandbox, Resources: p.Resources,
	}, yield, p.MaxOutputChars, func(o execution.Observation, err error) { r.answer(o, err) })
}

func (s *Server) execObserve(req *jsonrpc2.Request, r *reply) {
	var p ExecObserveParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	if p.WaitMs < 0 {
		r.fail(fault.New(fault.InvalidParams, "waitMs must not be negative"))
		return
	}
	ctx := r.cancellable()
	err := sess.Observe(ctx, c, p.ExecutionID, p.Chars, time.Duration(min(p.WaitMs, maxWaitMs))*time.Millisecond, p.MaxOutputChars,
		func(o execution.Observation, err error) { r.answer(o, err) })
	if err != nil {
		r.fail(err)
	}
}

func (s *Server) execStop(req *jsonrpc2.Request, r *reply) {
	var p ExecStopParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	if err := sess.Stop(c, p.ExecutionID, p.MaxOutputChars, r.observation); err != nil {
		r.fail(err)
	}
}

func (s *Server) execInterrupt(req *jsonrpc2.Request, r *reply) {
	var p ExecInterruptParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	r.answer(sess.Interrupt(c, p.ExecutionID))
}

func (s *Server) execList(req *jsonrpc2.Request, r *reply) {
	var p ExecListParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	// Listed where the reply goes in the stream of notifications: every
	// exec/changed written before it is older than the listing, and any
	// change after it comes in a later one, so a table seeded by the reply
	// and merged with exec/changed stays true.
	s.fwd.after(func() {
		if p.All {
			r.ok(ExecListResult{Executions: sess.Recent(c)})
			return
		}
		bp := listBufs.Get().(*[]execution.Facts)
		facts := sess.AppendList((*bp)[:0], c)
		r.ok(ExecListResult{Executions: facts}) // encoded before it returns
		clear(facts)                            // holds nothing of them in the pool
		*bp = facts[:0]
		listBufs.Put(bp)
	})
}

// listBufs are the room of listings, reused (see Session.AppendList).
var listBufs = sync.Pool{New: func() any { return new([]execution.Facts) }}

func (s *Server) execStopAll(req *jsonrpc2.Request, r *reply) {
	var p ExecStopAllParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.StopAll(c, func(n int) { r.ok(ExecStopAllResult{Stopped: n}) })
}

func (s *Server) execAnalyze(req *jsonrpc2.Request, r *reply) {
	var p ExecAnalyzeParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	// Parsing a long command takes a while: off the loop (decode bounded
	// its length).
	s.goOwned(func() {
		res := analyze.Command(p.Command)
		r.ok(ExecAnalyzeResult{Class: string(res.Class), Reasons: res.Reasons})
	})
}

// Reads and greps may inflate and scan much of a log, a glob lists the
// whole directory and a stat may read an index: they run on a session
// goroutine, never on the read loop. What they see was created by
// requests handled before them.

func (s *Server) spoolRead(req *jsonrpc2.Request, r *reply) {
	var p SpoolReadParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		r.answer(sess.ReadLog(c, p.Address, p.Offset, p.Length, p.Line, p.Lines))
	})
}

func (s *Server) spoolGrep(req *jsonrpc2.Request, r *reply) {
	var p SpoolGrepParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	ctx := r.cancellable()
	sess.Go(func() {
		r.answer(sess.GrepLogs(ctx, c, execution.GrepParams{
			Pattern: p.Pattern, Glob: p.Glob, Addresses: p.Addresses, MaxMatches: p.MaxMatches, Context: p.Context,
		}))
	})
}

func (s *Server) spoolGlob(req *jsonrpc2.Request, r *reply) {
	var p SpoolGlobParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		addrs, err := sess.GlobLogs(c, p.Pattern)
		r.answer(SpoolGlobResult{Addresses: addrs}, err)
	})
}

func (s *Server) spoolStat(req *jsonrpc2.Request, r *reply) {
	var p SpoolStatParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		r.answer(sess.StatLog(c, p.Address))
	})
}

package rpc

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
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
		s.mgr.WaitLoginEnv()
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

var (
	errCancelled    = errors.New("request cancelled by the client")
	errDisconnected = execution.ErrCallerGone
)

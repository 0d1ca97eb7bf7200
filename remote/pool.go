package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Pool keeps SSH connections, one per (user, host, port), shared by every
// execution and operation on that host. A connection whose server refuses
// another channel (sshd's MaxSessions, 10 by default) gets a sibling.
type Pool struct {
	cfg       Config          // immutable
	life      context.Context // ends at Close; bounds dials and captures
	stop      context.CancelFunc
	wg        sync.WaitGroup // keepalive, watcher and dial goroutines
	dials     atomic.Int64   // connections dialled, for tests and logs
	published atomic.Int64   // bytes sent by Publish, for tests
	sessions  atomic.Int64   // session channels opened, for tests

	mu      sync.Mutex
	hosts   map[string]*hostConns  // guarded by mu
	streams map[string]*streamSlot // guarded by mu; by stream target (stream.go)
	engines map[string]*engineSlot // guarded by mu; by container target run through the wrapper (enginewrap.go)
	closed  bool                   // guarded by mu
	// fallbacks is, by host, why its commands went through the wrapper
	// when last reported; guarded by mu.
	fallbacks map[string]string

	resolvedMu sync.Mutex
	resolved   map[Target]resolvedEntry // guarded by resolvedMu; by target without Path

	ready probes // what each target lacks (ready.go)
}

// hostConns are the connections to one (user, host, port).
type hostConns struct {
	mu    sync.Mutex
	conns []*conn   // guarded by mu; live ones, oldest first
	dial  *dialCall // guarded by mu; the dial in flight, shared by callers
}

type dialCall struct {
	done chan struct{} // closed once, when c or err is set
	c    *conn
	err  error
}

// conn is one SSH connection.
type conn struct {
	pool   *Pool
	client *ssh.Client
	key    string

	dead     chan struct{} // closed once, when the transport is gone
	deadOnce sync.Once
	deadErr  error // set before dead is closed

	mu    sync.Mutex
	open  int          // guarded by mu; channels open on this connection
	limit int          // guarded by mu; open when the server last refused one, 0 if never
	sftp  *sftp.Client // guarded by mu; created on first Publish
	home  string       // guarded by mu; the remote home, as sftp found it
	env   *envCall     // guarded by mu; the login environment, captured once
	sb    *standby     // guarded by mu; a wrapper waiting for the next command
	// sbPending is set while a standby is being started; guarded by mu.
	sbPending bool

	ctl controller // the control shell for probes and signals
	ag  agentSlot  // the host agent, when the host runs one
}

// NewPool returns an empty pool; connections are dialled on first use.
func NewPool(cfg Config) *Pool {
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool{cfg: cfg.withDefaults(), life: ctx, stop: cancel, hosts: map[string]*hostConns{}}
}

// Close closes every connection and waits for the pool's goroutines.
// Processes on those connections see their transport end.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	hosts, streams, engines := p.hosts, p.streams, p.engines
	p.hosts, p.streams, p.engines = map[string]*hostConns{}, nil, nil
	p.mu.Unlock()
	p.stop()
	p.closeStreams(streams)
	p.closeEngines(engines)
	for _, h := range hosts {
		h.mu.Lock()
		conns := h.conns
		h.conns = nil
		h.mu.Unlock()
		for _, c := range conns {
			c.kill(errors.New("remote: pool closed"))
		}
	}
	p.wg.Wait()
	return nil
}

var errClosed = unavailable(errors.New("remote: pool closed"))

// spawn runs f on a goroutine that Close waits for; false (and f not run)
// once the pool is closed. Adding under mu keeps every Add before Close's
// Wait.
func (p *Pool) spawn(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

func (p *Pool) host(key string) (*hostConns, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	h := p.hosts[key]
	if h == nil {
		h = &hostConns{}
		p.hosts[key] = h
	}
	return h, nil
}

// channel opens a session channel to r on a pooled connection, dialling
// when there is none or every one is full.
func (p *Pool) channel(ctx context.Context, r resolved) (*conn, ssh.Channel, <-chan *ssh.Request, error) {
	h, err := p.host(r.key())
	if err != nil {
		return nil, nil, nil, err
	}
	for round := 0; ; round++ {
		for _, c := range h.usable() {
			ch, reqs, err := c.openSession()
			if err == nil {
				return c, ch, reqs, nil
			}
			if refusedAsFull(err) {
				continue // openSession remembered it
			}
			var oce *ssh.OpenChannelError
			if errors.As(err, &oce) {
				return nil, nil, nil, fmt.Errorf("remote: %s: opening a session: %w", r.Target, err)
			}
			c.kill(err) // the transport failed under us
		}
		if round == maxDialRounds {
			return nil, nil, nil, unavailablef("remote: %s refuses more sessions", r.Target)
		}
		// Concurrent callers may fill the new connection first: then
		// another round dials again.
		if _, err := p.dialShared(ctx, h, r); err != nil {
			return nil, nil, nil, err
		}
	}
}

// maxDialRounds bounds the connections one request may dial while others
// keep filling them (or a server refuses every session).
const maxDialRounds = 8

// usable lists the live connections not known to be full.
func (h *hostConns) usable() []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*conn
	for _, c := range h.conns {
		c.mu.Lock()
		full := c.limit > 0 && c.open >= c.limit
		c.mu.Unlock()
		if !full && !c.isDead() {
			out = append(out, c)
		}
	}
	return out
}

// Connect makes sure t can be reached: it returns t resolved through
// ~/.ssh/config once a pooled connection to it is up (dialled now if there
// is none), or the reason there is none (ErrUnavailable for a dial,
// handshake, authentication or host key failure).
func (p *Pool) Connect(ctx context.Context, t Target) (Target, error) {
	r, err := p.resolve(t)
	if err != nil {
		return Target{}, unavailable(err)
	}
	if r.Stream() {
		_, err := p.agentFor(ctx, r)
		if errors.Is(err, errNoAgentHere) {
			_, err = p.engineUp(ctx, r) // the wrapper's: the container is there
		}
		if err != nil {
			return Target{}, err
		}
		return r.Target, nil
	}
	if _, err := p.anyConn(ctx, r); err != nil {
		return Target{}, err
	}
	return r.Target, nil
}

// anyConn returns a live connection, dialling one if none is left.
func (p *Pool) anyConn(ctx context.Context, r resolved) (*conn, error) {
	return p.pickConn(ctx, r, func(*conn) bool { return true })
}

// pickConn returns a live connection for which prefer holds, else one
// that can take another session, else a new one.
func (p *Pool) pickConn(ctx context.Context, r resolved, prefer func(*conn) bool) (*conn, error) {
	h, err := p.host(r.key())
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	for _, c := range h.conns {
		if !c.isDead() && prefer(c) {
			h.mu.Unlock()
			return c, nil
		}
	}
	h.mu.Unlock()
	if usable := h.usable(); len(usable) > 0 {
		return usable[0], nil
	}
	return p.dialShared(ctx, h, r)
}

// withSession runs f on a connection chosen by pickConn, moving on to
// another one when f's session is refused as one too many.
func (p *Pool) withSession(ctx context.Context, r resolved, prefer func(*conn) bool, f func(*conn) error) error {
	var err error
	for round := 0; round <= maxDialRounds; round++ {
		var c *conn
		if c, err = p.pickConn(ctx, r, prefer); err != nil {
			return err
		}
		if err = f(c); !retryable(err) {
			return err
		}
	}
	return unavailablef("remote: %s: no connection took the request: %w", r.Target, err)
}

// dialShared dials a new connection for h, or joins the dial in flight.
// The dial itself is bounded by DialTimeout and the pool's life, not by
// ctx, since other callers may be waiting for it too.
func (p *Pool) dialShared(ctx context.Context, h *hostConns, r resolved) (*conn, error) {
	h.mu.Lock()
	d := h.dial
	if d == nil {
		d = &dialCall{done: make(chan struct{})}
		started := p.spawn(func() {
			c, err := p.dial(r)
			var late *conn
			h.mu.Lock()
			if err == nil {
				if p.life.Err() != nil {
					late, c, err = c, nil, errClosed
				} else {
					h.conns = append(h.conns, c)
				}
			}
			d.c, d.err = c, err
			h.dial = nil
			h.mu.Unlock()
			if late != nil {
				late.kill(errors.New("remote: pool closed"))
			}
			close(d.done)
		})
		if !started {
			h.mu.Unlock()
			return nil, errClosed
		}
		h.dial = d
	}
	h.mu.Unlock()
	select {
	case <-d.done:
		return d.c, d.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// remove forgets a dead connection.
func (p *Pool) remove(c *conn) {
	p.mu.Lock()
	h := p.hosts[c.key]
	p.mu.Unlock()
	if h == nil {
		return
	}
	h.mu.Lock()
	for i, x := range h.conns {
		if x == c {
			h.conns = append(h.conns[:i:i], h.conns[i+1:]...)
			break
		}
	}
	h.mu.Unlock()
}

func (p *Pool) dial(r resolved) (*conn, error) {
	p.dials.Add(1)
	ctx, cancel := context.WithTimeout(p.life, p.cfg.DialTimeout)
	defer cancel()
	addr := r.addr()
	nc, err := p.transport(ctx, r)
	if err != nil {
		return nil, err
	}
	// The handshake has no context of its own: a deadline bounds a silent
	// server, closing the socket a cancelled one.
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	hostKeys, known, err := p.hostKeyCallback()
	if err != nil {
		nc.Close()
		return nil, unavailablef("remote: %s: %w", r.Target, err)
	}
	signers, closeAgent := p.signers(r)
	defer closeAgent()
	cfg := &ssh.ClientConfig{
		User:              r.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeysCallback(signers)},
		HostKeyCallback:   hostKeys,
		HostKeyAlgorithms: knownAlgorithms(known, addr, nc.RemoteAddr()),
		ClientVersion:     "SSH-2.0-mevedel-exec",
	}
	cc, chans, reqs, err := ssh.NewClientConn(nc, addr, cfg)
	if err != nil {
		nc.Close()
		var hke *HostKeyError
		if errors.As(err, &hke) {
			return nil, hke
		}
		if ctx.Err() != nil && p.life.Err() == nil {
			err = fmt.Errorf("no answer within %v (%w)", p.cfg.DialTimeout, err)
		}
		return nil, unavailablef("remote: %s: %w", r.Target, err)
	}
	if !stop() {
		cc.Close()
		return nil, unavailablef("remote: %s: %w", r.Target, context.Cause(ctx))
	}
	_ = nc.SetDeadline(time.Time{})
	c := &conn{pool: p, client: ssh.NewClient(cc, chans, reqs), key: r.key(), dead: make(chan struct{})}
	if !p.spawn(c.watch) || !p.spawn(func() { c.keepalive(p.cfg.KeepAlive) }) {
		c.kill(errors.New("remote: pool closed"))
		return nil, errClosed
	}
	return c, nil
}

// transport is the byte stream r's SSH connection runs on: a TCP
// connection to the host, or, behind a hop, a direct-tcpip channel of the
// hop's pooled connection (dialled first when there is none), as
// ProxyJump would make. The hop's own checks (host key, authentication)
// are those of any pooled connection; a hop that goes takes the
// connections through it with it.
func (p *Pool) transport(ctx context.Context, r resolved) (net.Conn, error) {
	if r.jump == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", r.addr())
		if err != nil {
			return nil, unavailablef("remote: %s: %w", r.Target, err)
		}
		return nc, nil
	}
	for round := 0; ; round++ {
		jc, err := p.anyConn(ctx, *r.jump)
		if err != nil {
			return nil, err
		}
		nc, err := jc.client.DialContext(ctx, "tcp", r.addr())
		if err == nil {
			return nc, nil
		}
		// A hop whose transport went before its watcher noticed fails
		// the channel without a refusal: once, the next one is tried.
		var oce *ssh.OpenChannelError
		if errors.As(err, &oce) || ctx.Err() != nil || round == 1 {
			return nil, unavailablef("remote: %s: through %s: %w", r.Target, r.jump.Target, err)
		}
		jc.kill(err)
	}
}

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// kill marks the connection dead for good and closes it.
func (c *conn) kill(err error) {
	c.deadOnce.Do(func() {
		c.deadErr = err
		close(c.dead)
		c.pool.remove(c)
	})
	c.client.Close()
}

// watch notices the transport's end, however it comes.
func (c *conn) watch() {
	err := c.client.Wait()
	if err == nil {
		err = errors.New("connection closed")
	}
	c.kill(err)
}

// keepalive sends keepalive@openssh.com every interval; one unanswered for
// an interval, or failed, kills the connection.
func (c *conn) keepalive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.dead:
			return
		case <-t.C:
		}
		replied := make(chan error, 1)
		go func() {
			// Any answer, a refusal included, proves the peer alive.
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			replied <- err
		}()
		timer := time.NewTimer(interval)
		select {
		case err := <-replied:
			timer.Stop()
			if err != nil {
				c.kill(fmt.Errorf("keepalive: %w", err))
				return
			}
		case <-timer.C:
			c.kill(fmt.Errorf("keepalive unanswered for %v", interval))
			<-replied // Close ended the request
			return
		case <-c.dead:
			timer.Stop()
			<-replied
			return
		}
	}
}

// openSession opens a session channel and counts it until it closes; a
// refusal as prohibited records the server's limit.
func (c *conn) openSession() (ssh.Channel, <-chan *ssh.Request, error) {
	c.pool.sessions.Add(1)
	ch, reqs, err := c.client.OpenChannel("session", nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if refusedAsFull(err) {
			c.limit = max(c.open, 1)
		}
		return nil, nil, err
	}
	c.open++
	return ch, reqs, nil
}

// closed accounts for a channel whose request stream has ended.
func (c *conn) closed() {
	c.mu.Lock()
	c.open--
	c.mu.Unlock()
}

// retryable reports an operation that may go to another connection: its
// session was refused as one too many, or its request never left.
func retryable(err error) bool {
	var ns notSent
	return refusedAsFull(err) || errors.As(err, &ns)
}

// refusedAsFull reports a session refused by a connection that may take
// one later: OpenSSH answers "connect failed" past MaxSessions; others say
// prohibited or resource shortage.
func refusedAsFull(err error) bool {
	var oce *ssh.OpenChannelError
	return errors.As(err, &oce) && oce.Reason != ssh.UnknownChannelType
}

// lostWhy says why the connection went, "" while it is up.
func (c *conn) lostWhy() string {
	if !c.isDead() {
		return ""
	}
	return fmt.Sprintf("connection lost: %v", c.deadErr)
}

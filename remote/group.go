package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// Group is a remote process group known by its leader's identity. A
// Process has one; Pool.Group makes one from a journal's record, without
// a channel, to probe or stop what a previous helper left behind.
type Group struct {
	pool   *Pool    // immutable
	target resolved // immutable
	id     Identity // immutable once Start has read it

	mu    sync.Mutex
	final Liveness // guarded by mu; Dead, or Ambiguous after pid reuse: verdicts that cannot change
}

// Group returns the group with identity id on t.
func (p *Pool) Group(t Target, id Identity) (*Group, error) {
	r, err := p.resolve(t)
	if err != nil {
		return nil, err
	}
	return &Group{pool: p, target: r, id: id}, nil
}

// Identity returns the group's identity.
func (g *Group) Identity() Identity { return g.id }

// verdict is what one control round trip found.
type verdict struct {
	state  Liveness
	leader string // live, zombie, gone, other
}

// Probe reports whether any member of the group, or tagged process that
// left it, is alive (zombies do not count), in one round trip.
func (g *Group) Probe(ctx context.Context) (Liveness, error) {
	if l := g.settled(); l != 0 {
		return l, nil
	}
	v, err := g.control(ctx, actProbe, "0")
	return v.state, err
}

// Signal sends sig to the group (and tagged escapees) after the same remote
// script proved them ours. ErrAmbiguous means nothing was signalled.
func (g *Group) Signal(ctx context.Context, sig syscall.Signal) error {
	if g.settled() == Ambiguous {
		return ErrAmbiguous
	}
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if name == "" {
		return fmt.Errorf("remote: unknown signal %d", int(sig))
	}
	v, err := g.control(ctx, actSignal, name)
	if err == nil && v.state == Ambiguous {
		err = ErrAmbiguous
	}
	return err
}

// Interrupt sends SIGINT as Ctrl-C would: to the terminal's foreground
// group in tty mode, to the process group otherwise. ESRCH when the group
// is gone.
func (g *Group) Interrupt(ctx context.Context) error {
	if g.settled() == Ambiguous {
		return ErrAmbiguous
	}
	v, err := g.control(ctx, actInt, "INT")
	switch {
	case err != nil:
		return err
	case v.state == Ambiguous:
		return ErrAmbiguous
	case v.state == Dead:
		return syscall.ESRCH
	}
	return nil
}

func (g *Group) settled() Liveness {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.final
}

func (g *Group) control(ctx context.Context, act, sig string) (verdict, error) {
	var line string
	err := g.pool.withSession(ctx, g.target, (*conn).hasController, func(c *conn) error {
		var err error
		line, err = c.control(ctx, controlRequest(g.id, act, sig))
		if err != nil && !retryable(err) {
			err = roundTripError(c, g.target, err)
		}
		return err
	})
	if err != nil {
		return verdict{}, err
	}
	f := strings.Fields(line)
	if len(f) != 4 {
		return verdict{}, fmt.Errorf("remote: %s: unexpected control answer %q", g.target.Target, line)
	}
	v := verdict{leader: f[1]}
	switch f[0] {
	case "live":
		v.state = Live
	case "dead":
		v.state = Dead
	case "ambiguous":
		v.state = Ambiguous
	default:
		return verdict{}, fmt.Errorf("remote: %s: unexpected control answer %q", g.target.Target, line)
	}
	// Nothing new joins a group with no live member, and a reused pid
	// stays someone else's.
	if v.state == Dead || v.leader == "other" {
		g.mu.Lock()
		g.final = v.state
		g.mu.Unlock()
	}
	return v, nil
}

// controller is the connection's control shell (controllerCommand).
type controller struct {
	mu      sync.Mutex    // held for a whole request: one at a time
	ch      ssh.Channel   // guarded by mu; nil until started, and after a failure
	br      *bufio.Reader // guarded by mu
	running atomic.Bool   // ch != nil, readable without waiting for a request
}

func (c *conn) hasController() bool { return c.ctl.running.Load() }

// notSent is a request that never left: another connection may take it.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// control sends one request line to the connection's controller, starting
// it first if needed, and returns the answer line. A failure or a cancel
// mid-request discards the controller; the next request starts another.
func (c *conn) control(ctx context.Context, req string) (string, error) {
	c.ctl.mu.Lock()
	defer c.ctl.mu.Unlock()
	if c.ctl.ch == nil {
		if err := c.startController(ctx); err != nil {
			if c.isDead() {
				err = notSent{err}
			}
			return "", err
		}
	}
	ch := c.ctl.ch
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	_, err := io.WriteString(ch, req)
	var line string
	if err != nil {
		err = notSent{err}
	} else {
		line, err = c.ctl.br.ReadString('\n')
	}
	if !stop() {
		err = context.Cause(ctx)
	}
	if err != nil {
		ch.Close()
		c.ctl.ch, c.ctl.br = nil, nil
		c.ctl.running.Store(false)
		return "", err
	}
	return line, nil
}

func (c *conn) startController(ctx context.Context) error {
	ch, reqs, err := c.openSession()
	if err != nil {
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) {
			c.kill(err) // the transport failed under us
		}
		return err
	}
	if !c.pool.spawn(func() {
		ssh.DiscardRequests(reqs)
		c.closed()
	}) || !c.pool.spawn(func() { _, _ = io.Copy(io.Discard, ch.Stderr()) }) {
		ch.Close()
		return errClosed
	}
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()
	ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{controllerCommand()}))
	if err == nil && !ok {
		err = errors.New("exec request refused")
	}
	br := bufio.NewReader(ch)
	if err == nil {
		err = skipTo(br, ctlReady)
	}
	if err != nil {
		ch.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("starting the control shell: %w", err)
	}
	c.ctl.ch, c.ctl.br = ch, br
	c.ctl.running.Store(true)
	return nil
}

// skipTo reads past the first occurrence of s (what the login shell prints
// before it comes is not ours).
func skipTo(br *bufio.Reader, s string) error {
	for {
		line, err := br.ReadSlice(s[len(s)-1])
		if err == nil && bytes.HasSuffix(line, []byte(s)) {
			return nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return err
		}
	}
}

// roundTripError names a failed round trip: unavailable when the
// connection went with it.
func roundTripError(c *conn, r resolved, err error) error {
	if c.isDead() {
		return unavailablef("remote: %s: connection lost: %v", r.Target, c.deadErr)
	}
	return fmt.Errorf("remote: %s: %w", r.Target, err)
}

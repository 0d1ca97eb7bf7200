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
	"time"

	"github.com/mevedel/mevedel-exec/remote/agent"
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
	final Liveness   // guarded by mu; Dead, or Ambiguous after pid reuse: verdicts that cannot change
	await *awaitCall // guarded by mu; the await in flight, if any
	// replaced is set when the host answered from another boot than the
	// one the group started in (final is then Dead); guarded by mu.
	replaced bool
}

// awaitCall is one await request: the host watches the leader and probes
// the group the moment it is gone.
type awaitCall struct {
	done chan struct{} // closed once the answer (or failure) is in
	v    verdict       // set before done is closed; state 0 when pending
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

// Replaced reports whether the host was found in another boot than the
// one the group started in: then it is dead without a signal.
func (g *Group) Replaced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.replaced
}

// verdict is what one control round trip found.
type verdict struct {
	state  Liveness
	leader string // live, zombie, gone, other
}

// Probe reports whether any member of the group, or tagged process that
// left it, is alive (zombies do not count), in one round trip. While an
// await is in flight it waits for that instead: its answer is the same
// probe, made as soon as the leader was gone.
func (g *Group) Probe(ctx context.Context) (Liveness, error) {
	if l := g.settled(); l != 0 {
		return l, nil
	}
	g.mu.Lock()
	a := g.await
	g.mu.Unlock()
	if a != nil {
		select {
		case <-a.done:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		if l := g.settled(); l != 0 {
			return l, nil
		}
	}
	v, err := g.control(ctx, actProbe, "0")
	return v.state, err
}

// Await limits: a leader still there after awaitPolls polls of about a
// millisecond each is left to the probe after its exit.
const awaitPolls = 200

// startAwait asks the host to watch the leader while the command runs and
// to probe the group as soon as the leader is gone, so the verdict that
// settlement needs is made while the exit status is still on its way. A
// command that runs longer, or a control request that comes meanwhile,
// ends the watch early; then the probe after the exit does the work.
func (g *Group) startAwait() {
	a := &awaitCall{done: make(chan struct{})}
	g.mu.Lock()
	g.await = a
	g.mu.Unlock()
	started := g.pool.spawn(func() {
		defer close(a.done)
		ctx, cancel := context.WithTimeout(g.pool.life, g.pool.cfg.DialTimeout+10*time.Second)
		defer cancel()
		a.v, _ = g.control(ctx, actAwait, "0")
	})
	if !started {
		close(a.done)
	}
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
	if act != actAwait {
		if v, err, ok := g.viaAgent(ctx, act, sig); ok {
			return v, err
		}
	}
	line, replaced, err := g.ask(ctx, controlRequest(g.id, act, sig))
	if err != nil {
		return verdict{}, err
	}
	if replaced {
		return verdict{state: Dead}, nil
	}
	f := strings.Fields(line)
	if len(f) != 4 {
		return verdict{}, fmt.Errorf("remote: %s: unexpected control answer %q", g.target.Target, line)
	}
	v := verdict{leader: f[1]}
	switch f[0] {
	case "pending": // an await ended before the leader did
		return v, nil
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

// ask sends req to the target's control shell and returns its answer:
// on a connection of the SSH host, or in the container through its
// engine (enginewrap.go). replaced is a container found in another
// incarnation than the group's: the group is then dead, and nothing was
// asked.
func (g *Group) ask(ctx context.Context, req string) (line string, replaced bool, err error) {
	if g.target.Container() {
		return g.askEngine(ctx, req)
	}
	if g.target.Stream() {
		return "", false, notSSH(g.target, "the control shell")
	}
	err = g.pool.withSession(ctx, g.target, (*conn).hasController, func(c *conn) error {
		var err error
		line, err = c.control(ctx, req)
		if err != nil && !retryable(err) {
			err = roundTripError(c, g.target, err)
		}
		return err
	})
	return line, false, err
}

// controller is the connection's control shell (controllerCommand).
// Requests are pipelined: each is written as it comes, and the shell
// answers them one after another, in order.
type controller struct {
	mu      sync.Mutex  // serialises starting the shell and writing requests
	run     *ctlRun     // guarded by mu; the running shell, nil until started
	running atomic.Bool // a shell runs, readable without taking mu
}

// ctlRun is one control shell and the requests it has yet to answer.
type ctlRun struct {
	ch io.WriteCloser // the shell's stdin: an SSH channel, or an engine exec's carrier

	mu      sync.Mutex
	pending []*ctlWait // guarded by mu; in request order
	err     error      // guarded by mu; set once the shell is gone
}

// ctlWait is one request waiting for its answer.
type ctlWait struct {
	done chan struct{} // closed once line or err is set
	line string
	err  error
}

func (c *conn) hasController() bool { return c.ctl.running.Load() }

// notSent is a request that never left: another connection may take it.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// control sends one request to the connection's controller, starting it
// first if needed, and returns the answer line. A request whose caller
// gives up while the shell works on it (it is first in line: the shell is
// stuck on it) discards the shell, and the requests behind it, which the
// shell never read, are not sent; the next request starts another shell.
func (c *conn) control(ctx context.Context, req string) (string, error) {
	return c.ctl.request(ctx, req, c.startController, c.isDead)
}

// request sends req to the control shell, starting one with start when
// none runs; a start that fails while gone says so is a notSent.
func (ctl *controller) request(ctx context.Context, req string, start func(context.Context) (*ctlRun, error), gone func() bool) (string, error) {
	ctl.mu.Lock()
	run, err := ctl.ensure(ctx, start)
	if err != nil {
		ctl.mu.Unlock()
		if gone() {
			err = notSent{err}
		}
		return "", err
	}
	w := &ctlWait{done: make(chan struct{})}
	run.mu.Lock()
	run.pending = append(run.pending, w)
	run.mu.Unlock()
	_, err = io.WriteString(run.ch, req)
	ctl.mu.Unlock()
	if err != nil {
		run.fail(err)
	}
	select {
	case <-w.done:
		return w.line, w.err
	case <-ctx.Done():
		run.mu.Lock()
		head := len(run.pending) > 0 && run.pending[0] == w
		run.mu.Unlock()
		// An await is slow by design; any request ends it.
		if head && !strings.HasPrefix(req[4:], actAwait+" ") {
			run.ch.Close() // the reader fails what is left
		}
		return "", context.Cause(ctx)
	}
}

// ensure returns the running shell, starting one when none runs; with
// ctl.mu held.
func (ctl *controller) ensure(ctx context.Context, start func(context.Context) (*ctlRun, error)) (*ctlRun, error) {
	if run := ctl.run; run != nil && !run.failed() {
		return run, nil
	}
	ctl.running.Store(false)
	run, err := start(ctx)
	if err != nil {
		return nil, err
	}
	ctl.run = run
	ctl.running.Store(true)
	return run, nil
}

func (r *ctlRun) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err != nil
}

// fail ends the shell: the request it was answering gets err, those
// behind it, never read, a notSent.
func (r *ctlRun) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	ws := r.pending
	r.pending = nil
	r.mu.Unlock()
	r.ch.Close()
	for i, w := range ws {
		w.err = err
		if i > 0 {
			w.err = notSent{err}
		}
		close(w.done)
	}
}

// read hands each answer line to the request first in line.
func (r *ctlRun) read(br *bufio.Reader) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			r.fail(err)
			return
		}
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.mu.Unlock()
			r.fail(fmt.Errorf("unexpected control answer %q", line))
			return
		}
		w := r.pending[0]
		r.pending = r.pending[1:]
		r.mu.Unlock()
		w.line = line
		close(w.done)
	}
}

// startController starts a control shell, with c.ctl.mu held.
func (c *conn) startController(ctx context.Context) (*ctlRun, error) {
	ch, reqs, err := c.openSession()
	if err != nil {
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) {
			c.kill(err) // the transport failed under us
		}
		return nil, err
	}
	if !c.pool.spawn(func() {
		ssh.DiscardRequests(reqs)
		c.closed()
	}) || !c.pool.spawn(func() { _, _ = io.Copy(io.Discard, ch.Stderr()) }) {
		ch.Close()
		return nil, errClosed
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
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("starting the control shell: %w", err)
	}
	run := &ctlRun{ch: ch}
	if !c.pool.spawn(func() { run.read(br) }) {
		ch.Close()
		return nil, errClosed
	}
	return run, nil
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

// viaAgent runs a group operation on the host agent when the host runs
// one; ok is false when it does not.
func (g *Group) viaAgent(ctx context.Context, act, sig string) (v verdict, err error, ok bool) {
	stream := g.target.Stream()
	if !stream && (g.pool.cfg.Mode == ModeWrapper || !agent.Deployable) {
		return verdict{}, nil, false
	}
	cl, err := g.pool.agentFor(ctx, g.target)
	if cl == nil && errors.Is(err, errNoAgentHere) {
		return verdict{}, nil, false // the container's commands go through the wrapper
	}
	if cl == nil && stream && g.id.Boot != "" && errors.Is(err, errTargetGone) {
		// The container it ran in is gone or stopped: so is every
		// process of that incarnation. Nothing is signalled.
		g.mu.Lock()
		g.final, g.replaced = Dead, true
		g.mu.Unlock()
		return verdict{state: Dead}, nil, true
	}
	if cl == nil && stream {
		return verdict{}, err, true // no control shell to ask instead
	}
	if cl == nil {
		return verdict{}, nil, false
	}
	if g.id.Boot != "" && cl.inc.Key() != "" && cl.inc.Key() != g.id.Boot {
		// Another boot: nothing of the group can be left, and its pids
		// may be others' now. Nothing is signalled.
		g.mu.Lock()
		g.final, g.replaced = Dead, true
		g.mu.Unlock()
		return verdict{state: Dead}, nil, true
	}
	s := unix.SignalNum("SIG" + sig)
	v, err = cl.group(ctx, g.id, act, s)
	if errors.Is(err, errAgentLost) {
		if stream {
			return verdict{}, unavailablef("remote: %s: the host agent went during the request", g.target.Target), true
		}
		return verdict{}, nil, false // the control shell still may
	}
	if err == nil && (v.state == Dead || v.leader == "other") {
		g.mu.Lock()
		g.final = v.state
		g.mu.Unlock()
	}
	return v, err, true
}

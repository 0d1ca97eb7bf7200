package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/mevedel/mevedel-exec/sandbox"
	"golang.org/x/sys/unix"
)

// agentClient is the helper's end of one host agent's channel: every
// execution on the agent's connection goes over it.
type agentClient struct {
	pool   *Pool    // immutable
	target resolved // immutable
	// inc is the host's boot, from the hello, and for a container the
	// engine's id and start time of it; immutable.
	inc Incarnation
	// carrierLost says why the stream under the channel went, "" while it
	// is up: the SSH connection, or the sudo or engine process; immutable.
	carrierLost func() string
	ch          io.ReadWriteCloser
	fr          *agent.Reader
	w           *agent.Writer
	tunnels     *agent.Tunnels // forwarded connections (agenttunnel.go)

	dead    chan struct{} // closed once, when the channel is gone
	deadErr error         // set before dead is closed

	mu     sync.Mutex
	next   uint32                        // guarded by mu; the last id handed out
	execs  map[uint32]*agentProcess      // guarded by mu
	starts map[uint32]chan agent.Started // guarded by mu
	reqs   map[uint32]chan agent.Reply   // guarded by mu
	dials  map[uint32]chan string        // guarded by mu; a tunnel's dial, waiting for its answer
}

func newAgentClient(p *Pool, carrierLost func() string, r resolved, inc Incarnation, ch io.ReadWriteCloser, br *bufio.Reader) *agentClient {
	buffered, _ := br.Peek(br.Buffered())
	w := agent.NewWriter(ch)
	return &agentClient{pool: p, carrierLost: carrierLost, target: r, inc: inc, ch: ch, fr: agent.NewReader(buffered, ch), w: w, tunnels: agent.NewTunnels(w, false), dead: make(chan struct{}),
		execs: map[uint32]*agentProcess{}, starts: map[uint32]chan agent.Started{}, reqs: map[uint32]chan agent.Reply{}, dials: map[uint32]chan string{}}
}

func (cl *agentClient) isDead() bool {
	select {
	case <-cl.dead:
		return true
	default:
		return false
	}
}

// read dispatches the agent's frames until the channel ends; then every
// execution's output ends, and its exit status is lost.
func (cl *agentClient) read() {
	var err error
	for {
		var f agent.Frame
		if f, err = cl.fr.Next(); err != nil {
			break
		}
		if err = cl.dispatch(f); err != nil {
			break
		}
	}
	cl.ch.Close()
	cl.tunnels.CloseAll()
	why := fmt.Sprintf("the host agent's channel ended (%v)", err)
	if lost := cl.carrierLost(); lost != "" {
		why = lost
	}
	cl.mu.Lock()
	cl.deadErr = unavailablef("remote: %s: %s", cl.target.Target, why)
	close(cl.dead)
	execs := cl.execs
	cl.execs = map[uint32]*agentProcess{}
	cl.mu.Unlock()
	for _, ap := range execs {
		ap.endOutput()
		ap.setExit(process.Exit{Lost: "the connection to the host was lost before the command's exit status arrived: " + cl.deadErr.Error()}, cl.deadErr)
	}
}

func (cl *agentClient) dispatch(f agent.Frame) error {
	cl.mu.Lock()
	ap := cl.execs[f.ID]
	cl.mu.Unlock()
	switch f.Type {
	case agent.MsgStarted:
		var s agent.Started
		if err := json.Unmarshal(f.Payload, &s); err != nil {
			return err
		}
		cl.mu.Lock()
		w := cl.starts[f.ID]
		delete(cl.starts, f.ID)
		cl.mu.Unlock()
		if w != nil {
			w <- s
		}
	case agent.MsgOutput:
		if ap != nil {
			ap.push(f.Payload)
		} else {
			agent.Release(f.Payload)
		}
	case agent.MsgEOF:
		if ap != nil {
			ap.endOutput()
		}
	case agent.MsgExit:
		var x agent.ExitStatus
		if err := json.Unmarshal(f.Payload, &x); err != nil {
			return err
		}
		if ap != nil {
			ap.aliveAtExit, ap.limit = x.Alive, x.Limit
			e := process.Exit{Code: x.Code, Signaled: x.Signaled, Signal: syscall.Signal(x.Signal)}
			ap.setExit(e, nil)
		}
	case agent.MsgReply:
		var rep agent.Reply
		if err := json.Unmarshal(f.Payload, &rep); err != nil {
			return err
		}
		cl.mu.Lock()
		w := cl.reqs[f.ID]
		delete(cl.reqs, f.ID)
		cl.mu.Unlock()
		if w != nil {
			w <- rep
		}
	case agent.MsgDialed:
		cl.mu.Lock()
		w := cl.dials[f.ID]
		delete(cl.dials, f.ID)
		cl.mu.Unlock()
		if w != nil {
			w <- string(f.Payload)
		}
	default:
		if !cl.tunnels.Handle(f) {
			return fmt.Errorf("unknown frame type %q", f.Type)
		}
	}
	return nil
}

// errAgentLost is a request whose channel ended before its answer.
var errAgentLost = errors.New("the host agent's channel is gone")

// request sends req and waits for its reply.
func (cl *agentClient) request(ctx context.Context, req agent.Request) (agent.Reply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return agent.Reply{}, err
	}
	w := make(chan agent.Reply, 1)
	cl.mu.Lock()
	if cl.isDead() {
		cl.mu.Unlock()
		return agent.Reply{}, errAgentLost
	}
	cl.next++
	id := cl.next
	cl.reqs[id] = w
	cl.mu.Unlock()
	forget := func() {
		cl.mu.Lock()
		delete(cl.reqs, id)
		cl.mu.Unlock()
	}
	if err := cl.w.Write(agent.MsgRequest, id, b); err != nil {
		forget()
		return agent.Reply{}, errAgentLost
	}
	select {
	case rep := <-w:
		return rep, nil
	case <-cl.dead:
		forget()
		return agent.Reply{}, errAgentLost
	case <-ctx.Done():
		forget()
		return agent.Reply{}, context.Cause(ctx)
	}
}

// start starts spec on the agent; it returns once the agent has spawned
// it (its identity is known). ctx bounds the start, not the command: a
// start the caller gave up on is killed once it shows.
func (cl *agentClient) start(ctx context.Context, spec launchSpec) (*agentProcess, error) {
	s := agent.StartSpec{Command: spec.Command, Argv: spec.Argv, Dir: spec.Dir, Env: spec.Env, Overlay: spec.overlay || spec.Env == nil,
		TTY: spec.TTY, Tag: spec.Tag, Sandbox: spec.sandbox, Resources: spec.resources, Gated: spec.BeforeRun != nil}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	ap := &agentProcess{cl: cl, dir: spec.Dir, exited: make(chan struct{})}
	ap.cond = sync.NewCond(&ap.mu)
	w := make(chan agent.Started, 1)
	cl.mu.Lock()
	if cl.isDead() {
		cl.mu.Unlock()
		return nil, errAgentLost
	}
	cl.next++
	ap.id = cl.next
	cl.execs[ap.id] = ap
	cl.starts[ap.id] = w
	cl.mu.Unlock()
	if err := cl.w.Write(agent.MsgStart, ap.id, b); err != nil {
		cl.forget(ap.id)
		return nil, errAgentLost
	}
	if spec.BeforeRun != nil {
		// While the start travels and the host spawns it gated.
		err := spec.BeforeRun()
		word := []byte{1}
		if err != nil {
			word[0] = 0
		}
		if werr := cl.w.Write(agent.MsgGo, ap.id, word); err != nil || werr != nil {
			cl.forget(ap.id)
			if err == nil {
				err = errAgentLost
			}
			return nil, err
		}
	}
	var st agent.Started
	select {
	case st = <-w:
	case <-cl.dead:
		return nil, errAgentLost
	case <-ctx.Done():
		cl.pool.spawn(func() {
			select {
			case st := <-w:
				if st.Err == "" {
					ap.ident = Identity{Pid: st.Pid, Pgid: st.Pid, Start: st.Start}
					_ = ap.Signal(unix.SIGKILL)
					_ = ap.CloseOutput()
				}
			case <-cl.dead:
			}
		})
		return nil, context.Cause(ctx)
	}
	if st.Err != "" {
		cl.forget(ap.id)
		return nil, fmt.Errorf("remote: %s: %s", cl.target.Target, st.Err)
	}
	ap.ident = Identity{Pid: st.Pid, Pgid: st.Pid, Start: st.Start, Tag: spec.Tag, TTY: spec.TTY, Boot: cl.inc.Key()}
	ap.resFacts = st.Resources
	return ap, nil
}

func (cl *agentClient) forget(id uint32) {
	cl.mu.Lock()
	delete(cl.execs, id)
	delete(cl.starts, id)
	cl.mu.Unlock()
}

// group asks the agent about a group known by identity alone.
func (cl *agentClient) group(ctx context.Context, id Identity, act string, sig syscall.Signal) (verdict, error) {
	rep, err := cl.request(ctx, agent.Request{Op: agent.OpGroup, Act: act, Sig: int(sig),
		Pid: id.Pid, Pgid: id.Pgid, Start: id.Start, Tag: id.Tag, TTY: id.TTY})
	if err != nil {
		return verdict{}, err
	}
	if rep.Err != "" {
		return verdict{}, fmt.Errorf("remote: %s: %s", cl.target.Target, rep.Err)
	}
	v := verdict{leader: rep.Leader}
	switch rep.State {
	case "live":
		v.state = Live
	case "dead":
		v.state = Dead
	case "ambiguous":
		v.state = Ambiguous
	default:
		return verdict{}, fmt.Errorf("remote: %s: unexpected group state %q", cl.target.Target, rep.State)
	}
	return v, nil
}

// agentProcess is one execution run by a host agent: the process.Process
// of the agent mode.
type agentProcess struct {
	cl       *agentClient           // immutable
	id       uint32                 // immutable
	dir      string                 // immutable; the start's directory, as the host resolves it
	ident    Identity               // immutable once started
	resFacts *sandbox.ResourceFacts // immutable once started

	mu       sync.Mutex
	cond     *sync.Cond // on mu: output came, or ended
	chunks   [][]byte   // guarded by mu; output not read yet, in buffers from agent.OutputBuffer
	off      int        // guarded by mu; what was read of chunks[0]
	eof      bool       // guarded by mu
	consumed int        // guarded by mu; read since the last credit
	lent     []byte     // guarded by mu; the chunk ReadChunk handed out last
	closed   bool       // guarded by mu; CloseOutput was called
	flood    floodMeter // guarded by mu; whether the output floods (flood.go)

	lost        atomic.Pointer[Group] // the group by identity, once the channel is gone
	exited      chan struct{}         // closed once exit is set
	once        sync.Once
	exit        process.Exit
	err         error
	aliveAtExit bool   // set before exited is closed
	limit       string // set before exited is closed: the limit that ended it
	closeOnce   sync.Once
}

var _ process.Process = (*agentProcess)(nil)

func (ap *agentProcess) push(b []byte) {
	ap.mu.Lock()
	if ap.closed {
		agent.Release(b)
		ap.mu.Unlock()
		return
	}
	if len(ap.chunks) == 0 {
		ap.cond.Broadcast() // only an empty queue has a reader waiting
	}
	ap.chunks = append(ap.chunks, b)
	if !ap.eof {
		ap.flood.add(len(b), &ap.mu)
	}
	ap.mu.Unlock()
}

func (ap *agentProcess) endOutput() {
	ap.mu.Lock()
	ap.eof = true
	ap.cond.Broadcast()
	ap.flood.stop()
	ap.mu.Unlock()
}

func (ap *agentProcess) setExit(e process.Exit, err error) {
	ap.once.Do(func() {
		ap.exit, ap.err = e, err
		close(ap.exited)
	})
}

func (ap *agentProcess) Pid() int            { return ap.ident.Pid }
func (ap *agentProcess) Pgid() int           { return ap.ident.Pgid }
func (ap *agentProcess) LeaderStart() uint64 { return ap.ident.Start }

// Identity is what proves the group is ours on the host.
func (ap *agentProcess) Identity() Identity { return ap.ident }

// RemoteMode says the command runs under the host agent.
func (ap *agentProcess) RemoteMode() string { return ModeAgent }

// Transport is closed when the agent's channel is gone.
func (ap *agentProcess) Transport() <-chan struct{} { return ap.cl.dead }

func (ap *agentProcess) Output() io.Reader { return agentOutput{ap} }

type agentOutput struct{ ap *agentProcess }

// Read takes what the agent sent and grants the agent more credit as
// the output is consumed.
func (r agentOutput) Read(b []byte) (int, error) {
	ap := r.ap
	ap.mu.Lock()
	for len(ap.chunks) == 0 && !ap.eof && !ap.closed {
		ap.cond.Wait()
	}
	if len(ap.chunks) == 0 || ap.closed {
		ap.mu.Unlock()
		return 0, io.EOF
	}
	n := 0
	for n < len(b) && len(ap.chunks) > 0 {
		k := copy(b[n:], ap.chunks[0][ap.off:])
		n += k
		ap.off += k
		if ap.off == len(ap.chunks[0]) {
			agent.Release(ap.chunks[0])
			ap.chunks[0] = nil
			ap.chunks = ap.chunks[1:]
			ap.off = 0
		}
	}
	grant := ap.consumedLocked(n)
	aim := grant > 0 && ap.flood.flooding()
	ap.mu.Unlock()
	ap.grant(grant, aim)
	return n, nil
}

// ReadChunk is Read without its copy, for the output's one reader (the
// spool's copier): it returns the rest of the next output frame itself,
// which stays valid until the next call gives it back to the pool.
func (r agentOutput) ReadChunk() ([]byte, error) {
	ap := r.ap
	ap.mu.Lock()
	if ap.lent != nil {
		agent.Release(ap.lent)
		ap.lent = nil
	}
	for len(ap.chunks) == 0 && !ap.eof && !ap.closed {
		ap.cond.Wait()
	}
	if len(ap.chunks) == 0 || ap.closed {
		ap.mu.Unlock()
		return nil, io.EOF
	}
	b := ap.chunks[0][ap.off:]
	ap.lent = ap.chunks[0]
	ap.chunks[0] = nil
	ap.chunks, ap.off = ap.chunks[1:], 0
	grant := ap.consumedLocked(len(b))
	aim := grant > 0 && ap.flood.flooding()
	ap.mu.Unlock()
	ap.grant(grant, aim)
	return b, nil
}

// consumedLocked counts n bytes taken and returns the credit to grant
// the agent now (0: not yet, until a quarter of the window is taken).
func (ap *agentProcess) consumedLocked(n int) int {
	ap.consumed += n
	grant := 0
	if ap.consumed >= agent.Window/4 {
		grant, ap.consumed = ap.consumed, 0
	}
	return grant
}

// grant gives the agent n more bytes of credit; aim, during a flood,
// aims the collector again (every quarter window).
func (ap *agentProcess) grant(n int, aim bool) {
	if n > 0 {
		_ = ap.cl.w.Write(agent.MsgCredit, ap.id, agent.Credit(uint32(n)))
	}
	if aim {
		floodAim()
	}
}

func (ap *agentProcess) Wait() (process.Exit, error) {
	<-ap.exited
	return ap.exit, ap.err
}

func (ap *agentProcess) Exited() bool {
	select {
	case <-ap.exited:
		return true
	default:
		return false
	}
}

func (ap *agentProcess) controlContext() (context.Context, context.CancelFunc) {
	p := ap.cl.pool
	return context.WithTimeout(p.life, p.cfg.DialTimeout+10*time.Second)
}

// call sends an operation on this execution to its agent.
func (ap *agentProcess) call(ctx context.Context, req agent.Request) (agent.Reply, error) {
	req.Exec = ap.id
	rep, err := ap.cl.request(ctx, req)
	if err != nil {
		return rep, err
	}
	if rep.Ambiguous {
		return rep, ErrAmbiguous
	}
	if rep.Errno > 0 {
		return rep, syscall.Errno(rep.Errno)
	}
	if rep.Errno < 0 {
		return rep, os.ErrClosed
	}
	if rep.Err != "" {
		return rep, fmt.Errorf("remote: %s: %s", ap.cl.target.Target, rep.Err)
	}
	return rep, nil
}

// group is the execution known by identity alone, for what must reach
// it after its agent's channel is gone: a new agent (or the control
// shell) finds it on the host the way recovery does. One is made, so what
// it found (a host in another boot) stays known.
func (ap *agentProcess) group() *Group {
	if g := ap.lost.Load(); g != nil {
		return g
	}
	ap.lost.CompareAndSwap(nil, &Group{pool: ap.cl.pool, target: ap.cl.target, id: ap.ident})
	return ap.lost.Load()
}

// Incarnation is the host's name and boot id as its agent said when the
// command started, and for a container the engine's id and start time.
func (ap *agentProcess) Incarnation() Incarnation { return ap.cl.inc }

// Replaced reports whether, its agent's channel gone, the host was found
// again in another boot: nothing of the command was left to find, and
// nothing was signalled.
func (ap *agentProcess) Replaced() bool {
	g := ap.lost.Load()
	return g != nil && g.Replaced()
}

// Signal sends sig to the group and every member of the execution's
// tree on the host, as the local runner does there.
func (ap *agentProcess) Signal(sig syscall.Signal) error {
	ctx, cancel := ap.controlContext()
	defer cancel()
	_, err := ap.call(ctx, agent.Request{Op: agent.OpSignal, Sig: int(sig)})
	if errors.Is(err, errAgentLost) {
		return ap.group().Signal(ctx, sig)
	}
	return err
}

func (ap *agentProcess) Interrupt() error {
	ctx, cancel := ap.controlContext()
	defer cancel()
	_, err := ap.call(ctx, agent.Request{Op: agent.OpInt})
	if errors.Is(err, errAgentLost) {
		return ap.group().Interrupt(ctx)
	}
	return err
}

// Alive asks the agent; after an exit with nothing left alive, it knows
// without asking.
func (ap *agentProcess) Alive() bool {
	if ap.Exited() && ap.err == nil && !ap.aliveAtExit {
		return false
	}
	ctx, cancel := ap.controlContext()
	defer cancel()
	rep, err := ap.call(ctx, agent.Request{Op: agent.OpAlive})
	if errors.Is(err, errAgentLost) {
		l, err := ap.group().Probe(ctx)
		return err == nil && l == Live
	}
	return err == nil && rep.Alive
}

func (ap *agentProcess) Write(b []byte) (int, error) {
	if !ap.ident.TTY {
		return 0, errors.New("remote: stdin is closed in pipe mode")
	}
	ctx, cancel := ap.controlContext()
	defer cancel()
	rep, err := ap.call(ctx, agent.Request{Op: agent.OpInput, Data: b})
	if errors.Is(err, errAgentLost) {
		err = os.ErrClosed
	}
	return rep.N, err
}

// CloseOutput ends the output here at once and asks the agent to close
// it there; the agent forgets the execution once it has also exited.
func (ap *agentProcess) CloseOutput() error {
	ap.closeOnce.Do(func() {
		ap.mu.Lock()
		ap.closed = true
		for _, c := range ap.chunks {
			agent.Release(c)
		}
		ap.chunks, ap.off = nil, 0
		ap.cond.Broadcast()
		ap.flood.stop()
		ap.mu.Unlock()
		ap.cl.pool.spawn(func() {
			ctx, cancel := ap.controlContext()
			defer cancel()
			_, _ = ap.call(ctx, agent.Request{Op: agent.OpClose})
			<-ap.exited
			ap.cl.forget(ap.id)
		})
	})
	return nil
}

// WaitingForInput asks the host whether the terminal's foreground group
// is blocked reading it (process.WaitingForInput there).
func (ap *agentProcess) WaitingForInput(ctx context.Context) (bool, error) {
	rep, err := ap.call(ctx, agent.Request{Op: agent.OpWaiting})
	return rep.Waiting, err
}

// Listening reads the TCP ports the command's tree listens on, on the
// host (process.Listening there).
func (ap *agentProcess) Listening(ctx context.Context) ([]process.Listener, error) {
	rep, err := ap.call(ctx, agent.Request{Op: agent.OpPorts})
	return rep.Listening, err
}

// startOnAgent starts spec under t's host agent. ok is false when the
// host's commands go through the wrapper (or the agent was lost before
// the command started): then nothing ran.
func (p *Pool) startOnAgent(ctx context.Context, t Target, spec launchSpec, logger interface{ Printf(string, ...any) }) (proc process.Process, err error, ok bool) {
	if (!t.Stream() || t.Container()) && (p.cfg.Mode == ModeWrapper || !agent.Deployable) {
		return nil, nil, false
	}
	r, err := p.resolve(t)
	if err != nil {
		return nil, err, true
	}
	for range 2 { // a second time when the agent was lost meanwhile
		cl, err := p.agentFor(ctx, r)
		if cl == nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx), true
			}
			if r.Stream() && !errors.Is(err, errNoAgentHere) {
				return nil, err, true // there is no wrapper for it
			}
			if logger != nil && err != nil && !p.fellBack(r, err) {
				logger.Printf("remote: %s: using the wrapper: %v", r.Target, err)
			}
			return nil, nil, false
		}
		ap, err := cl.start(ctx, spec)
		if errors.Is(err, errAgentLost) {
			continue
		}
		if err != nil {
			return nil, err, true
		}
		return ap, nil, true
	}
	return nil, nil, false
}

// fellBack reports whether r's fall back to the wrapper was already
// reported, and marks it reported.
func (p *Pool) fellBack(r resolved, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fallbacks == nil {
		p.fallbacks = map[string]string{}
	}
	key := r.key()
	seen := p.fallbacks[key] == err.Error()
	p.fallbacks[key] = err.Error()
	return seen
}

package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/internal/envlist"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// launchSpec is a process.Spec as the host runs it. Its Dir is the
// working directory on the host: absolute, "~", "~/...", relative to the
// home directory, or empty for the home directory. Its Env is the complete
// environment; nil keeps the one sshd gives, less SSH_CLIENT and
// SSH2_CLIENT (with them bash would read ~/.bashrc for every command).
type launchSpec struct {
	process.Spec
	// overlay sets Env on top of sshd's environment instead of replacing
	// it: the fallback when no login environment could be captured.
	overlay bool
	// sandbox, when set, is the policy as the host applies it; with it
	// or resources the command runs under the host agent or not at all.
	sandbox   *sandbox.Policy
	resources *sandbox.Resources
}

// confined reports whether the command needs the host agent's box or
// group: the wrapper would run it without them.
func (s launchSpec) confined() bool {
	return s.sandbox != nil || (s.resources != nil && !s.resources.Zero())
}

// Liveness is a probe's verdict on a remote group.
type Liveness int

const (
	Live Liveness = iota + 1
	Dead
	// Ambiguous: the leader's pid is now someone else's (its start time
	// changed), or the group has survivors none of which is proven ours.
	// Never signalled.
	Ambiguous
)

func (l Liveness) String() string {
	switch l {
	case Live:
		return "live"
	case Dead:
		return "dead"
	case Ambiguous:
		return "ambiguous"
	}
	return "unknown"
}

// Identity is what proves a remote group is the one we started: the
// leader's pid and start time (/proc/PID/stat field 22, clock ticks since
// the host's boot), its group, and the execution's tag.
type Identity struct {
	Pid, Pgid int
	Start     uint64
	Tag       string // KEY=value, or empty
	TTY       bool
	// Boot is the host's incarnation when the group started
	// (Incarnation.Key: its boot id as its agent said, or a container's
	// id and start); "" when unknown (the wrapper). A host found in
	// another incarnation holds nothing of the group (Group.Replaced).
	Boot string
}

// Process is one command running on a host over its own exec channel.
type Process struct {
	conn *conn // immutable; the connection carrying the channel
	groupControl
	ch  ssh.Channel
	out *bufio.Reader // positioned after the identity line; read by the copy to pr

	stderr capped // what reached the channel's stderr (only what ran before the wrapper)

	wrapperEnd
}

// wrapperEnd is a wrapper command's output and end, as both wrappers (an
// SSH channel, an engine exec) hand them out; made by newWrapperEnd.
type wrapperEnd struct {
	pr *io.PipeReader // Output's source

	exited chan struct{} // closed once, when exit is set
	once   sync.Once
	exit   process.Exit // set before exited is closed
	err    error        // set before exited is closed
}

func newWrapperEnd() wrapperEnd { return wrapperEnd{exited: make(chan struct{})} }

func (w *wrapperEnd) setExit(e process.Exit, err error) {
	w.once.Do(func() {
		w.exit, w.err = e, err
		close(w.exited)
	})
}

// Output is the command's merged stdout and stderr (one terminal stream
// in tty mode), without the wrapper's own lines. It reaches EOF when the
// transport's output ends or after CloseOutput.
func (w *wrapperEnd) Output() io.Reader { return wrapperOutput{w} }

type wrapperOutput struct{ w *wrapperEnd }

func (r wrapperOutput) Read(b []byte) (int, error) {
	n, err := r.w.pr.Read(b)
	if err == io.ErrClosedPipe {
		err = io.EOF
	}
	return n, err
}

// Wait waits for the command's exit status. Exit.Lost (with an
// ErrUnavailable error) says none came: the command may have ended any
// way, or still run.
func (w *wrapperEnd) Wait() (process.Exit, error) {
	<-w.exited
	return w.exit, w.err
}

// Exited reports, without blocking, whether Wait would return.
func (w *wrapperEnd) Exited() bool {
	select {
	case <-w.exited:
		return true
	default:
		return false
	}
}

// Start runs spec on t. It returns once the command has started (its
// identity line arrived); ctx bounds the connection and the start, not the
// command. A command in pipe mode goes to the connection's standby when
// it has one (a wrapper already started, waiting for its command), and
// leaves another standby behind for the next one.
func (p *Pool) Start(ctx context.Context, t Target, spec process.Spec) (*Process, error) {
	return p.start(ctx, t, launchSpec{Spec: spec})
}

func (p *Pool) start(ctx context.Context, t Target, spec launchSpec) (*Process, error) {
	if spec.Tag != "" && (!strings.Contains(spec.Tag, "=") || strings.ContainsAny(spec.Tag, " \t\r\n")) {
		return nil, fmt.Errorf("remote: tag %q must be KEY=value without blanks", spec.Tag)
	}
	r, err := p.resolve(t)
	if err != nil {
		return nil, err
	}
	if !spec.TTY {
		if proc, err, ok := p.startOnStandby(ctx, r, spec); ok {
			return proc, err
		}
	}
	c, ch, reqs, err := p.channel(ctx, r)
	if err != nil {
		return nil, err
	}
	proc, err := p.launch(c, ch, reqs, r, spec.TTY, envlist.Value(spec.Env, "TERM"), wrapperCommand(spec))
	if err != nil {
		return nil, err
	}
	if !spec.TTY {
		_ = ch.CloseWrite() // stdin at EOF from the start
	}
	proc.grp.id = Identity{Tag: spec.Tag, TTY: spec.TTY}
	if err := p.awaitIdentity(ctx, proc, false); err != nil {
		return nil, err
	}
	if !spec.TTY {
		proc.standbyAfter(r, spec)
	}
	return proc, nil
}

// launch sends command as the exec request of a session channel just
// opened on c, after a pty request if tty.
func (p *Pool) launch(c *conn, ch ssh.Channel, reqs <-chan *ssh.Request, r resolved, tty bool, term, command string) (*Process, error) {
	proc := &Process{conn: c, ch: ch, wrapperEnd: newWrapperEnd()}
	proc.groupControl = groupControl{grp: &Group{pool: p, target: r}, bound: p.cfg.DialTimeout + 10*time.Second}
	if !p.spawn(func() { proc.serveRequests(reqs) }) ||
		!p.spawn(func() { _, _ = io.Copy(&proc.stderr, ch.Stderr()) }) {
		ch.Close()
		return nil, errClosed
	}
	if tty {
		if err := requestPty(ch, term); err != nil {
			ch.Close()
			return nil, fmt.Errorf("remote: %s: %w", r.Target, err)
		}
	}
	ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{command}))
	if err != nil || !ok {
		ch.Close()
		if err == nil {
			err = errors.New("exec request refused")
		}
		return nil, fmt.Errorf("remote: %s: %w", r.Target, err)
	}
	proc.out = bufio.NewReaderSize(ch, 64<<10)
	return proc, nil
}

// errNoIdentity is a wrapper that ended before its identity line without
// saying why: a standby lost before it was used.
var errNoIdentity = errors.New("remote: the wrapper ended before its identity line")

// awaitIdentity waits for the wrapper's identity line; then the command
// runs, and its output flows to Output. On a standby, a wrapper that ended
// without a word is errNoIdentity: its command never started.
func (p *Pool) awaitIdentity(ctx context.Context, proc *Process, standby bool) error {
	r, ch := proc.grp.target, proc.ch
	got := make(chan identityLine, 1)
	go func() { got <- readIdentity(proc.out) }()
	var line identityLine
	select {
	case line = <-got:
	case <-ctx.Done():
		// The command may start anyway; once its identity shows, kill it.
		cleanup := func() {
			timer := time.NewTimer(p.cfg.DialTimeout)
			defer timer.Stop()
			select {
			case line := <-got:
				if line.err == nil {
					proc.grp.id.Pid, proc.grp.id.Pgid, proc.grp.id.Start = line.pid, line.pgid, line.start
					kctx, cancel := context.WithTimeout(p.life, p.cfg.DialTimeout)
					_ = proc.grp.Signal(kctx, unix.SIGKILL)
					cancel()
				}
				ch.Close()
			case <-timer.C:
				ch.Close()
				<-got
			}
		}
		if !p.spawn(cleanup) {
			ch.Close()
		}
		return context.Cause(ctx)
	}
	if line.err != nil {
		if standby && line.failure == "" {
			ch.Close()
			return errNoIdentity
		}
		err := proc.startError(r, line)
		ch.Close()
		return err
	}
	proc.grp.id.Pid, proc.grp.id.Pgid, proc.grp.id.Start = line.pid, line.pgid, line.start
	// A read of an SSH channel cannot be interrupted; a pipe in between
	// lets CloseOutput end the reader's wait at once.
	pr, pw := io.Pipe()
	proc.pr = pr
	started := p.spawn(func() {
		_, err := io.Copy(pw, proc.out)
		pw.CloseWithError(err)
		// After CloseOutput, keep draining so the command never blocks on
		// a full window.
		_, _ = io.Copy(io.Discard, proc.out)
	})
	if !started {
		ch.Close()
		return errClosed
	}
	proc.grp.startAwait()
	return nil
}

// startError explains a wrapper that ended without starting the command.
func (proc *Process) startError(r resolved, line identityLine) error {
	if line.failure != "" {
		return fmt.Errorf("remote: %s: %s", r.Target, line.failure)
	}
	if proc.conn.isDead() {
		return unavailablef("remote: %s: connection lost while starting: %v", r.Target, proc.conn.deadErr)
	}
	// Let the exit status arrive, briefly: it says what went wrong.
	select {
	case <-proc.exited:
	case <-time.After(time.Second):
	}
	msg := strings.TrimSpace(string(bytes.ToValidUTF8(append(line.junk, proc.stderr.Bytes()...), nil)))
	if msg == "" {
		msg = "no output"
	}
	status := "no exit status"
	if proc.Exited() && proc.exit.Lost == "" {
		status = "exit " + strconv.Itoa(proc.exit.Code)
		if proc.exit.Signaled {
			status = "signal " + unix.SignalName(proc.exit.Signal)
		}
	}
	return fmt.Errorf("remote: %s: the command did not start (%s): %s", r.Target, status, msg)
}

// requestPty asks for a terminal of 24x200 like the local runner's, with
// echo on.
func requestPty(ch ssh.Channel, term string) error {
	if term == "" {
		term = "dumb"
	}
	// RFC 4254 8: opcode byte, uint32 value; 0 ends the list.
	var modes []byte
	for _, m := range [][2]uint32{{ssh.ECHO, 1}, {ssh.TTY_OP_ISPEED, 38400}, {ssh.TTY_OP_OSPEED, 38400}} {
		modes = append(modes, byte(m[0]), byte(m[1]>>24), byte(m[1]>>16), byte(m[1]>>8), byte(m[1]))
	}
	modes = append(modes, 0)
	req := struct {
		Term             string
		Cols, Rows, W, H uint32
		Modes            string
	}{term, 200, 24, 0, 0, string(modes)}
	ok, err := ch.SendRequest("pty-req", true, ssh.Marshal(req))
	if err == nil && !ok {
		err = errors.New("pty request refused")
	}
	return err
}

type identityLine struct {
	pid, pgid int
	start     uint64
	failure   string // the wrapper's own error line
	junk      []byte // what came before the marker (login scripts), capped
	err       error
}

// readIdentity skips whatever login scripts print and reads the wrapper's
// identity line.
func readIdentity(br *bufio.Reader) identityLine {
	var res identityLine
	for {
		chunk, err := br.ReadSlice('\n')
		if i := bytes.Index(chunk, []byte("\x00MEVEDEL-EXEC")); i >= 0 && err == nil {
			res.junk = appendCapped(res.junk, chunk[:i])
			line := strings.TrimRight(string(chunk[i:]), "\r\n")
			if msg, ok := strings.CutPrefix(line, markerErr); ok {
				res.failure, res.err = msg, errors.New(msg)
				return res
			}
			f := strings.Fields(strings.TrimPrefix(line, marker))
			var e1, e2, e3 error
			if len(f) == 3 {
				res.pid, e1 = strconv.Atoi(f[0])
				res.pgid, e2 = strconv.Atoi(f[1])
				res.start, e3 = strconv.ParseUint(f[2], 10, 64)
			}
			if len(f) != 3 || e1 != nil || e2 != nil || e3 != nil {
				res.failure = fmt.Sprintf("malformed identity line %q", line)
				res.err = errors.New(res.failure)
			}
			return res
		}
		res.junk = appendCapped(res.junk, chunk)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			res.err = err
			return res
		}
	}
}

const junkCap = 4 << 10

func appendCapped(b, more []byte) []byte {
	if room := junkCap - len(b); room > 0 {
		b = append(b, more[:min(room, len(more))]...)
	}
	return b
}

// capped keeps the first junkCap bytes written to it and discards the rest.
type capped struct {
	mu  sync.Mutex
	buf []byte // guarded by mu
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf = appendCapped(c.buf, p)
	c.mu.Unlock()
	return len(p), nil
}

func (c *capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf)
}

// serveRequests takes the exit status from the channel's requests; the
// stream ends when the channel closes.
func (proc *Process) serveRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		switch req.Type {
		case "exit-status":
			var m struct{ Status uint32 }
			if ssh.Unmarshal(req.Payload, &m) == nil {
				proc.setExit(process.Exit{Code: int(m.Status)}, nil)
			}
		case "exit-signal":
			var m struct {
				Signal     string
				CoreDumped bool
				Error      string
				Lang       string
			}
			if ssh.Unmarshal(req.Payload, &m) == nil {
				proc.setExit(process.Exit{Signaled: true, Signal: unix.SignalNum("SIG" + m.Signal)}, nil)
			}
		}
		if req.WantReply {
			_ = req.Reply(false, nil)
		}
	}
	why := "the channel closed without an exit status"
	if proc.conn.isDead() {
		why = fmt.Sprintf("connection lost: %v", proc.conn.deadErr)
	}
	err := unavailablef("remote: %s: %s", proc.grp.target.Target, why)
	proc.setExit(process.Exit{Lost: "the connection to the host was lost before the command's exit status arrived: " + err.Error()}, err)
	proc.conn.closed()
}

// Pid is the leader's pid on the host: the bash running the command.
func (proc *Process) Pid() int { return proc.grp.id.Pid }

// Pgid is the command's process group on the host (the leader's pid).
func (proc *Process) Pgid() int { return proc.grp.id.Pgid }

// LeaderStart is the leader's start time on the host, in clock ticks since
// its boot (/proc/PID/stat field 22).
func (proc *Process) LeaderStart() uint64 { return proc.grp.id.Start }

// Identity is what proves the group is ours; a journal keeps it to find the
// group again (Pool.Group).
func (proc *Process) Identity() Identity { return proc.grp.id }

// Group is the remote group, for probes and signals bounded by a context.
func (proc *Process) Group() *Group { return proc.grp }

// groupControl is what both wrappers (an SSH channel, an engine exec) do
// to their command's group through the host: signal, interrupt, probe.
type groupControl struct {
	grp   *Group        // immutable
	bound time.Duration // immutable; one control round trip made without a caller's context
}

func (g groupControl) controlContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.grp.pool.life, g.bound)
}

// Signal sends sig to the group and to tagged descendants that left it,
// only once the same remote script has proven them ours; ErrAmbiguous
// when it could not.
func (g groupControl) Signal(sig syscall.Signal) error {
	ctx, cancel := g.controlContext()
	defer cancel()
	return g.grp.Signal(ctx, sig)
}

// Interrupt delivers Ctrl-C: SIGINT to the terminal's foreground group in
// tty mode, to the process group otherwise. ESRCH when nothing is left.
func (g groupControl) Interrupt() error {
	ctx, cancel := g.controlContext()
	defer cancel()
	return g.grp.Interrupt(ctx)
}

// Alive reports whether the probe finds the group live. Dead, Ambiguous
// (never ours to signal) and a failed probe are all "not alive".
func (g groupControl) Alive() bool {
	ctx, cancel := g.controlContext()
	defer cancel()
	l, err := g.grp.Probe(ctx)
	return err == nil && l == Live
}

// Probe asks the host, in one round trip, whether the group is alive.
func (g groupControl) Probe(ctx context.Context) (Liveness, error) { return g.grp.Probe(ctx) }

// Write sends input to the terminal; it fails in pipe mode.
func (proc *Process) Write(b []byte) (int, error) {
	if !proc.grp.id.TTY {
		return 0, errors.New("remote: stdin is closed in pipe mode")
	}
	n, err := proc.ch.Write(b)
	if errors.Is(err, io.EOF) {
		err = os.ErrClosed // the command's end closed the channel, as a local terminal's would be
	}
	return n, err
}

// CloseOutput unblocks a reader of Output for good. It closes the channel:
// an exit status that has not arrived yet is lost.
func (proc *Process) CloseOutput() error {
	proc.pr.Close()
	err := proc.ch.Close()
	if err == io.EOF {
		err = nil // already closed by the server
	}
	return err
}

// RemoteMode says the command runs through the wrapper.
func (proc *Process) RemoteMode() string { return ModeWrapper }

// Transport is closed when the connection carrying the command dies.
func (proc *Process) Transport() <-chan struct{} { return proc.conn.dead }

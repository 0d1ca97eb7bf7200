package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote/agent"
)

// The wrapper in a container. Where the host agent cannot run in a
// container (no build for its system or architecture, nowhere it may be
// written and run), or where the wrapper is forced, each command runs
// through one exec of the engine (`podman exec -i [-t] [--user U] --
// box ...`) holding a bash wrapper, and probes, signals and looks go
// through one long-lived exec holding the SSH wrapper's control shell.
// The command's side is the SSH wrapper's own (wrapperCommand): it makes
// its group, prints its identity line and execs the command, so the same
// identity (pid, start time, the container's incarnation), stop of the
// whole group, probes and cleanup of lingering descendants hold. sudo
// targets need none: their agent is this machine's own build.
//
// An engine's exec reports a command killed by a signal as 128+N, as an
// exit of 128+N would be; so the command is not the exec's own process
// but a child of it, which knows: in pipe mode a bash that runs the
// command as a background job and reads, when the job ends, whether the
// shell took it for an exit or a signal (jobs -l says Done or Exit N, or
// the signal's description); in tty mode an interactive bash, which
// gives the terminal to the command as its foreground job and reports
// the death of a foreground job by a signal (SIGPIPE excepted) on its own
// output. Either prints the end on a trailer line after the command's
// output, marked with a nonce of its start so no output can forge it.

// errNoAgentHere classifies why a container's commands go through the
// wrapper: the agent cannot run there, or the wrapper is forced.
var errNoAgentHere = errors.New("remote: no host agent runs in the container")

type noAgentError struct{ msg string }

func (e noAgentError) Error() string   { return e.msg }
func (e noAgentError) Unwrap() []error { return []error{errNoAgentHere, ErrUnavailable} }

func noAgentf(f string, a ...any) error { return noAgentError{fmt.Sprintf(f, a...)} }

// engineSlot is the wrapper's state for one container target.
type engineSlot struct {
	ctl controller // the control shell in the container

	mu      sync.Mutex
	inc     Incarnation             // guarded by mu; the incarnation the control shell runs in
	noAgent error                   // guarded by mu; why the agent cannot run there, once found
	procs   map[*engineProcess]bool // guarded by mu; commands whose exec runs
}

// engine returns r's wrapper state, made on first use.
func (p *Pool) engine(r resolved) (*engineSlot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if p.engines == nil {
		p.engines = map[string]*engineSlot{}
	}
	es := p.engines[r.key()]
	if es == nil {
		es = &engineSlot{procs: map[*engineProcess]bool{}}
		p.engines[r.key()] = es
	}
	return es, nil
}

// closeEngines ends the control shells and leaves the commands' execs
// (Close): the commands run on, as a command on an SSH host does when its
// connection closes.
func (p *Pool) closeEngines(engines map[string]*engineSlot) {
	for _, es := range engines {
		es.ctl.mu.Lock()
		if run := es.ctl.run; run != nil {
			run.fail(errClosed)
		}
		es.ctl.mu.Unlock()
		es.mu.Lock()
		procs := es.procs
		es.procs = map[*engineProcess]bool{}
		es.mu.Unlock()
		for ep := range procs {
			ep.car.child.Kill()
			ep.car.Close()
		}
	}
}

// containerAgent returns r's host agent, or a noAgentError when its
// commands go through the wrapper; that the agent cannot run there is
// found once.
func (p *Pool) containerAgent(ctx context.Context, r resolved) (*agentClient, error) {
	if p.cfg.Mode == ModeWrapper {
		return nil, noAgentf("remote: %s: the wrapper is forced", r.Target)
	}
	if !agent.Deployable {
		return nil, noAgentf("remote: %s: this program cannot serve as a host agent", r.Target)
	}
	es, err := p.engine(r)
	if err != nil {
		return nil, err
	}
	es.mu.Lock()
	why := es.noAgent
	es.mu.Unlock()
	if why != nil {
		return nil, why
	}
	cl, err := p.streamAgent(ctx, r)
	if errors.Is(err, errNoAgentHere) {
		es.mu.Lock()
		es.noAgent = err
		es.mu.Unlock()
	}
	return cl, err
}

// engineExec is the engine's command line that runs argv in r's
// container as r's user, its stdin kept open (and a terminal with tty).
// Detach keys are off: no input sequence may end the exec.
func (p *Pool) engineExec(r resolved, tty bool, argv ...string) []string {
	a := []string{p.program(r.Method), "exec", "-i"}
	if tty {
		a = append(a, "-t")
	}
	if r.Method == "kubernetes" {
		// kubectl exec has no user and, without -t, no escape character.
		pod, container := r.pod()
		if container != "" {
			a = append(a, "-c", container)
		}
		return append(append(a, pod, "--"), argv...)
	}
	a = append(a, "--detach-keys=")
	if r.User != "" {
		a = append(a, "--user", r.User)
	}
	return append(append(a, "--", r.Host), argv...)
}

// cleanBash starts bash without what would change how our scripts run.
var cleanBash = []string{"env", "-u", "BASH_ENV", "-u", "SHELLOPTS", "-u", "BASHOPTS", "bash"}

// bootLine goes before the control shell in a container: the host's boot
// id and the container's host name, which the agent's hello would say.
const bootLine = `read -r b </proc/sys/kernel/random/boot_id
printf '\0MEVEDEL-EXEC-BOOT %s %s\n' "${b:--}" "${HOSTNAME:--}"
`

const bootMarker = "\x00MEVEDEL-EXEC-BOOT "

// pingRequest is a control request that costs one read: pid 1's start
// time is never 0, so the answer is "ambiguous other".
var pingRequest = controlRequest(Identity{Pid: 1, Pgid: 1}, actProbe, "0")

// startEngineCtl starts the control shell in r's container, then asks
// the engine which incarnation runs, then has the shell answer once: a
// shell that answers after the engine named the incarnation runs in it,
// since every process of an earlier one was gone before a later one
// started. es records it. A shell that could not start in a container
// the engine then says runs (made again meanwhile, as the shell tried)
// is started once more at once, not at the next look.
func (p *Pool) startEngineCtl(ctx context.Context, r resolved, es *engineSlot) (*ctlRun, error) {
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	run, err, again := p.startEngineCtlOnce(ctx, r, es)
	if again {
		run, err, _ = p.startEngineCtlOnce(ctx, r, es)
	}
	return run, err
}

// startEngineCtlOnce is one try of startEngineCtl; again says the shell
// did not start although the engine said the container runs.
func (p *Pool) startEngineCtlOnce(ctx context.Context, r resolved, es *engineSlot) (_ *ctlRun, _ error, again bool) {
	// Asked meanwhile, the engine says at once why a start fails (no
	// such container, not running).
	type inspected struct {
		inc Incarnation
		err error
	}
	pre := make(chan inspected, 1)
	if !p.spawn(func() {
		inc, err := p.inspect(ctx, r)
		pre <- inspected{inc, err}
	}) {
		return nil, errClosed, false
	}
	argv := p.engineExec(r, false, append(cleanBash, "-c", bootLine+controlScript)...)
	car, err := startCarrier(p, argv, nil)
	if err != nil {
		return nil, unavailablef("remote: %s: starting %s: %v", r.Target, argv[0], err), false
	}
	stop := context.AfterFunc(ctx, func() { car.Close() })
	br := bufio.NewReader(car)
	var boot []string
	err = skipTo(br, bootMarker)
	if err == nil {
		var line string
		line, err = br.ReadString('\n')
		boot = strings.Fields(line)
	}
	if err == nil {
		err = skipTo(br, ctlReady)
	}
	if err != nil || len(boot) != 2 {
		stop()
		car.Close()
		if ctx.Err() != nil {
			return nil, unavailablef("remote: %s: the control shell did not start: %v", r.Target, context.Cause(ctx)), false
		}
		if in := <-pre; in.err != nil {
			return nil, in.err, false // no such container, or not running, named
		}
		return nil, unavailablef("remote: %s: the control shell did not start in the container (%s)", r.Target, car.endWords()), true
	}
	inc, err := p.inspect(ctx, r)
	if err == nil {
		_, err = io.WriteString(car, pingRequest)
	}
	if err == nil {
		_, err = br.ReadString('\n')
	}
	if !stop() || err != nil {
		car.Close()
		if ctx.Err() != nil || err == nil {
			return nil, unavailablef("remote: %s: the control shell did not start: %v", r.Target, context.Cause(ctx)), false
		}
		if errors.Is(err, ErrUnavailable) {
			return nil, err, false
		}
		return nil, unavailablef("remote: %s: the control shell ended as it started (%s)", r.Target, car.endWords()), false
	}
	if boot[0] != "-" {
		inc.BootID = boot[0]
	}
	if boot[1] != "-" {
		inc.Hostname = boot[1]
	}
	es.mu.Lock()
	var stale []*engineProcess
	if es.inc.Key() != "" && es.inc.Key() != inc.Key() {
		es.noAgent = nil // another container under the name: its agent may run
		for ep := range es.procs {
			if ep.inc.Key() != inc.Key() {
				stale = append(stale, ep)
			}
		}
	}
	es.inc = inc
	es.mu.Unlock()
	// Their container is gone: what their execs would still say (an
	// engine may take seconds to end them) cannot come.
	for _, ep := range stale {
		ep.car.child.Kill()
		ep.car.Close()
	}
	run := &ctlRun{ch: car}
	if !p.spawn(func() { run.read(br) }) {
		car.Close()
		return nil, errClosed, false
	}
	return run, nil, false
}

// stderrGrace is how long an ended carrier's stderr may stay open (held
// by what the engine left behind, conmon) before its words are read.
const stderrGrace = 500 * time.Millisecond

// endWords says how a carrier that failed ended: its exit status and
// what it wrote on stderr, waited for a little.
func (c *carrier) endWords() string {
	bound, cancel := context.WithTimeout(context.Background(), startErrorWait)
	defer cancel()
	status := "no exit status"
	select {
	case <-c.child.Done():
		status = exitWords(c.child.Status())
	case <-bound.Done():
	}
	grace := time.NewTimer(stderrGrace)
	defer grace.Stop()
	select {
	case <-c.errDone:
	case <-grace.C:
	}
	msg := strings.TrimSpace(string(c.stderr.Bytes()))
	if msg == "" {
		return c.argv0 + " " + status
	}
	return c.argv0 + " " + status + ": " + msg
}

// engineUp makes sure r's control shell runs (so the container is there)
// and returns the incarnation it runs in.
func (p *Pool) engineUp(ctx context.Context, r resolved) (Incarnation, error) {
	es, err := p.engine(r)
	if err != nil {
		return Incarnation{}, err
	}
	es.ctl.mu.Lock()
	_, err = es.ctl.ensure(ctx, func(ctx context.Context) (*ctlRun, error) { return p.startEngineCtl(ctx, r, es) })
	es.ctl.mu.Unlock()
	if err != nil {
		return Incarnation{}, err
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.inc, nil
}

// engineControl sends one request to r's control shell and returns its
// answer and the incarnation the shell runs in. A shell that ended under
// the request (its container stopped, say) is started again once.
func (p *Pool) engineControl(ctx context.Context, r resolved, req string) (string, Incarnation, error) {
	es, err := p.engine(r)
	if err != nil {
		return "", Incarnation{}, err
	}
	start := func(ctx context.Context) (*ctlRun, error) { return p.startEngineCtl(ctx, r, es) }
	never := func() bool { return false }
	for try := 0; ; try++ {
		line, err := es.ctl.request(ctx, req, start, never)
		if err == nil {
			es.mu.Lock()
			defer es.mu.Unlock()
			return line, es.inc, nil
		}
		if ctx.Err() != nil {
			return "", Incarnation{}, context.Cause(ctx)
		}
		if errors.Is(err, ErrUnavailable) {
			return "", Incarnation{}, err // it could not be started
		}
		if try == 1 {
			return "", Incarnation{}, unavailablef("remote: %s: the control shell in the container ended: %v", r.Target, err)
		}
	}
}

// askEngine is ask in a container: a container gone, or found in another
// incarnation than the group's, holds nothing of it.
func (g *Group) askEngine(ctx context.Context, req string) (string, bool, error) {
	line, inc, err := g.pool.engineControl(ctx, g.target, req)
	gone := errors.Is(err, errTargetGone)
	if err != nil && !gone {
		return "", false, err
	}
	if g.id.Boot != "" && (gone || inc.Key() != g.id.Boot) {
		g.mu.Lock()
		g.final, g.replaced = Dead, true
		g.mu.Unlock()
		return "", true, nil
	}
	return line, false, err
}

// The wrappers' bash sources: $1 is the trailer's nonce, $2 the
// command's launch (wrapperCommand).
const (
	// enginePipeWrapper runs the launch as a background job (the
	// identity prologue makes it a session of its own) and reads its end
	// from jobs -l in the CHLD trap, through a pipe of its own (no fork).
	enginePipeWrapper = `set -f
n=$1
exec {p}<> <(:)
trap 'builtin jobs -l %1 >&$p 2>/dev/null && builtin read -r -t 1 -u $p st' CHLD
bash -c "$2" mevedel-exec &
c=$!
while :; do
  builtin wait $c
  rc=$?
  builtin set -- $st
  case $3 in
  Done) k=exit rc=0 ;;
  Exit) k=exit rc=$4 ;;
  ''|Running|Stopped) builtin kill -0 $c 2>/dev/null && continue; k=exit ;;
  *) k=signal rc=$((rc - 128)) ;;
  esac
  break
done
builtin printf '\0MEVEDEL-EXEC-END %s %s %s\n' "$n" $k $rc
`
	// engineTTYWrapper is an interactive bash (job control: the command
	// gets its own group and the terminal) whose own output goes to a
	// pipe of its own: a line there after the job is the shell's report
	// of a death by signal (a bare newline for SIGINT).
	engineTTYWrapper = `set -f +o history
unset HISTFILE
n=$1
exec {p}<> <(:)
exec {o}>&1 {e}>&2 >&$p 2>&$p
bash -c "$2" mevedel-exec >&$o 2>&$e {o}>&- {e}>&- {p}>&-
rc=$? k=exit
builtin echo "$n" >&$p
while builtin read -r -t 1 -u $p l && [[ $l != "$n" ]]; do k=signal; done
(( rc > 128 )) || k=exit
[[ $k = signal ]] && rc=$((rc - 128))
builtin printf '\0MEVEDEL-EXEC-END %s %s %s\n' "$n" $k $rc >&$o
`
)

// startEngine runs spec in the container t names through the wrapper.
// It returns once the command has started (its identity line arrived);
// ctx bounds the start, not the command.
func (p *Pool) startEngine(ctx context.Context, t Target, spec launchSpec) (*engineProcess, error) {
	if spec.Tag != "" && (!strings.Contains(spec.Tag, "=") || strings.ContainsAny(spec.Tag, " \t\r\n")) {
		return nil, fmt.Errorf("remote: tag %q must be KEY=value without blanks", spec.Tag)
	}
	r, err := p.resolve(t)
	if err != nil {
		return nil, err
	}
	es, err := p.engine(r)
	if err != nil {
		return nil, err
	}
	inc, err := p.engineUp(ctx, r)
	if err != nil {
		return nil, err
	}
	nonce := rand.Text()
	argv := append(cleanBash[:len(cleanBash):len(cleanBash)], "-c", enginePipeWrapper)
	if spec.TTY {
		argv = append(cleanBash[:len(cleanBash):len(cleanBash)], "--norc", "--noprofile", "-i", "-c", engineTTYWrapper)
	}
	argv = p.engineExec(r, spec.TTY, append(argv, "mevedel-exec", nonce, wrapperCommand(spec))...)
	car, err := startCarrier(p, argv, nil)
	if err != nil {
		return nil, unavailablef("remote: %s: starting %s: %v", r.Target, argv[0], err)
	}
	// In pipe mode stdin stays open but unread (the command's is
	// /dev/null): an engine's command line may drop output that comes
	// after its input closed.
	ep := &engineProcess{car: car, inc: inc, nonce: nonce, wrapperEnd: newWrapperEnd()}
	ep.groupControl = groupControl{grp: &Group{pool: p, target: r, id: Identity{Tag: spec.Tag, TTY: spec.TTY, Boot: inc.Key()}}, bound: streamTimeout}
	br := bufio.NewReaderSize(car, 64<<10)
	got := make(chan identityLine, 1)
	go func() { got <- readIdentity(br) }()
	var line identityLine
	select {
	case line = <-got:
	case <-ctx.Done():
		// The command may start anyway; once its identity shows, kill it.
		cleanup := func() {
			timer := time.NewTimer(streamTimeout)
			defer timer.Stop()
			select {
			case line := <-got:
				if line.err == nil {
					ep.grp.id.Pid, ep.grp.id.Pgid, ep.grp.id.Start = line.pid, line.pgid, line.start
					kctx, cancel := context.WithTimeout(p.life, streamTimeout)
					_ = ep.grp.Signal(kctx, syscall.SIGKILL)
					cancel()
				}
			case <-timer.C:
			}
			car.child.Kill()
			car.Close()
		}
		if !p.spawn(cleanup) {
			car.child.Kill()
			car.Close()
		}
		return nil, context.Cause(ctx)
	}
	if line.err != nil {
		car.Close()
		if line.failure != "" {
			return nil, fmt.Errorf("remote: %s: %s", r.Target, line.failure)
		}
		msg := strings.TrimSpace(string(bytes.ToValidUTF8(line.junk, nil)))
		if msg != "" {
			msg = ": " + msg
		}
		return nil, fmt.Errorf("remote: %s: the command did not start (%s)%s", r.Target, car.endWords(), msg)
	}
	ep.grp.id.Pid, ep.grp.id.Pgid, ep.grp.id.Start = line.pid, line.pgid, line.start
	pr, pw := io.Pipe()
	ep.pr = pr
	es.mu.Lock()
	es.procs[ep] = true
	es.mu.Unlock()
	if !p.spawn(func() {
		ep.pump(br, pw)
		es.mu.Lock()
		delete(es.procs, ep)
		es.mu.Unlock()
	}) {
		car.child.Kill()
		car.Close()
		return nil, errClosed
	}
	ep.grp.startAwait()
	return ep, nil
}

// engineProcess is one command running in a container through the
// wrapper, over its own engine exec.
type engineProcess struct {
	car *carrier // immutable; the engine's exec
	groupControl
	inc   Incarnation // immutable; the container's when the command started
	nonce string      // immutable; marks the trailer

	wrapperEnd // its output, less the trailer, and the end the trailer said
}

// pump passes the command's output on to Output, less the wrapper's
// trailer, which ends Wait; output that comes after it (from lingering
// descendants) passes too. An exec that ends without a trailer lost the
// command's end.
func (ep *engineProcess) pump(br *bufio.Reader, pw *io.PipeWriter) {
	sc := trailerScan{marker: []byte("\x00MEVEDEL-EXEC-END " + ep.nonce + " ")}
	buf := make([]byte, 32<<10)
	var werr error
	for {
		n, err := br.Read(buf)
		if n > 0 {
			out, exit, found := sc.feed(buf[:n])
			if werr == nil && len(out) > 0 {
				_, werr = pw.Write(out) // after CloseOutput: drained, so the exec never blocks
			}
			if found {
				ep.setExit(exit, nil)
			}
		}
		if err != nil {
			break
		}
	}
	if rest := sc.held; werr == nil && len(rest) > 0 {
		_, _ = pw.Write(rest)
	}
	pw.Close()
	if ep.Exited() {
		return
	}
	why := ep.car.endWords()
	err := unavailablef("remote: %s: %s ended before the command's end was reported", ep.grp.target.Target, why)
	ep.setExit(process.Exit{Lost: "the command's exit status was lost: the container engine's exec carrying it ended first (" + why + ")"}, err)
}

// trailerScan finds the wrapper's trailer line in a stream, holding back
// what may be its beginning until the rest comes.
type trailerScan struct {
	marker []byte
	held   []byte
	done   bool
}

// feed takes the next bytes and returns those to pass on, and the end
// the trailer reported once it is whole.
func (s *trailerScan) feed(b []byte) (out []byte, exit process.Exit, found bool) {
	if s.done {
		return b, exit, false
	}
	data := append(s.held, b...)
	s.held = nil
	i := bytes.Index(data, s.marker)
	if i < 0 {
		// Hold a tail that may be the marker's start.
		k := len(data)
		for j := bytes.LastIndexByte(data, 0); j >= 0; j = bytes.LastIndexByte(data[:j], 0) {
			if bytes.HasPrefix(s.marker, data[j:]) {
				k = j
			}
			if len(data)-j >= len(s.marker) {
				break
			}
		}
		s.held = append([]byte(nil), data[k:]...)
		return data[:k], exit, false
	}
	j := bytes.IndexByte(data[i:], '\n')
	if j < 0 {
		s.held = append([]byte(nil), data[i:]...)
		return data[:i], exit, false
	}
	f := strings.Fields(string(data[i+len(s.marker) : i+j]))
	out = append(append([]byte(nil), data[:i]...), data[i+j+1:]...)
	s.done = true
	n := -1
	if len(f) == 2 {
		if v, err := strconv.Atoi(f[1]); err == nil && v >= 0 && v < 256 {
			n = v
		}
	}
	switch {
	case n >= 0 && f[0] == "exit":
		return out, process.Exit{Code: n}, true
	case n > 0 && f[0] == "signal":
		return out, process.Exit{Signaled: true, Signal: syscall.Signal(n)}, true
	}
	return out, exit, false // malformed: the end stays unknown
}

// Pid is the leader's pid in the container: the bash running the command.
func (ep *engineProcess) Pid() int { return ep.grp.id.Pid }

// Pgid is the command's process group (the leader's pid).
func (ep *engineProcess) Pgid() int { return ep.grp.id.Pgid }

// LeaderStart is the leader's start time in clock ticks since the host's
// boot.
func (ep *engineProcess) LeaderStart() uint64 { return ep.grp.id.Start }

// Identity is what proves the group is ours.
func (ep *engineProcess) Identity() Identity { return ep.grp.id }

// Group is the group in the container, for probes and signals.
func (ep *engineProcess) Group() *Group { return ep.grp }

// Incarnation is the container's when the command started, with the
// host's boot id and the container's host name.
func (ep *engineProcess) Incarnation() Incarnation { return ep.inc }

// Replaced reports whether the container was found gone, or in another
// incarnation, when the group was asked about: nothing of the command
// was left, and nothing was signalled.
func (ep *engineProcess) Replaced() bool { return ep.grp.Replaced() }

// RemoteMode says the command runs through the wrapper.
func (ep *engineProcess) RemoteMode() string { return ModeWrapper }

// Write sends input to the terminal; it fails in pipe mode.
func (ep *engineProcess) Write(b []byte) (int, error) {
	if !ep.grp.id.TTY {
		return 0, errors.New("remote: stdin is closed in pipe mode")
	}
	n, err := ep.car.Write(b)
	if err != nil {
		err = os.ErrClosed // the exec has ended, as a local terminal's would be
	}
	return n, err
}

// CloseOutput unblocks a reader of Output for good and lets the exec go:
// an end that has not been reported yet is lost.
func (ep *engineProcess) CloseOutput() error {
	ep.pr.Close()
	return ep.car.Close()
}

// WaitingForInput reports whether the command waits for terminal input
// (always false without a terminal).
func (ep *engineProcess) WaitingForInput(ctx context.Context) (bool, error) {
	if !ep.grp.id.TTY {
		return false, nil
	}
	w, _, err := ep.grp.look(ctx, "wait")
	return w, err
}

// Listening returns the TCP ports the command's process tree listens on.
func (ep *engineProcess) Listening(ctx context.Context) ([]process.Listener, error) {
	_, ls, err := ep.grp.look(ctx, "ports")
	return ls, err
}

// agentOf returns the host agent of stream target r, for what only an
// agent does (publication, a forwarded port): a container whose commands
// go through the wrapper has none, and says so.
func (p *Pool) agentOf(ctx context.Context, r resolved) (*agentClient, error) {
	if r.Container() {
		return p.containerAgent(ctx, r)
	}
	return p.streamAgent(ctx, r)
}

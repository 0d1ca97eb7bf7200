package execution

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
	"golang.org/x/sys/unix"
)

// stopCause is why an execution is being stopped; it becomes the
// termination fact.
type stopCause struct {
	term   Termination
	reason string
}

func (c *stopCause) Error() string { return string(c.term) + ": " + c.reason }

// Tuning of the settle path.
const (
	probeInterval  = 5 * time.Millisecond  // first wait between liveness probes
	probeMax       = 50 * time.Millisecond // longest wait between probes
	reclaimProbe   = probeMax              // recovery: wait between looks at what it killed
	drainTimeout   = 2 * time.Second       // output EOF after every tracked writer is gone
	unkillableWait = 30 * time.Second      // after SIGKILL, before settling anyway
	progressFirst  = 2 * time.Second
	progressEvery  = 250 * time.Millisecond
	progressChars  = 2000
	changedEvery   = time.Second // exec/changed for output growth, at most
)

// Execution is one managed command. Everything a caller sees of it is a
// Facts value copied out under mu.
type Execution struct {
	s         *Session     // immutable
	id        string       // immutable
	spec      process.Spec // immutable
	ticket    *ticket      // immutable
	sp        *spool.Spool
	grace     time.Duration // immutable
	toolUseID string        // immutable
	ctx       context.Context
	cancel    context.CancelCauseFunc // the cause becomes the termination
	started   chan struct{}           // closed once, when running or settled without running
	done      chan struct{}           // closed once, at settlement
	retired   chan struct{}           // closed once, when dropped from the registry
	monitor   *Monitor                // immutable; set for a monitor's own execution
	remote    *remoteExec             // immutable; set for a command on an SSH host
	// delivered is closed once no delivery of the result is pending: none
	// was made, or it was durably acknowledged or discarded.
	delivered     chan struct{}
	deliveredOnce sync.Once
	// mailed: the settlement meant a delivery, so the journal must say
	// when it is no longer pending.
	mailed atomic.Bool

	obsMu sync.Mutex // serialises observations, so no two read the same unread range

	mu     sync.Mutex
	facts  Facts           // guarded by mu
	proc   process.Process // guarded by mu; set once running
	final  *Observation    // guarded by mu; the final observation, once claimed
	waiter *waitToken      // guarded by mu; the waiting observation in progress
	// stopClaimed: exec/stop asked for the end and its reply claims the
	// result; guarded by mu.
	stopClaimed bool
	// decideOnEndWait defers the delivery decision to the waiting
	// observation in progress at settlement; guarded by mu.
	decideOnEndWait bool
	leader          *transcript.Leader // guarded by mu; set once running
	delivery        string             // guarded by mu; id of the pending delivery
	readByModel     bool               // guarded by mu; the owner's model saw the final result
	// inputClosed is set once the input goroutine stopped taking input;
	// guarded by mu.
	inputClosed bool
	inputs      chan inputReq // immutable; queued terminal input
}

// ID returns the execution id.
func (e *Execution) ID() string { return e.id }

// Facts returns a snapshot of the execution's facts.
func (e *Execution) Facts() Facts {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshotLocked()
}

func (e *Execution) snapshotLocked() Facts {
	f := e.facts
	f.OutputBytes = e.sp.Bytes()
	f.OutputLines = e.sp.Lines()
	f.UnreadBytes = e.sp.Unread()
	if f.StartedAt != nil {
		end := time.Now()
		if f.EndedAt != nil {
			end = f.EndedAt.Time
		}
		f.WallMs = end.Sub(f.StartedAt.Time).Milliseconds()
	}
	if f.ExitCode != nil {
		c := *f.ExitCode
		f.ExitCode = &c
	}
	return f
}

// changeLocked bumps the version after a change of facts.
func (e *Execution) changeLocked() { e.facts.Version++ }

func (e *Execution) setState(to State) error {
	if err := transition(e.facts.State, to); err != nil {
		if strictTransitions {
			panic(err)
		}
		return err
	}
	e.facts.State = to
	e.changeLocked()
	return nil
}

// run drives the execution from admission to settlement.
func (e *Execution) run() {
	defer e.s.wg.Done()
	select {
	case <-e.ticket.admitted:
	case <-e.ctx.Done():
		e.settle(nil, e.causeOf(), "")
		return
	}
	spec := e.spec
	spec.Env = process.MergeEnv(Defaults, spec.Env)
	proc, err := e.runner().Start(e.ctx, spec)
	if err != nil {
		cause := &stopCause{term: SpawnFailed, reason: err.Error()}
		errors.As(err, &cause) // a stop that came during the start wins
		e.settle(nil, cause, "")
		return
	}
	if e.remote != nil {
		e.remote.pub.start(e)
	}

	e.mu.Lock()
	_ = e.setState(Running)
	e.proc = proc
	e.facts.Pid, e.facts.Pgid = proc.Pid(), proc.Pgid()
	e.facts.StartedAt = stamp(time.Now())
	yielded := e.facts.Yielded
	e.leader = leaderOf(e.facts, proc)
	// Journaled under mu, so a concurrent yield's row comes after it.
	e.journalRow(e.snapshotLocked(), e.leader)
	e.mu.Unlock()
	close(e.started)
	if yielded {
		e.s.sched.release(e.ticket) // yielded while queued: never holds the lane
	}
	e.s.changed()

	var aux sync.WaitGroup
	copied := make(chan struct{})
	aux.Add(1)
	go func() {
		defer aux.Done()
		defer close(copied)
		e.copyOutput(proc.Output())
	}()
	quiet := make(chan struct{}) // ends progress and input before settlement
	if e.facts.TTY {
		aux.Add(1)
		go func() {
			defer aux.Done()
			e.writeInput(proc, quiet)
		}()
	}
	if e.toolUseID != "" {
		aux.Add(1)
		go func() {
			defer aux.Done()
			e.progress(quiet)
		}()
	}

	exited := make(chan process.Exit, 1)
	aux.Add(1)
	go func() {
		defer aux.Done()
		ex, err := proc.Wait()
		if err != nil {
			logf("execution %s: wait: %v", e.id, err)
		}
		exited <- ex
	}()

	// Wait for the shell, acting on a stop if one comes first.
	var cause *stopCause
	var kill <-chan time.Time
	stop := e.ctx.Done()
	var exit process.Exit
wait:
	for {
		select {
		case exit = <-exited:
			break wait
		case <-stop:
			stop = nil
			cause = e.causeOf()
			e.mu.Lock()
			_ = e.setState(Stopping)
			e.mu.Unlock()
			e.s.changed()
			_ = proc.Signal(unix.SIGTERM)
			kill = time.After(e.grace)
		case <-kill:
			kill = nil
			_ = proc.Signal(unix.SIGKILL)
		}
	}

	// The shell is gone; descendants that linger are cleaned up the same
	// way, and settlement waits until none is alive.
	if cause == nil && proc.Alive() {
		_ = proc.Signal(unix.SIGTERM)
		kill = time.After(e.grace)
	}
	interval := probeInterval
	var giveUp <-chan time.Time
probe:
	for proc.Alive() {
		select {
		case <-kill:
			kill = nil
			_ = proc.Signal(unix.SIGKILL)
			giveUp = time.After(unkillableWait)
		case <-giveUp:
			// Only a process stuck in the kernel survives SIGKILL this
			// long; settling beats hanging, and the log says why.
			logf("execution %s: processes still alive %v after SIGKILL; settling without them", e.id, unkillableWait)
			break probe
		case <-time.After(interval):
		}
		interval = min(2*interval, probeMax)
	}

	select {
	case <-copied:
	case <-time.After(drainTimeout):
		// A writer we could not trace holds the output open.
		logf("execution %s: output still open after every tracked process ended; closing it", e.id)
		_ = proc.CloseOutput()
		<-copied
	}
	_ = proc.CloseOutput()
	close(quiet)
	aux.Wait()
	e.beforeSettle()
	e.settle(&exit, cause, "")
}

// causeOf returns the recorded stop cause.
func (e *Execution) causeOf() *stopCause {
	var c *stopCause
	if errors.As(context.Cause(e.ctx), &c) {
		return c
	}
	return &stopCause{term: Stopped}
}

// copyOutput spools the merged output until EOF. Past the cap or on a
// write error it asks for a stop and keeps draining, so the child never
// blocks on a full pipe while it is being stopped.
func (e *Execution) copyOutput(r io.Reader) {
	buf := make([]byte, 256<<10)
	// Growth inside a window is announced at its end, so a panel never
	// keeps a stale size after the output goes quiet. announced (since
	// base, on the monotonic clock) and owed are shared with that trailing
	// timer.
	base := time.Now()
	var announced atomic.Int64
	announced.Store(-int64(changedEvery))
	var owed atomic.Bool
	var trailing *time.Timer // left to fire after EOF: what it owes is still news
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := e.sp.Write(buf[:n]); werr != nil {
				if errors.Is(werr, spool.ErrLimit) {
					e.cancel(&stopCause{term: OutputLimit, reason: fmt.Sprintf("output exceeded the limit of %d bytes", e.s.limits.OutputLimitBytes)})
				} else {
					e.cancel(&stopCause{term: SpoolFailed, reason: werr.Error()})
				}
			}
			if e.monitor != nil {
				e.monitor.feed(buf[:n])
			}
			e.mu.Lock()
			e.changeLocked()
			e.mu.Unlock()
			// A panel shows output sizes from exec/changed; once a second
			// is enough for that.
			since := time.Since(base) - time.Duration(announced.Load())
			if since >= changedEvery {
				announced.Store(int64(time.Since(base)))
				owed.Store(false)
				e.s.changed()
			} else if !owed.Swap(true) {
				if trailing == nil {
					trailing = time.AfterFunc(changedEvery-since, func() {
						if owed.Swap(false) {
							announced.Store(int64(time.Since(base)))
							e.s.changed()
						}
					})
				} else {
					trailing.Reset(changedEvery - since)
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				logf("execution %s: reading output: %v", e.id, err)
			}
			return
		}
	}
}

// progress sends exec/progress for executions with a toolUseId: first
// after 2 s, then at most 4 per second while something changed.
func (e *Execution) progress(quiet <-chan struct{}) {
	timer := time.NewTimer(progressFirst)
	defer timer.Stop()
	var last uint64
	for {
		select {
		case <-quiet:
			return
		case <-timer.C:
		}
		f := e.Facts()
		if f.Version != last && f.State != Settled {
			last = f.Version
			tail, _ := e.sp.Tail(progressChars)
			e.s.m.events.Progress(f, tail)
		}
		timer.Reset(progressEvery)
	}
}

// settle records the end. exit is nil when the shell never ran.
func (e *Execution) settle(exit *process.Exit, cause *stopCause, reason string) {
	_ = e.sp.Close()
	e.mu.Lock()
	f := &e.facts
	switch {
	case exit != nil && exit.Lost != "":
		// The end cannot be proven, whatever else happened.
		f.Termination, f.Reason = Unknown, exit.Lost
	case cause != nil:
		f.Termination, f.Reason = cause.term, cause.reason
	case e.sp.Limited():
		f.Termination = OutputLimit
		f.Reason = fmt.Sprintf("output exceeded the limit of %d bytes", e.s.limits.OutputLimitBytes)
	case e.sp.Failed() != nil:
		f.Termination, f.Reason = SpoolFailed, e.sp.Failed().Error()
	case exit != nil && exit.Signaled:
		f.Termination = Signaled
	default:
		f.Termination = Exited
	}
	if exit != nil && exit.Lost == "" {
		if exit.Signaled {
			f.Signal = unix.SignalName(exit.Signal)
			if f.Signal == "" {
				f.Signal = fmt.Sprintf("SIG%d", int(exit.Signal))
			}
		} else {
			code := exit.Code
			f.ExitCode = &code
		}
	}
	if reason != "" {
		f.Reason = reason
	}
	f.Outcome, f.Status = Classify(f.Termination, f.ExitCode)
	f.EndedAt = stamp(time.Now())
	if f.StartedAt == nil {
		f.WallMs = 0
	}
	_ = e.setState(Settled)
	final := e.snapshotLocked()
	// A yielded result nobody claims goes to the owner's mailbox; a waiting
	// observation decides when it ends, since it may claim the result.
	deliver := f.Yielded && !e.stopClaimed && e.monitor == nil && f.Termination != SessionEnded
	deferred := deliver && e.waiter != nil
	e.decideOnEndWait = deferred
	e.mu.Unlock()

	e.journalSettled(final, deliver)
	e.s.sched.release(e.ticket)
	if f.StartedAt == nil {
		close(e.started)
	}
	close(e.done)
	switch {
	case !deliver:
		e.deliveryDone()
	case !deferred:
		e.decide()
	}
	if e.monitor != nil {
		e.monitor.settle(final)
	}
	e.s.settled(e, final)
}

func (e *Execution) deliveryDone() {
	e.deliveredOnce.Do(func() {
		close(e.delivered)
		if e.mailed.Load() {
			e.s.journal.Append(settledRecord(e.Facts(), "done"))
		}
	})
}

// decide makes the one delivery of a settled yielded execution, unless an
// observation already claimed the result. obsMu keeps a concurrent poll
// from claiming while the delivery is made.
func (e *Execution) decide() {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	e.mu.Lock()
	claimed := e.final != nil
	e.mu.Unlock()
	if claimed {
		e.deliveryDone()
		return
	}
	o, err := e.sp.PeekUnread(0)
	if err != nil {
		logf("execution %s: reading the spool: %v", e.id, err)
	}
	e.mu.Lock()
	obs := Observation{Output: o.Text, Facts: e.snapshotLocked(), Final: true}
	e.mu.Unlock()
	f := obs.Facts
	epoch := e.s.attentionEpoch()
	// Wake only for a root-owned result that ended on its own.
	wake := f.Owner == RootOwner && endedOnItsOwn(f.Termination)
	d := Delivery{Owner: f.Owner, Kind: KindExecution, Attrs: executionAttrs(f), Observation: &obs}
	id, ok := e.s.mail.post(d, func(d Delivery) { e.durable(d, o.To, o.Omitted, wake, epoch) }, e.deliveryDone)
	if !ok {
		e.deliveryDone()
		return
	}
	e.mu.Lock()
	e.delivery = id
	e.mu.Unlock()
}

// durable retires the delivery d: its range is consumed, and later
// observations repeat what it carried.
func (e *Execution) durable(d Delivery, to, omitted int64, wake bool, epoch uint64) {
	e.obsMu.Lock()
	e.sp.ConsumeTo(to)
	e.mu.Lock()
	e.facts.OmittedBytes += omitted
	e.changeLocked()
	obs := Observation{Output: d.Observation.Output, Facts: e.snapshotLocked(), Final: true}
	e.final = &obs
	e.delivery = ""
	read := e.readByModel
	e.mu.Unlock()
	e.obsMu.Unlock()
	e.deliveryDone()
	if wake && !read {
		e.s.owe(d.Owner, d.DeliveryID, epoch)
	}
}

// endedOnItsOwn reports whether nobody stopped the execution.
func endedOnItsOwn(t Termination) bool {
	switch t {
	case Stopped, OwnerStopped, Aborted, SessionEnded:
		return false
	}
	return true
}

func executionAttrs(f Facts) DeliveryAttrs {
	return DeliveryAttrs{
		ExecutionID: f.ExecutionID, Label: f.Label, Command: f.Command, Status: f.Status,
		Termination: f.Termination, ExitCode: f.ExitCode, Signal: f.Signal, Reason: f.Reason,
	}
}

// markRead records that the owner's model saw the final result: no wake
// for it then.
func (e *Execution) markRead() {
	e.mu.Lock()
	e.readByModel = true
	e.mu.Unlock()
}

// claimStop makes exec/stop's reply the one claim of the result.
func (e *Execution) claimStop() {
	e.mu.Lock()
	e.stopClaimed = true
	e.mu.Unlock()
}

// yield detaches the execution from its start request, unless the shell
// has already exited (then the caller keeps waiting: a command that ends as
// the timer fires is a foreground completion). It reports whether it
// yielded.
func (e *Execution) yield() bool {
	e.mu.Lock()
	if e.facts.State == Settled || (e.proc != nil && e.proc.Exited()) {
		e.mu.Unlock()
		return false
	}
	e.facts.Yielded = true
	e.changeLocked()
	running := e.facts.State != Queued
	// A row now, queued or not: a crash before it starts still leaves
	// something to mark lost.
	e.journalRow(e.snapshotLocked(), e.leader)
	e.mu.Unlock()
	if running {
		e.s.sched.release(e.ticket)
	}
	e.s.changed()
	return true
}

// awaitStart waits for the end of the execution or the yield deadline
// (nil: no deadline). A cancelled request before yield aborts the
// execution; after the yield the execution no longer listens to it.
func (e *Execution) awaitStart(ctx context.Context, yield *time.Duration, maxChars int) Observation {
	var deadline <-chan time.Time
	if yield != nil {
		t := time.NewTimer(*yield)
		defer t.Stop()
		deadline = t.C
	}
	cancelled := ctx.Done()
	var starting <-chan struct{} // set while an admitted command is spawning
	aborted := false
	for {
		select {
		case <-e.done:
			return e.finalObservation(maxChars)
		case <-cancelled:
			// Before the yield, a cancelled request aborts the command;
			// the reply is its final observation.
			cancelled, aborted = nil, true
			e.cancel(&stopCause{term: Aborted, reason: "the start request was cancelled before the command yielded"})
		case <-deadline:
			deadline = nil
			if e.admittedNotStarted() {
				starting = e.started // yield once it runs
				continue
			}
			if !aborted && e.yield() {
				return e.liveObservation(maxChars)
			}
		case <-starting:
			starting = nil
			if !aborted && e.yield() {
				return e.liveObservation(maxChars)
			}
		}
	}
}

// liveObservation returns the unread output so far, consuming it.
func (e *Execution) liveObservation(maxChars int) Observation {
	return e.observation(maxChars, false)
}

// finalObservation returns the terminal result. The first call claims it
// and consumes the rest of the output; every later call returns the same.
func (e *Execution) finalObservation(maxChars int) Observation {
	return e.observation(maxChars, true)
}

// observation renders and consumes the unread output. Once the final
// observation exists, it is the answer to every observation.
func (e *Execution) observation(maxChars int, final bool) Observation {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	e.mu.Lock()
	if e.final != nil {
		o := *e.final
		e.mu.Unlock()
		return o
	}
	if pending := e.delivery; final && pending != "" {
		// A pending delivery is seen, never claimed: only its ack consumes.
		e.mu.Unlock()
		o, err := e.sp.PeekUnread(maxChars)
		if err != nil {
			logf("execution %s: reading the spool: %v", e.id, err)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		return Observation{Output: o.Text, Facts: e.snapshotLocked(), Final: true, DeliveryID: pending}
	}
	e.mu.Unlock()
	o, err := e.sp.ObserveUnread(maxChars, final)
	if err != nil {
		logf("execution %s: reading the spool: %v", e.id, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.facts.OmittedBytes += o.Omitted
	e.changeLocked()
	obs := Observation{Output: o.Text, Facts: e.snapshotLocked(), Final: final}
	if final {
		e.final = &obs // claimed: the terminal result has been handed out
	}
	return obs
}

// admittedNotStarted reports whether the lane admitted the execution but
// its command is not running yet (the login environment or the spawn is
// under way).
func (e *Execution) admittedNotStarted() bool {
	select {
	case <-e.started:
		return false
	default:
	}
	select {
	case <-e.ticket.admitted:
		return true
	default:
		return false
	}
}

func (e *Execution) settledNow() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// observe answers exec/observe (after its input): with wait, it waits for
// the end, the deadline or the request's cancellation.
func (e *Execution) observe(ctx context.Context, wait time.Duration, maxChars int) Observation {
	if wait > 0 && !e.settledNow() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-e.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if errors.Is(context.Cause(ctx), ErrCallerGone) {
		// The answer would go nowhere: read nothing, claim nothing, so
		// the output stays unread and the result goes to the mailbox.
		return Observation{Facts: e.Facts()}
	}
	if e.settledNow() {
		return e.finalObservation(maxChars)
	}
	return e.liveObservation(maxChars)
}

// waitToken marks one waiting observation.
type waitToken struct{ ctx context.Context }

// beginWait registers the one waiting observation allowed at a time. A
// wait whose request was cancelled is on its way out and no longer counts,
// so a client may wait again right after cancelling.
func (e *Execution) beginWait(ctx context.Context) (*waitToken, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waiter != nil && e.waiter.ctx.Err() == nil {
		return nil, fault.New(fault.Conflict, "execution %s already has a waiting observation", e.id)
	}
	e.waiter = &waitToken{ctx: ctx}
	return e.waiter, nil
}

// endWait ends the wait of tok, unless another has replaced it.
func (e *Execution) endWait(tok *waitToken) {
	e.mu.Lock()
	if e.waiter == tok {
		e.waiter = nil
	}
	decide := e.decideOnEndWait && e.waiter == nil
	if decide {
		e.decideOnEndWait = false
	}
	e.mu.Unlock()
	if decide {
		e.decide()
	}
}

// input queues chars for the command and returns a channel that yields
// the outcome of the write. In tty mode characters go to the terminal, in
// order, from the execution's input goroutine (a write can block while the
// command does not read, and must never block a request). A lone Ctrl-C is
// sent as SIGINT in either mode; other input in pipe mode is refused.
func (e *Execution) input(chars string) (<-chan error, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	proc, state, tty := e.proc, e.facts.State, e.facts.TTY
	if !tty && chars != "\x03" {
		return nil, fault.New(fault.Refused, "execution %s runs without a terminal: its stdin is closed, and only Ctrl-C (\\u0003) is accepted as input; rerun it with tty to send input", e.id)
	}
	if state == Settled || e.settledNow() || e.inputClosed {
		return nil, fault.New(fault.Refused, "execution %s has already ended; input was not delivered", e.id)
	}
	if proc == nil {
		return nil, fault.New(fault.Refused, "execution %s has not started yet (it is queued); input was not delivered", e.id)
	}
	done := make(chan error, 1)
	if chars == "\x03" {
		if err := proc.Interrupt(); err != nil && !errors.Is(err, syscall.ESRCH) {
			return nil, fault.New(fault.IO, "execution %s: interrupt: %w", e.id, err)
		}
		done <- nil
		return done, nil
	}
	select {
	case e.inputs <- inputReq{data: []byte(chars), done: done}:
		return done, nil
	default:
		return nil, fault.New(fault.Limit, "execution %s has %d inputs waiting for the command to read; input was not delivered", e.id, cap(e.inputs))
	}
}

// inputReq is one write to the terminal.
type inputReq struct {
	data []byte
	done chan error // buffered; receives the outcome once
}

// writeInput writes queued input in order until quiet; what is left then
// fails with a clear error.
func (e *Execution) writeInput(proc process.Process, quiet <-chan struct{}) {
	for {
		select {
		case req := <-e.inputs:
			_, err := proc.Write(req.data)
			switch {
			case errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EIO):
				err = fault.New(fault.Refused, "execution %s ended before it read the input", e.id)
			case err != nil:
				err = fault.New(fault.IO, "execution %s: writing input: %w", e.id, err)
			}
			req.done <- err
		case <-quiet:
			e.mu.Lock()
			e.inputClosed = true
			e.mu.Unlock()
			for {
				select {
				case req := <-e.inputs:
					req.done <- fault.New(fault.Refused, "execution %s ended before it read the input", e.id)
				default:
					return
				}
			}
		}
	}
}

// interrupt sends Ctrl-C.
func (e *Execution) interrupt() error {
	e.mu.Lock()
	proc := e.proc
	e.mu.Unlock()
	if e.settledNow() {
		return fault.New(fault.Refused, "execution %s has already ended", e.id)
	}
	if proc == nil {
		return fault.New(fault.Refused, "execution %s has not started yet (it is queued)", e.id)
	}
	if err := proc.Interrupt(); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fault.New(fault.IO, "execution %s: interrupt: %w", e.id, err)
	}
	return nil
}

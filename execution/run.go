package execution

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/spool"
	"golang.org/x/sys/unix"
)

// Tuning of the settle path.
const (
	probeInterval  = 5 * time.Millisecond  // first wait between liveness probes
	probeMax       = 50 * time.Millisecond // longest wait between probes
	quietWait      = 20 * time.Millisecond // for a shell's leftovers to be reaped, before a scan
	drainTimeout   = 2 * time.Second       // output EOF after every tracked writer is gone
	unkillableWait = 30 * time.Second      // after SIGKILL, before settling anyway
	progressFirst  = 2 * time.Second
	progressEvery  = 250 * time.Millisecond
	progressChars  = 2000
	changedEvery   = time.Second // exec/changed for output growth, at most
	// followedEvery is exec/output's, and exec/changed's while someone
	// follows the execution without its output (exec/follow): a person
	// watching its output sees it stream.
	followedEvery = 100 * time.Millisecond
	copyMin       = 4 << 10   // first output read buffer
	copyMax       = 256 << 10 // largest output read buffer
	// denialScanChars is how much of a failed confined command's output
	// is read for sandbox denials: the errors come at the end.
	denialScanChars = 64 << 10
)

// run drives the execution from admission to settlement.
func (e *Execution) run() {
	defer e.s.wg.Done()
	select {
	case <-e.ticket.admitted:
	case <-e.ctx.Done():
		if e.journaled != nil {
			<-e.journaled // its spawn record goes before the settlement's
		}
		e.settle(nil, e.causeOf())
		return
	}
	spec := e.spec
	spec.Env = process.MergeEnv(Defaults, spec.Env)
	if err := e.box.open(e.id, &spec); err != nil {
		if e.journaled != nil {
			<-e.journaled
		}
		e.settle(nil, &stopCause{term: SpawnFailed, reason: err.Error()})
		return
	}
	if g := e.box.group; g != nil {
		rf := g.Facts()
		e.update(func(st *execState) { st.facts.Resources = &rf })
	}
	// Durable before the command runs: a helper killed at any instant
	// leaves nothing that recovery cannot find. The record is written
	// while the runner spawns the command, whose first process waits at
	// its gate (which a helper's death closes) until BeforeRun says the
	// record is on disk.
	journaled := e.journaled
	if journaled == nil {
		journaled = e.beginJournalSpawn()
	}
	var (
		journalOnce sync.Once
		journalErr  error
	)
	spec.BeforeRun = func() error {
		journalOnce.Do(func() { journalErr = <-journaled })
		return journalErr
	}
	proc, err := e.runner().Start(e.ctx, spec)
	if err != nil {
		_ = spec.BeforeRun() // the record goes before the settlement's
		cause := &stopCause{term: SpawnFailed, reason: err.Error()}
		switch {
		case journalErr != nil && e.ctx.Err() != nil:
			cause = e.causeOf()
		case journalErr != nil:
			cause.reason = fmt.Sprintf("the command was not started: its start could not be made durable in the session's journal (%v)", journalErr)
		default:
			errors.As(err, &cause) // a stop that came during the start wins
		}
		e.settle(nil, cause)
		return
	}
	if e.remote != nil {
		e.remote.pub.start(e)
	}
	if e.timeout > 0 {
		// From the start of the command, whatever happens to the request
		// that started it (a yield, a cancel): a stop like any other.
		t := time.AfterFunc(e.timeout, func() {
			e.cancel(&stopCause{term: TimedOut, reason: fmt.Sprintf("the command ran for its timeout of %v", e.timeout)})
		})
		defer t.Stop()
	}

	var yielded bool
	e.update(func(st *execState) {
		e.move(st, Running)
		st.proc = proc
		st.facts.Pid, st.facts.Pgid = proc.Pid(), proc.Pgid()
		if m, ok := proc.(interface{ RemoteMode() string }); ok {
			st.facts.RemoteMode = m.RemoteMode()
		}
		if m, ok := proc.(interface{ Incarnation() remote.Incarnation }); ok {
			if in := m.Incarnation(); in != (Incarnation{}) {
				st.facts.TargetIncarnation = &in
			}
		}
		if r, ok := proc.(interface {
			ResourceFacts() *sandbox.ResourceFacts
		}); ok && r.ResourceFacts() != nil {
			st.facts.Resources = r.ResourceFacts() // as the host applied them
		}
		st.facts.StartedAt = stamp(time.Now())
		// A command just started listens on nothing yet (it inherited no
		// socket): the ports are first read a listenFresh later, not by
		// this start's own announcement.
		st.listenAt = time.Now()
		yielded = st.facts.Yielded
		st.leader = leaderOf(st.facts, proc)
		// Journaled under the lock, so a concurrent yield's row comes
		// after it.
		e.journalRow(e.snapshot(st), st.leader)
	})
	close(e.started)
	if yielded {
		e.s.sched.release(e.ticket) // yielded while queued: never holds the lane
	}
	e.s.changed(e)

	var aux sync.WaitGroup
	copied := make(chan struct{})
	aux.Go(func() {
		defer close(copied)
		e.copyOutput(proc.Output())
	})
	quiet := make(chan struct{}) // ends progress and input before settlement
	if e.spec.TTY {
		aux.Go(func() { e.writeInput(proc, quiet) })
	}
	if e.watch != nil {
		aux.Go(func() { e.watchInput(proc, quiet) })
	}
	if e.ready != nil && e.ready.port > 0 {
		aux.Go(func() { e.watchReadyPort(proc, quiet) })
	}
	if e.toolUseID != "" {
		aux.Go(func() { e.progress(quiet) })
	}
	waitExit := func() process.Exit {
		ex, err := proc.Wait()
		if err != nil {
			logf("execution %s: wait: %v", e.id, err)
		}
		return ex
	}
	// A local shell's end is a channel the reaper closes: waited for here,
	// without a goroutine to hand it over.
	exited := make(chan process.Exit, 1)
	var ended <-chan struct{}
	if d, ok := proc.(interface{ Ended() <-chan struct{} }); ok {
		ended = d.Ended()
	} else {
		aux.Go(func() { exited <- waitExit() })
	}

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
		case <-ended:
			exit = waitExit() // at once: the status is in
			break wait
		case <-stop:
			stop = nil
			cause = e.causeOf()
			e.update(func(st *execState) { e.move(st, Stopping) })
			e.s.changed(e)
			_ = proc.Signal(unix.SIGTERM)
			kill = time.After(e.grace)
		case <-kill:
			kill = nil
			_ = proc.Signal(unix.SIGKILL)
		}
	}

	// The shell is gone; descendants that linger are cleaned up the same
	// way, and settlement waits until none is alive. Those about to end
	// by themselves (a sandbox's own) are waited for first, briefly: a
	// reap, not a scan, tells.
	gone := false
	if q, ok := proc.(interface{ Quiet(time.Duration) bool }); ok {
		gone = q.Quiet(quietWait)
	}
	if cause == nil && !gone && proc.Alive() {
		_ = proc.Signal(unix.SIGTERM)
		kill = time.After(e.grace)
	}
	interval := probeInterval
	var giveUp <-chan time.Time
probe:
	for !gone && proc.Alive() {
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
	if e.remote != nil {
		e.remote.pub.finish(e)
	}
	e.box.releaseOnHost(proc, &exit)
	if cause == nil {
		e.box.hit = e.box.limitHit(&exit, proc)
	}
	if e.box.confined() && exit.Lost == "" && (exit.Signaled || exit.Code != 0) {
		if tail, err := e.sp.Tail(denialScanChars); err == nil {
			if e.box.remote {
				e.box.denials = remoteDenials(proc, tail, e.box.policy)
			} else {
				e.box.denials = sandbox.Denials(tail, e.spec.Dir, e.box.policy)
			}
		}
	}
	if r, ok := proc.(interface{ Replaced() bool }); ok && r.Replaced() {
		// Its host came back in another boot: the command cannot run
		// there any more, whatever the lost connection left unproven.
		e.settle(nil, &stopCause{term: Lost, reason: ReasonTargetReplaced})
		e.s.replacementSettled(e.Facts().Target)
		return
	}
	e.settle(&exit, cause)
}

// chunkReader is an output that hands out its own buffers (the host
// agent's frames): copyOutput spools them without copying each into its
// own buffer first. A chunk is valid until the next ReadChunk.
type chunkReader interface {
	ReadChunk() ([]byte, error)
}

// copyBufs holds first output read buffers between executions.
var copyBufs = sync.Pool{New: func() any { return new([copyMin]byte) }}

// growthGrid is the start of the windows growth is announced in.
var growthGrid = time.Now()

// pace announces news at most once per window of a grid every execution
// shares (growthGrid): at once when none was announced in the current
// window, else at its end, so nothing is left unsaid when the output goes
// quiet (the timer runs after EOF too), and what hundreds of executions
// owe at a window's end goes together: a few exec/changed a second
// rather than one each.
type pace struct {
	// say announces; at a window's end it reports whether it marked a
	// change for the window's exec/changed.
	say func(atEnd bool) bool
	// announced is when say last ran, since growthGrid on the monotonic
	// clock (negative: never); owed says a window's end will run it.
	announced atomic.Int64
	owed      atomic.Bool
}

func newPace(say func(atEnd bool) bool) *pace {
	p := &pace{say: say}
	p.announced.Store(-1)
	return p
}

// step says there is news, for windows of length every.
func (p *pace) step(s *Session, every time.Duration) {
	if p.owed.Load() {
		// A window's end says it, even past that end: under load the
		// timers run late, and news said at once in the next window
		// would make one exec/changed per execution, not one for all.
		return
	}
	now := time.Since(growthGrid)
	last := time.Duration(p.announced.Load())
	if last < 0 || now/every > last/every {
		p.announced.Store(int64(now))
		p.say(false)
	} else if !p.owed.Swap(true) {
		s.atWindowEnd(every, func() bool {
			if !p.owed.Swap(false) {
				return false
			}
			p.announced.Store(int64(time.Since(growthGrid)))
			return p.say(true)
		})
	}
}

// copyOutput spools the merged output until EOF. Past the cap or on a
// write error it asks for a stop and keeps draining, so the child never
// blocks on a full pipe while it is being stopped.
func (e *Execution) copyOutput(r io.Reader) {
	// Small while the command is quiet (hundreds of idle executions cost
	// little), doubled whenever a read fills it, up to copyMax. The first
	// is a pooled one: most commands never print past it.
	first := copyBufs.Get().(*[copyMin]byte)
	buf := first[:]
	defer func() {
		if &buf[0] == &first[0] {
			copyBufs.Put(first)
		}
	}()
	// Growth goes in exec/changed once a second, a followed execution's
	// new output in exec/output ten times a second (pace).
	changes := newPace(func(atEnd bool) bool {
		// The kept bytes go first: the size this announces is then not
		// ahead of the chunks but for what is spooled meanwhile.
		e.announceOutput()
		if atEnd {
			e.s.mark(e)
		} else {
			e.s.changed(e)
		}
		return true
	})
	output := newPace(func(bool) bool {
		e.announceOutput()
		return false
	})
	cr, _ := r.(chunkReader)
	var at int64 // bytes spooled so far
	for {
		var b []byte
		var err error
		if cr != nil {
			b, err = cr.ReadChunk()
		} else {
			var n int
			n, err = r.Read(buf)
			b = buf[:n]
		}
		if n := len(b); n > 0 {
			_, werr := e.sp.Write(b)
			if werr == nil && e.streamed.Load() {
				e.keepOutput(at, b)
			}
			at += int64(n)
			if werr != nil {
				if errors.Is(werr, spool.ErrLimit) {
					e.cancel(&stopCause{term: OutputLimit, reason: fmt.Sprintf("output exceeded the limit of %d bytes", e.s.limits.OutputLimitBytes)})
				} else {
					e.cancel(&stopCause{term: SpoolFailed, reason: werr.Error()})
				}
			}
			if e.monitor != nil {
				e.monitor.feed(b)
			}
			if e.ready != nil {
				e.ready.feed(e, b)
			}
			e.changed()
			// A panel shows output sizes from exec/changed; once a second
			// is enough for that. A followed output buffer has the bytes
			// in exec/output ten times a second, and needs no more; an
			// inspector (a follow without output) reads the log's end
			// as it grows, so for it growth is said ten times a second.
			every := changedEvery
			if e.inspected.Load() {
				every = followedEvery
			}
			changes.step(e.s, every)
			if e.streamed.Load() {
				output.step(e.s, followedEvery)
			}
		}
		if cr == nil && len(b) == len(buf) && len(buf) < copyMax {
			buf = make([]byte, 2*len(buf))
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

// settle records the end and decides who gets the result. exit is nil
// when the shell never ran.
func (e *Execution) settle(exit *process.Exit, cause *stopCause) {
	_ = e.sp.Close()
	hit, denials := e.box.close(e.id)
	// Gone before anyone can see the end: no final observation or delivery
	// of a command that had a scratch directory finds it still there.
	removeScratch(e.scratch)
	var final Facts
	var owed bool
	var wait endedWait
	e.update(func(st *execState) {
		f := &st.facts
		sp := e.sp.Stats()
		switch {
		case exit != nil && exit.Lost != "":
			// The end cannot be proven, whatever else happened.
			f.Termination, f.Reason = Unknown, exit.Lost
		case cause != nil:
			f.Termination, f.Reason = cause.term, cause.reason
			f.StoppedByUser = cause.user
		case hit != "":
			f.Termination, f.Limit = ResourceLimit, hit
			f.Reason = fmt.Sprintf("the command ran into its %s limit", hit)
		case sp.Limited:
			f.Termination = OutputLimit
			f.Reason = fmt.Sprintf("output exceeded the limit of %d bytes", e.s.limits.OutputLimitBytes)
		case sp.Failed != nil:
			f.Termination, f.Reason = SpoolFailed, sp.Failed.Error()
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
		f.SandboxDenials = denials
		f.Outcome, f.Status = Classify(f.Termination, f.ExitCode)
		f.EndedAt = stamp(time.Now())
		if f.StartedAt == nil {
			f.WallMs = 0
		}
		wait = e.settleWaitLocked(st)
		e.move(st, Settled)
		final = e.snapshot(st)
		if f.Termination == Unknown {
			e.s.noteUnknown(final)
		}
		// A yielded result nobody claims goes to the owner's mailbox; a
		// waiting observation in progress may still claim it.
		owed = f.Yielded && st.claim != claimStop && e.monitor == nil && f.Termination != SessionEnded && !e.unmailed
		if owed {
			st.delivery = e.s.mail.nextID()
		}
		// Journaled before the claim moves, so "pending" precedes "done".
		e.journalSettled(final, st.delivery)
		switch {
		case !owed:
			e.claimTo(st, claimHeld)
		case st.waiter != nil:
			e.claimTo(st, claimWaiter)
		default:
			e.claimTo(st, claimDeciding)
		}
	})
	e.s.sched.release(e.ticket)
	e.retractRequest(wait)
	if final.StartedAt == nil {
		close(e.started)
	}
	close(e.done)
	e.s.live.Add(-1)
	e.decide()
	if e.monitor != nil {
		e.monitor.settle(final)
	}
	e.s.settled(e, final)
}

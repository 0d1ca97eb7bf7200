package execution

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/spool"
)

// stopCause is why an execution is being stopped; it becomes the
// termination fact.
type stopCause struct {
	term   Termination
	reason string
	user   bool // a stop requested with user authority (a person), not the owner's
}

func (c *stopCause) Error() string { return string(c.term) + ": " + c.reason }

// Execution is one managed command. Everything a caller sees of it is a
// Facts value copied out under mu; everything that changes is in st (see
// state.go).
type Execution struct {
	s      *Session     // immutable
	id     string       // immutable
	owner  string       // immutable
	label  string       // immutable
	spec   process.Spec // immutable
	ticket *ticket      // immutable
	// journaled, when set before run starts, is the result of its spawn
	// record, begun as the start was admitted at once (run goroutine only).
	journaled chan error
	sp        *spool.Spool // immutable
	grace     time.Duration
	toolUseID string        // immutable
	kind      Kind          // immutable
	timeout   time.Duration // immutable; 0: none
	scratch   string        // immutable; the scratch directory, "" when none
	monitor   *Monitor
	remote    *remoteExec   // immutable; set for a command on an SSH host
	box       *confinement  // immutable; the sandbox and limits it runs in
	inputs    chan inputReq // immutable; queued terminal input
	watch     *inputWatch   // immutable; tty executions: waiting-for-input detection
	ready     *readiness    // immutable; set when the start named readyPattern or readyPort
	unmailed  bool          // immutable; its starter watches the end: no delivery
	ctx       context.Context
	cancel    context.CancelCauseFunc // the cause becomes the termination
	started   chan struct{}           // closed once, when running or settled without running
	done      chan struct{}           // closed once, at settlement
	retired   chan struct{}           // closed once, when dropped from the registry
	// unclaimed is closed once, when the claim reaches a settled state
	// without a pending delivery: the retention wait may end.
	unclaimed chan struct{}

	obsMu sync.Mutex // serialises observations and claims, so no two read the same unread range

	finalShown bool // guarded by s.chMu; TakeChanged returned its final facts

	// inspected mirrors st.followers > st.streamers for the output
	// copier: someone follows without the output (a panel's inspector),
	// reading the log as exec/changed says it grew, so growth is
	// announced ten times a second, not once.
	inspected atomic.Bool
	// streamed mirrors st.streamers > 0: the output copier keeps the new
	// bytes for exec/output (stream.go).
	streamed atomic.Bool
	outMu    sync.Mutex
	outBuf   []byte // guarded by outMu; output not yet sent in exec/output
	outOff   int64  // guarded by outMu; the log offset of outBuf[0]
	outGap   bool   // guarded by outMu; output was dropped since the last take

	mu sync.Mutex
	st execState // guarded by mu; changed only through update
}

// ID returns the execution id.
func (e *Execution) ID() string { return e.id }

// Facts returns a snapshot of the execution's facts, with the ports it
// listens on read now (or a moment ago).
func (e *Execution) Facts() Facts {
	return e.factsWith(nil)
}

// factsWith is Facts for one execution of many read in a row: with
// digests shared among them, a tree's descriptors are scanned for
// listening sockets only when its network namespace's set changed since
// its last scan (refreshListening).
func (e *Execution) factsWith(digests map[string]uint64) Facts {
	e.refreshListening(digests)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshot(&e.st)
}

// factsAsRead is Facts without reading the listening ports; stale says
// they are due for a read.
func (e *Execution) factsAsRead() (f Facts, stale bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshot(&e.st), e.listenDue(&e.st)
}

// causeOf returns the recorded stop cause.
func (e *Execution) causeOf() *stopCause {
	var c *stopCause
	if errors.As(context.Cause(e.ctx), &c) {
		return c
	}
	return &stopCause{term: Stopped}
}

func (e *Execution) settledNow() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
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

// changed bumps the version after output arrived; output ends a wait for
// input.
func (e *Execution) changed() {
	var ended endedWait
	e.update(func(st *execState) {
		st.facts.Version++
		ended = e.activityLocked(st)
	})
	e.afterActivity(ended)
}

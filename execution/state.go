package execution

import (
	"fmt"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/transcript"
)

// An execution has two state machines, both changed only under its lock
// through update, and both refusing illegal moves:
//
//   - the lifecycle (State): queued → running → stopping → settled;
//   - the claim (claim): who gets the final result, exactly once: the
//     start reply, a waiting observation, a stop, a poll, the mailbox, or
//     nobody.

// strict turns an illegal move into a panic: in every test binary, and in
// a helper built with -tags strict (the end-to-end and Emacs tests build
// it so). Elsewhere the move is refused and logged.
var strict = strictBuild || testing.Testing()

// illegal reports a refused move.
func illegal(id string, err error) {
	if strict {
		panic(fmt.Sprintf("execution %s: %v", id, err))
	}
	logf("execution %s: %v (refused)", id, err)
}

// legal lists the moves the lifecycle allows.
var legal = map[State][]State{
	Queued:   {Running, Settled}, // Settled: aborted or stopped while queued, spawn failure
	Running:  {Stopping, Settled},
	Stopping: {Settled},
}

// transition checks a move of the lifecycle.
func transition(from, to State) error {
	for _, s := range legal[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("invalid state transition %q to %q", from, to)
}

// claim says who gets a settled execution's final result.
type claim int

const (
	// claimOpen: not settled, nobody has asked for the result.
	claimOpen claim = iota
	// claimStop: not settled; a stop asked for the end and its reply
	// will claim the result.
	claimStop
	// claimHeld: settled, nothing to mail (a foreground command, a stop's
	// result, a monitor's own execution, a session's end): the first
	// final observation claims it.
	claimHeld
	// claimWaiter: settled, owed to the mailbox, but a waiting
	// observation is in progress: it claims the result, or the mailbox
	// gets it when the wait ends.
	claimWaiter
	// claimDeciding: settled, owed to the mailbox: it is posted unless an
	// observation claims it first.
	claimDeciding
	// claimMailed: a delivery is pending; observations show it without
	// claiming it, and only its durable ack consumes the output.
	claimMailed
	// claimTaken: an observation claimed it; every later observation
	// repeats the frozen final one.
	claimTaken
	// claimDelivered: the delivery was durably acknowledged; later
	// observations repeat what it carried.
	claimDelivered
	// claimDropped: owed to the mailbox, but the session closed first.
	claimDropped
)

var claimNames = [...]string{"open", "stop", "held", "waiter", "deciding", "mailed", "taken", "delivered", "dropped"}

func (c claim) String() string {
	if int(c) < len(claimNames) {
		return claimNames[c]
	}
	return fmt.Sprintf("claim(%d)", int(c))
}

// legalClaims lists the moves the claim allows.
var legalClaims = map[claim][]claim{
	claimOpen:     {claimStop, claimHeld, claimWaiter, claimDeciding},
	claimStop:     {claimHeld},
	claimHeld:     {claimTaken},
	claimWaiter:   {claimTaken, claimDeciding},
	claimDeciding: {claimTaken, claimMailed, claimDropped},
	// claimMailed → claimTaken: the owner's poll read the end of a result
	// someone else stopped, and the delivery was withdrawn.
	claimMailed: {claimDelivered, claimDropped, claimTaken},
}

func claimTransition(from, to claim) error {
	for _, c := range legalClaims[from] {
		if c == to {
			return nil
		}
	}
	return fmt.Errorf("invalid claim transition %s to %s", from, to)
}

// owed reports whether the result is owed to the mailbox and not yet
// settled there: the settlement was journaled as a pending delivery.
func (c claim) owed() bool { return c == claimWaiter || c == claimDeciding || c == claimMailed }

// released reports whether the claim is past settlement with no delivery
// pending: nothing keeps the execution observable beyond its retention.
func (c claim) released() bool { return c != claimOpen && c != claimStop && !c.owed() }

// execState is everything about an execution that changes. It is guarded
// by the execution's mu and changed only inside update.
type execState struct {
	facts  Facts
	proc   process.Process    // set once running
	leader *transcript.Leader // set once running

	claim claim
	final *Observation // claimTaken, claimDelivered: the frozen final observation
	// delivery names the result's one delivery, drawn at settlement when
	// the result is owed to the mailbox (and journaled with it).
	delivery string
	// seen: the owner's model read the final result, so it owes no
	// attention to it.
	seen bool

	waiter      *waitToken // the waiting observation in progress
	inputClosed bool       // the input goroutine stopped taking input

	inputWait inputWaitState // waiting for input (waiting.go)
	listenAt  time.Time      // when facts.Listening was read (ready.go)
	// listenDigest is the digest of its network namespace's listening
	// sockets when a listing's read last scanned the tree (ready.go);
	// valid while listenScanned.
	listenDigest  uint64
	listenScanned bool
	followers     int // exec/follow calls not yet undone (follow.go)
	streamers     int // of those, the ones that asked for the output too
}

// update runs f on the state under the lock. f must not block: it may
// queue journal records and close channels, nothing more.
func (e *Execution) update(f func(st *execState)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.st)
}

// move changes the lifecycle; call it inside update.
func (e *Execution) move(st *execState, to State) {
	if err := transition(st.facts.State, to); err != nil {
		illegal(e.id, err)
		return
	}
	st.facts.State = to
	st.facts.Version++
}

// claimTo changes the claim; call it inside update. Leaving the owed
// states journals that no delivery is pending any more, and reaching a
// state without a pending delivery releases the retention wait.
func (e *Execution) claimTo(st *execState, to claim) bool {
	from := st.claim
	if err := claimTransition(from, to); err != nil {
		illegal(e.id, err)
		return false
	}
	st.claim = to
	if from.owed() && !to.owed() {
		e.s.journal.Append(settledRecord(e.snapshot(st), "done"))
	}
	if to.released() && !from.released() {
		close(e.unclaimed)
	}
	return true
}

// snapshot copies the facts with the spool's counters, read at once.
func (e *Execution) snapshot(st *execState) Facts {
	f := st.facts
	sp := e.sp.Stats()
	f.OutputBytes, f.OutputLines, f.UnreadBytes = sp.Bytes, sp.Lines, sp.Unread
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

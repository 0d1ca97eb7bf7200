package execution

import (
	"context"
	"errors"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// yield detaches the execution from its start request, unless the shell
// has already exited (then the caller keeps waiting: a command that ends as
// the timer fires is a foreground completion). It reports whether it
// yielded.
func (e *Execution) yield() bool {
	yielded, running := false, false
	e.update(func(st *execState) {
		if st.facts.State == Settled || (st.proc != nil && st.proc.Exited()) {
			return
		}
		yielded = true
		st.facts.Yielded = true
		st.facts.Version++
		running = st.facts.State != Queued
		// A row now, queued or not: a crash before it starts still leaves
		// something to mark lost.
		e.journalRow(e.snapshot(st), st.leader)
	})
	if !yielded {
		return false
	}
	if running {
		e.s.sched.release(e.ticket)
	}
	e.s.changed(e)
	return true
}

// awaitStart waits for the end of the execution or the yield deadline
// (nil: no deadline). A cancelled request before yield aborts the
// execution; after the yield the execution no longer listens to it.
func (e *Execution) awaitStart(ctx context.Context, yield *time.Duration, maxChars int) Observation {
	if !e.kind.Yields() {
		yield = nil // one-shots, helpers and evals run to their end
	}
	var deadline <-chan time.Time
	if yield != nil {
		t := time.NewTimer(*yield)
		defer t.Stop()
		deadline = t.C
	}
	cancelled := ctx.Done()
	var starting <-chan struct{} // set while an admitted command is spawning
	ready := e.readyReached()    // nil unless the start named a ready condition
	if !e.kind.Yields() {
		ready = nil
	}
	aborted := false
	for {
		select {
		case <-e.done:
			return e.observation(maxChars, true, true)
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
				return e.observation(maxChars, false, true)
			}
		case <-starting:
			starting = nil
			if !aborted && e.yield() {
				return e.observation(maxChars, false, true)
			}
		case <-ready:
			// Ready before the deadline: the command is usable now. One
			// that exits instead gives its final result through done.
			ready = nil
			if !aborted && e.yield() {
				return e.observation(maxChars, false, true)
			}
		}
	}
}

// observation renders the unread output; with final, the terminal
// result. An observation that claims (the owner's, or a start reply)
// consumes what it shows, and the first final one claims the result: it is
// frozen and the answer to every later observation. One that does not
// claim (the person's) only shows. While a delivery is pending the result
// is shown and not claimed, unless it is one that wakes nobody (a stop's):
// then the owner's read withdraws it.
func (e *Execution) observation(maxChars int, final, claims bool) Observation {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	var frozen *Observation
	pending, quiet := "", false
	e.update(func(st *execState) {
		frozen = st.final
		if st.claim == claimMailed {
			pending, quiet = st.delivery, !endedOnItsOwn(st.facts.Termination)
		}
	})
	if frozen != nil {
		return *frozen
	}
	if pending != "" && claims && final && quiet && e.s.mail.withdraw(pending) {
		pending = ""
	}
	if pending != "" || !claims {
		o, err := e.sp.PeekUnread(maxChars)
		if err != nil {
			logf("execution %s: reading the spool: %v", e.id, err)
		}
		return Observation{Output: o.Text, Facts: e.Facts(), Final: final, DeliveryID: pending}
	}
	o, err := e.sp.ObserveUnread(maxChars, final)
	if err != nil {
		logf("execution %s: reading the spool: %v", e.id, err)
	}
	var obs Observation
	e.update(func(st *execState) {
		st.facts.OmittedBytes += o.Omitted
		st.facts.Version++
		obs = Observation{Output: o.Text, Facts: e.snapshot(st), Final: final}
		if !final {
			return
		}
		// The terminal result has been handed out: frozen from now on.
		st.final = &obs
		if st.claim != claimDropped {
			e.claimTo(st, claimTaken)
		}
	})
	return obs
}

// observe answers exec/observe (after its input): with wait, it waits for
// the end, the deadline or the request's cancellation. Only the owner's
// observation claims.
func (e *Execution) observe(ctx context.Context, wait time.Duration, maxChars int, claims bool) Observation {
	if wait > 0 && !e.settledNow() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-e.done:
		case <-t.C:
		case <-ctx.Done():
		case <-e.waitingStarts():
			// A person is needed now; waiting longer helps nobody.
		}
	}
	if errors.Is(context.Cause(ctx), ErrCallerGone) {
		// The answer would go nowhere: read nothing, claim nothing, so
		// the output stays unread and the result goes to the mailbox.
		return Observation{Facts: e.Facts()}
	}
	return e.observation(maxChars, e.settledNow(), claims)
}

// waitToken marks one waiting observation.
type waitToken struct{ ctx context.Context }

// beginWait registers the one waiting observation allowed at a time. A
// wait whose request was cancelled is on its way out and no longer counts,
// so a client may wait again right after cancelling.
func (e *Execution) beginWait(ctx context.Context) (*waitToken, error) {
	var tok *waitToken
	e.update(func(st *execState) {
		if st.waiter != nil && st.waiter.ctx.Err() == nil {
			return
		}
		tok = &waitToken{ctx: ctx}
		st.waiter = tok
	})
	if tok == nil {
		return nil, fault.New(fault.Conflict, "execution %s already has a waiting observation", e.id)
	}
	return tok, nil
}

// endWait ends the wait of tok, unless another has replaced it. A result
// that settled during the wait and that no observation claimed goes to
// the mailbox now.
func (e *Execution) endWait(tok *waitToken) {
	decide := false
	e.update(func(st *execState) {
		if st.waiter == tok {
			st.waiter = nil
		}
		if st.claim == claimWaiter && st.waiter == nil {
			decide = e.claimTo(st, claimDeciding)
		}
	})
	if decide {
		e.decide()
	}
}

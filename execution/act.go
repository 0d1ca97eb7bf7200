package execution

import (
	"context"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Acting on a registered execution under the caller's authority: the
// start's own wait for its yield, observations, input, stops and
// interrupts.

// AwaitStart replies to a start request from a session goroutine once the
// execution ends or yields.
func (s *Session) AwaitStart(ctx context.Context, e *Execution, yield *time.Duration, maxChars int, reply func(Observation)) {
	s.Go(func() { reply(e.awaitStart(ctx, yield, maxChars)) })
}

// Observe answers exec/observe. Input is written first; a waiting
// observation replies later from a session goroutine.
func (s *Session) Observe(ctx context.Context, c Caller, id, chars string, wait time.Duration, maxChars int, reply func(Observation, error)) error {
	e, err := s.lookup(c, id)
	if err != nil {
		return err
	}
	var tok *waitToken
	if wait > 0 && !e.settledNow() {
		if tok, err = e.beginWait(ctx); err != nil {
			return err
		}
	} else {
		wait = 0
	}
	var written <-chan error
	if chars != "" {
		if written, err = e.input(chars); err != nil {
			if wait > 0 {
				e.endWait(tok)
			}
			return err
		}
	}
	claims := !c.User
	if wait == 0 && written == nil {
		o := e.observe(ctx, 0, maxChars, claims)
		if o.Final && claims {
			e.readByOwner()
		}
		reply(o, nil)
		return nil
	}
	s.Go(func() {
		if written != nil {
			var werr error
			select {
			case werr = <-written:
			case <-ctx.Done():
				werr = fault.New(fault.Refused, "the request was cancelled while its input waited for execution %s to read it; the input stays queued", id)
			}
			if werr != nil {
				if wait > 0 {
					e.endWait(tok)
				}
				reply(Observation{}, werr)
				return
			}
		}
		o := e.observe(ctx, wait, maxChars, claims)
		if o.Final && claims {
			e.readByOwner()
		}
		if wait > 0 {
			e.endWait(tok) // before the reply, so the caller's next wait is welcome
		}
		reply(o, nil)
	})
	return nil
}

// Stop stops an execution and replies with its final observation once it
// has settled.
func (s *Session) Stop(c Caller, id string, maxChars int, reply func(Observation)) error {
	e, err := s.lookup(c, id)
	if err != nil {
		return err
	}
	claims := !c.User
	if claims {
		e.claimStop()
	}
	e.cancel(&stopCause{term: Stopped, reason: "stopped on request", user: c.User})
	s.Go(func() {
		<-e.done
		o := e.observation(maxChars, true, claims)
		if claims {
			e.readByOwner()
		}
		reply(o)
	})
	return nil
}

// Interrupt sends Ctrl-C (a signal, never queued behind input) and returns
// fresh facts.
func (s *Session) Interrupt(c Caller, id string) (Facts, error) {
	e, err := s.lookup(c, id)
	if err != nil {
		return Facts{}, err
	}
	if err := e.interrupt(); err != nil {
		return Facts{}, err
	}
	return e.Facts(), nil
}

// StopAll stops live executions and replies with the count once they
// settled: under user authority without an owner, every one (termination
// stopped); otherwise the owner's own (termination owner-stopped).
func (s *Session) StopAll(c Caller, reply func(int)) {
	all := c.User && c.Owner == ""
	term, reason := OwnerStopped, "every execution of owner "+c.owner()+" was stopped"
	if all {
		term, reason = Stopped, "every execution of the session was stopped"
	}
	s.mu.Lock()
	var targets []*Execution
	for _, e := range s.execs {
		if !e.settledNow() && (all || e.owner == c.owner()) {
			targets = append(targets, e)
		}
	}
	s.mu.Unlock()
	for _, e := range targets {
		e.cancel(&stopCause{term: term, reason: reason})
	}
	s.Go(func() {
		for _, e := range targets {
			<-e.done
		}
		reply(len(targets))
	})
}

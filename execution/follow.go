package execution

import (
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
)

// followPoll is how often a followed execution's listening ports are
// read: a person looking at it sees a server come up within a second,
// and nobody pays for executions nobody looks at.
const followPoll = time.Second

// Follow answers exec/follow. While an execution is followed (a panel's
// inspector shows it), the ports its tree listens on are read every
// followPoll, and a change of that set raises exec/changed at once, as
// a readyPort watch does. Follows are counted: each one is undone by one
// unfollow (on false), and the watch ends with the last one or at
// settlement. A follow with output also streams the new output in
// exec/output (stream.go) until its own unfollow, which says output too.
func (s *Session) Follow(c Caller, id string, on, output bool) error {
	e, err := s.lookup(c, id)
	if err != nil {
		return err
	}
	start, settled := false, false
	e.update(func(st *execState) {
		if st.facts.State == Settled {
			settled = true
			return
		}
		start = e.countFollow(st, on, output)
	})
	if settled && on {
		return fault.New(fault.Refused, "execution %s has ended: there is nothing to follow", id)
	}
	if start {
		s.Go(e.watchFollowed)
	}
	return nil
}

// countFollow counts one follow (on) or undoes one, with output or not,
// and reports whether it is the first, which starts the watch. The caller
// holds the state.
func (e *Execution) countFollow(st *execState, on, output bool) (first bool) {
	switch {
	case on:
		st.followers++
		first = st.followers == 1
		if output {
			st.streamers++
		}
	case st.followers > 0:
		st.followers--
		if output && st.streamers > 0 {
			st.streamers--
		}
	}
	e.inspected.Store(st.followers > st.streamers)
	e.streamed.Store(st.streamers > 0)
	return first
}

// watchFollowed reads the listening set while the execution is followed
// and live (from when it runs), until the last unfollow or settlement.
func (e *Execution) watchFollowed() { e.watchListening(false) }

// watchStartFollowed is the watch of a start that follows its own
// execution: nothing listens before it runs, and a look at once would
// walk its tree while it starts and prints its first output, so the
// first look is one followPoll later.
func (e *Execution) watchStartFollowed() { e.watchListening(true) }

func (e *Execution) watchListening(later bool) {
	t := time.NewTicker(followPoll)
	defer t.Stop()
	if later {
		select {
		case <-t.C:
		case <-e.done:
			return
		}
	}
	for {
		var proc process.Process
		followed := false
		e.update(func(st *execState) {
			followed = st.followers > 0 && st.facts.State != Settled
			if st.facts.State == Running || st.facts.State == Stopping {
				proc = st.proc
			}
		})
		if !followed {
			return
		}
		if proc != nil {
			if l, ok := e.listeningOf(proc); ok && e.storeListening(l) {
				e.s.changed(e)
			}
		}
		select {
		case <-t.C:
		case <-e.done:
			return
		}
	}
}

package execution

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/process"
)

// A tty execution waits for input when the kernel says every process of
// its terminal's foreground group is blocked reading the terminal and no
// output came for waitingAfterMs. The check is driven by quiet periods:
// the first one waitingAfterMs after the last output or input, then
// spaced out (doubling) to waitingRecheckMax while nothing happens, so a
// command that prints never costs a look at /proc and a silent one a look
// every few seconds: a prompt that follows output is seen waitingAfterMs
// after it, one after a long silence within waitingRecheckMax. Output or
// input ends the wait at once.

const (
	waitingRecheckMax = 8 * time.Second // longest quiet time between two looks
	promptChars       = 200             // a prompt fact keeps at most this many characters
	waitingProbeLimit = 5 * time.Second // bound of one remote look
)

// inputWatch is a tty execution's detector: immutable apart from its
// atomics, shared by the output copier, the input writer and the watcher.
type inputWatch struct {
	after time.Duration // immutable; quiet needed before a look
	kick  chan struct{} // buffered; output or input arrived
	last  atomic.Int64  // monotonic nanoseconds since base of the last output or input
	base  time.Time     // immutable
}

func newInputWatch(l Limits) *inputWatch {
	return &inputWatch{
		after: time.Duration(l.WaitingAfterMs) * time.Millisecond,
		kick:  make(chan struct{}, 1),
		base:  time.Now(),
	}
}

func (w *inputWatch) touch() {
	w.last.Store(int64(time.Since(w.base)))
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *inputWatch) quietFor() time.Duration {
	return time.Since(w.base) - time.Duration(w.last.Load())
}

// inputWaitState is the part of execState about waiting for input.
type inputWaitState struct {
	// gen counts output and input; a look's verdict counts only if none
	// came while it was made.
	gen uint64
	// starts is closed when a wait begins; nil until someone asks, and
	// again once the wait ends.
	starts chan struct{}
	// delivery is the INPUT_REQUESTED delivery of the current wait.
	delivery string
	// delivered: that delivery was durably acknowledged (and may owe
	// attention).
	delivered bool
}

// endedWait is what ending a wait leaves to do outside the lock.
type endedWait struct {
	ended     bool
	delivery  string
	delivered bool
}

// activityLocked records output or input; it ends a wait.
func (e *Execution) activityLocked(st *execState) endedWait {
	if e.watch == nil {
		return endedWait{}
	}
	st.inputWait.gen++
	return e.endWaitLocked(st)
}

// endWaitLocked clears the waiting facts, if set.
func (e *Execution) endWaitLocked(st *execState) endedWait {
	if !st.facts.WaitingForInput {
		return endedWait{}
	}
	ended := endedWait{ended: true, delivery: st.inputWait.delivery, delivered: st.inputWait.delivered}
	st.facts.WaitingForInput, st.facts.WaitingSince, st.facts.Prompt = false, nil, ""
	st.facts.Version++
	st.inputWait.starts, st.inputWait.delivery, st.inputWait.delivered = nil, "", false
	return ended
}

// settleWaitLocked clears what only a live execution has: a wait for
// input, and listening ports. What it returns goes to retractRequest.
func (e *Execution) settleWaitLocked(st *execState) endedWait {
	st.facts.Listening = nil
	return e.endWaitLocked(st)
}

// retractRequest takes back the delivery of a wait that ended:
// answered, overtaken, or nobody can answer it any more.
func (e *Execution) retractRequest(ended endedWait) {
	switch {
	case ended.delivery == "":
	case ended.delivered:
		e.s.Attend(e.owner, []string{ended.delivery})
	default:
		e.s.mail.withdraw(ended.delivery)
	}
}

// afterActivity kicks the watcher and, when a wait ended, announces it
// and takes back its delivery: the request it carried is answered (or
// overtaken), so it neither waits in the mailbox nor owes attention.
func (e *Execution) afterActivity(ended endedWait) {
	if e.watch == nil {
		return
	}
	e.watch.touch()
	if !ended.ended {
		return
	}
	e.s.changed(e)
	e.retractRequest(ended)
}

// inputArrived records input written to the terminal.
func (e *Execution) inputArrived() {
	var ended endedWait
	e.update(func(st *execState) { ended = e.activityLocked(st) })
	e.afterActivity(ended)
}

// waitingStarts returns a channel closed when the execution waits for
// input: already closed if it waits now, nil (never) without a terminal.
func (e *Execution) waitingStarts() <-chan struct{} {
	if e.watch == nil {
		return nil
	}
	var ch chan struct{}
	e.update(func(st *execState) {
		if st.inputWait.starts == nil {
			st.inputWait.starts = make(chan struct{})
			if st.facts.WaitingForInput {
				close(st.inputWait.starts)
			}
		}
		ch = st.inputWait.starts
	})
	return ch
}

// watchInput looks, after quiet periods, whether the command waits for
// input, until quiet (the command's end) is closed.
func (e *Execution) watchInput(proc process.Process, quiet <-chan struct{}) {
	w := e.watch
	w.touch() // the start counts as activity
	next := w.after
	t := time.NewTimer(next)
	defer t.Stop()
	for {
		select {
		case <-quiet:
			return
		case <-w.kick:
			next = w.after
			t.Reset(w.after)
			continue
		case <-t.C:
		}
		if q := w.quietFor(); q < w.after {
			t.Reset(w.after - q)
			continue
		}
		var gen uint64
		var waiting bool
		e.update(func(st *execState) { gen, waiting = st.inputWait.gen, st.facts.WaitingForInput })
		now := e.probeWaiting(proc)
		switch {
		case now && !waiting:
			e.beginInputWait(gen)
		case !now && waiting:
			// It stopped reading without a word (a read with a timeout).
			var ended endedWait
			e.update(func(st *execState) {
				if st.inputWait.gen == gen {
					ended = e.endWaitLocked(st)
				}
			})
			e.afterActivity(ended)
		}
		next = min(2*next, waitingRecheckMax)
		t.Reset(next)
	}
}

// remoteWaiter is a process that can look on its host (remote.Process).
type remoteWaiter interface {
	WaitingForInput(ctx context.Context) (bool, error)
}

// probeWaiting asks the kernel (here, or on the host) whether the command
// waits for input.
func (e *Execution) probeWaiting(proc process.Process) bool {
	if e.remote == nil {
		return process.WaitingForInput(proc.Pid())
	}
	rw, ok := proc.(remoteWaiter)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitingProbeLimit)
	defer cancel()
	waiting, err := rw.WaitingForInput(ctx)
	return err == nil && waiting
}

// beginInputWait sets the waiting facts, unless output or input came since the
// look gen was taken at, announces them at once and makes the wait's one
// INPUT_REQUESTED delivery.
func (e *Execution) beginInputWait(gen uint64) {
	tail, err := e.sp.Tail(4 * promptChars)
	if err != nil {
		logf("execution %s: reading the spool: %v", e.id, err)
	}
	prompt := promptOf(tail)
	begun := false
	e.update(func(st *execState) {
		if st.inputWait.gen != gen || st.facts.State != Running || st.facts.WaitingForInput {
			return
		}
		begun = true
		st.facts.WaitingForInput, st.facts.WaitingSince, st.facts.Prompt = true, stamp(time.Now()), prompt
		st.facts.Version++
		if st.inputWait.starts != nil {
			close(st.inputWait.starts)
		} else {
			st.inputWait.starts = closedChan
		}
	})
	if !begun {
		return
	}
	e.s.changed(e) // at once, not at the end of an output window
	e.requestInput(gen, prompt)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// requestInput posts the wait's INPUT_REQUESTED delivery. Once durable it
// wakes an idle root owner as a natural end does.
func (e *Execution) requestInput(gen uint64, prompt string) {
	owner := e.owner
	seq := e.s.attentionTick()
	d := Delivery{Owner: owner, Kind: KindInputRequested, Attrs: DeliveryAttrs{ExecutionID: e.id, Label: e.label, Prompt: prompt}}
	d.DeliveryID = e.s.mail.nextID()
	id := d.DeliveryID
	// Recorded before the post, so an answer that comes at once finds it.
	current := true
	e.update(func(st *execState) {
		current = st.facts.WaitingForInput && st.inputWait.gen == gen
		if current {
			st.inputWait.delivery = id
		}
	})
	if !current {
		return
	}
	durable := func(d Delivery) {
		stillWaiting := false
		e.update(func(st *execState) {
			if st.facts.WaitingForInput && st.inputWait.delivery == d.DeliveryID {
				st.inputWait.delivered, stillWaiting = true, true
			}
		})
		e.s.m.events.Delivered(d)
		if stillWaiting && owner == RootOwner {
			e.s.owe(owner, d.DeliveryID, seq)
		}
	}
	e.s.mail.post(d, durable, nil)
}

// promptOf is the last partial line of tail, terminal escapes and
// control characters removed, at most promptChars characters (its end).
func promptOf(tail string) string {
	if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	line := stripEscapes(tail)
	if i := strings.LastIndexByte(line, '\r'); i >= 0 && i < len(line)-1 {
		line = line[i+1:] // a carriage return rewrites the line
	}
	line = strings.Map(func(r rune) rune {
		if r == '\t' || (r >= ' ' && r != 0x7f) {
			return r
		}
		return -1
	}, line)
	if n := utf8.RuneCountInString(line); n > promptChars {
		for range n - promptChars {
			_, size := utf8.DecodeRuneInString(line)
			line = line[size:]
		}
	}
	return line
}

// stripEscapes removes ANSI escape sequences: CSI (ESC [ ... final), OSC
// (ESC ] ... BEL or ESC \), and two-byte ones. Carriage returns stay.
func stripEscapes(s string) string {
	if !strings.ContainsRune(s, 0x1b) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != 0x1b {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case '[':
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
		case ']', 'P', '_', '^':
			j := i + 2
			for j < len(s) {
				if s[j] == 0x07 {
					break
				}
				if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
					j++
					break
				}
				j++
			}
			i = j
		default:
			i++
		}
	}
	return b.String()
}

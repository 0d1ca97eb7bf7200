package execution

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
)

// Ready: a start that names readyPattern or readyPort yields as soon as an
// output line matches, or the execution's process tree listens on the
// port, whatever its yieldMs. Lines are matched by the output copier as
// they pass; the port is looked for by a watcher that runs only while it
// is not found, quickly while the start waits and slowly after it yielded.
// The ports a live execution listens on are otherwise read when its facts
// are taken, at most every listenFresh.

const (
	readyLineBytes   = 4096                   // a longer line is matched on its start
	readyPollPending = 20 * time.Millisecond  // the port watch while the start waits
	readyPollYielded = 250 * time.Millisecond // the port watch after the start yielded
	listenFresh      = 250 * time.Millisecond // facts reuse listening ports read this recently
	remoteLookLimit  = 5 * time.Second        // bound of one remote look at ports
)

// readiness is a start's ready condition.
type readiness struct {
	pattern *regexp.Regexp // immutable; nil: none
	port    int            // immutable; 0: none
	// reached is closed once, under the execution's lock, when the facts
	// say ready.
	reached chan struct{}
	done    atomic.Bool // ready: the copier and the watcher stop looking
	partial []byte      // the copier's own: an incomplete last line
}

// readiness checks and compiles the start's ready condition.
func (p StartParams) readiness() (*readiness, error) {
	if p.ReadyPattern == "" && p.ReadyPort == 0 {
		return nil, nil
	}
	r := &readiness{port: p.ReadyPort, reached: make(chan struct{})}
	if p.ReadyPort < 0 || p.ReadyPort > 65535 {
		return nil, fault.New(fault.InvalidParams, "readyPort must be a TCP port (1 to 65535), got %d", p.ReadyPort)
	}
	if p.ReadyPattern != "" {
		re, err := regexp.Compile(p.ReadyPattern)
		if err != nil {
			return nil, fault.New(fault.InvalidParams, "readyPattern is not a valid RE2 pattern: %w", err)
		}
		r.pattern = re
	}
	return r, nil
}

// readyReached returns a channel closed once the execution is ready; nil
// without a ready condition.
func (e *Execution) readyReached() <-chan struct{} {
	if e.ready == nil {
		return nil
	}
	return e.ready.reached
}

// feed matches the complete lines of b, until one matches.
func (r *readiness) feed(e *Execution, b []byte) {
	if r.pattern == nil || r.done.Load() {
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			room := readyLineBytes - len(r.partial)
			r.partial = append(r.partial, b[:max(0, min(len(b), room))]...)
			return
		}
		line := b[:i]
		if len(r.partial) > 0 {
			room := readyLineBytes - len(r.partial)
			line = append(r.partial, line[:max(0, min(len(line), room))]...)
			r.partial = r.partial[:0]
		}
		b = b[i+1:]
		if len(line) > readyLineBytes {
			line = line[:readyLineBytes]
		}
		text := stripEscapes(string(bytes.TrimRight(line, "\r")))
		if r.pattern.MatchString(text) {
			e.markReady(text, 0, nil)
			return
		}
	}
}

// markReady sets the ready facts once (with the listening ports that
// showed it, if any) and announces them.
func (e *Execution) markReady(line string, port int, listening []process.Listener) {
	marked := false
	e.update(func(st *execState) {
		if st.facts.Ready || st.facts.State == Settled {
			return
		}
		marked = true
		st.facts.Ready, st.facts.ReadyLine, st.facts.ReadyPort = true, line, port
		if listening != nil {
			st.facts.Listening, st.listenAt = listening, time.Now()
		}
		st.facts.Version++
		close(e.ready.reached)
	})
	if marked {
		e.ready.done.Store(true)
		e.s.changed(e)
	}
}

// watchReadyPort looks for the ready port until the tree listens on it or
// quiet (the command's end) is closed; a change of the listening set on
// the way is announced.
func (e *Execution) watchReadyPort(proc process.Process, quiet <-chan struct{}) {
	r := e.ready
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-quiet:
			return
		case <-t.C:
		}
		if r.done.Load() {
			return
		}
		if l, ok := e.listeningOf(proc); ok {
			if slices.ContainsFunc(l, func(x process.Listener) bool { return x.Port == r.port }) {
				e.markReady("", r.port, l)
				return
			}
			if e.storeListening(l) {
				e.s.changed(e)
			}
		}
		wait := readyPollPending
		if e.Yielded() {
			wait = readyPollYielded
		}
		t.Reset(wait)
	}
}

// Yielded reports whether the start has yielded.
func (e *Execution) Yielded() bool {
	var y bool
	e.update(func(st *execState) { y = st.facts.Yielded })
	return y
}

// remoteListener is a process whose host can list its ports
// (remote.Process).
type remoteListener interface {
	Listening(ctx context.Context) ([]process.Listener, error)
}

// listeningOf reads the ports proc's tree listens on, here or on its host.
func (e *Execution) listeningOf(proc process.Process) ([]process.Listener, bool) {
	if e.remote == nil {
		return process.Listening(proc.Pid()), true
	}
	rl, ok := proc.(remoteListener)
	if !ok {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteLookLimit)
	defer cancel()
	l, err := rl.Listening(ctx)
	return l, err == nil
}

// storeListening records l as the listening ports of a live execution and
// reports whether they changed.
func (e *Execution) storeListening(l []process.Listener) bool {
	changed := false
	e.update(func(st *execState) {
		if st.facts.State == Settled {
			return
		}
		st.listenAt = time.Now()
		if !slices.Equal(st.facts.Listening, l) {
			st.facts.Listening = l
			st.facts.Version++
			changed = true
		}
	})
	return changed
}

// listenDue reports whether a live local execution's ports were last
// read longer than listenFresh ago. A remote one's are read by its port
// watch and by exec/forward, never per fact.
func (e *Execution) listenDue(st *execState) bool {
	live := st.facts.State == Running || st.facts.State == Stopping
	return e.remote == nil && live && st.proc != nil && time.Since(st.listenAt) >= listenFresh
}

// refreshListening reads the ports of a live local execution when the
// facts have none fresh, and reports whether they changed. With digests
// (one execution of many read in a row, after a listing), the tree's
// descriptors are scanned only when a socket began or stopped listening
// in its network namespace since its last scan: a digest of the
// namespace's listening sockets tells, read once per namespace into
// digests instead of dozens of /proc reads per execution.
func (e *Execution) refreshListening(digests map[string]uint64) bool {
	var proc process.Process
	var last uint64
	var scanned bool
	e.update(func(st *execState) {
		if e.listenDue(st) {
			proc, last, scanned = st.proc, st.listenDigest, st.listenScanned
			st.listenAt = time.Now() // one reader at a time
			st.listenScanned = false
		}
	})
	if proc == nil {
		return false
	}
	if q, ok := proc.(interface{ Quiet(time.Duration) bool }); ok && q.Quiet(0) {
		// Its shell is reaped and nothing of it is left: no scan (a short
		// command is often over by the time its change is announced).
		return e.storeListening(nil)
	}
	pid := proc.Pid()
	var digest uint64
	known := false
	if digests != nil {
		if ns, ok := process.NetNamespace(pid); ok {
			if digest, known = digests[ns]; !known {
				if digest, known = process.ListenDigest(pid); known {
					digests[ns] = digest
				}
			}
		}
		if known && scanned && digest == last {
			e.update(func(st *execState) { st.listenScanned = true })
			return false
		}
	}
	changed := e.storeListening(process.Listening(pid))
	if known {
		e.update(func(st *execState) { st.listenDigest, st.listenScanned = digest, true })
	}
	return changed
}

// ListeningNow reads the ports the execution's tree listens on now (on
// its host for a remote one) and records them.
func (e *Execution) ListeningNow() []process.Listener {
	var proc process.Process
	e.update(func(st *execState) {
		if st.facts.State == Running || st.facts.State == Stopping {
			proc = st.proc
		}
	})
	if proc == nil {
		return nil
	}
	l, ok := e.listeningOf(proc)
	if !ok {
		return nil
	}
	e.storeListening(l)
	return l
}

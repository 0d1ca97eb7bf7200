package execution

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
)

// Session is one agent conversation's executions.
type Session struct {
	m        *Manager
	id       string              // immutable
	stateDir *statedir.Dir       // immutable; released at close
	prefix   string              // immutable; fresh per open
	limits   Limits              // immutable
	journal  *transcript.Journal // immutable; closed at close
	// life is the session's one lifetime: it ends when the session begins
	// to close (under mu, so no execution registers after that), which
	// also stops a remote connect. (The login environment is the
	// manager's, shared by every session.)
	life    context.Context
	endLife context.CancelFunc
	runner  *process.Local
	sched   scheduler
	wg      sync.WaitGroup // run goroutines and waiting requests

	dir     *spool.Dir  // immutable; logical views of the logs
	retireQ chan string // logs to compress, for the retirer

	mu      sync.Mutex
	owners  map[string]string     // guarded by mu; owner of every execution of this open
	execs   map[string]*Execution // guarded by mu; live and retained
	counter int                   // guarded by mu
	// live counts the executions not settled: raised under mu by a
	// start, lowered by a settlement (so a start's check of MaxLive needs
	// no walk over every execution).
	live atomic.Int64
	// discarded counts deliveries dropped at close; guarded by mu.
	discarded int
	monitors  map[string]*Monitor // guarded by mu
	monitorN  int                 // guarded by mu
	// unknown holds the final facts of executions whose outcome could not
	// be proven (a lost SSH transport), until the person acknowledges
	// them; guarded by unknownMu, which is taken under any other lock.
	unknownMu sync.Mutex
	unknown   []Facts

	mail *mailbox  // immutable
	att  attention // wake marks

	// listening is set while a goroutine reads the listening ports of
	// executions a listing found stale (see Live).
	listening atomic.Bool

	// changes holds the executions changed since the last exec/changed
	// was written (see TakeChanged).
	chMu    sync.Mutex
	changes map[*Execution]struct{} // guarded by chMu
	// sent holds the facts of each live execution as TakeChanged last
	// returned them: a change that is only growth against them goes
	// out as a Growth.
	sent map[*Execution]Facts // guarded by chMu
	// grid holds, per window length, what announces growth at the end
	// of the current window (see atWindowEnd).
	gridMu sync.Mutex
	grid   map[time.Duration][]func() bool // guarded by gridMu

	remoteDir string // set once at open; see artifactDir
	// target is the description of the session's target, set once at
	// open (target.go), for a client that attaches later.
	target atomic.Pointer[TargetInfo]
	// recorded is the state directory's record of the target as the
	// open left it; nil when the open wrote none.
	recMu    sync.Mutex
	recorded *targetRecord // guarded by recMu

	ports portForwards // exec/forward listeners (portforward.go)
	// The session's sandbox and resource defaults, set once at open.
	sandboxDef   *sandbox.Policy
	resourcesDef *sandbox.Resources
	// backend is the probe of bubblewrap, run once on first need.
	backendOnce sync.Once
	backend     sandbox.Probe
}

// Discarded returns how many pending deliveries the close dropped.
func (s *Session) Discarded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.discarded
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// lookup finds an execution visible to c; anything else is "not found".
func (s *Session) lookup(c Caller, id string) (*Execution, error) {
	s.mu.Lock()
	e, ok := s.execs[id]
	s.mu.Unlock()
	if !ok || !c.sees(e.owner) {
		return nil, fault.New(fault.NotFound, "no execution %q", id)
	}
	return e, nil
}

// Go runs f on a goroutine the session waits for at close.
func (s *Session) Go(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// List returns live executions visible to c: under model authority the
// owner's yielded ones and its one-shots, helpers and evals, under user
// authority all, ordered by start.
func (s *Session) List(c Caller) []Facts { return s.AppendList(nil, c) }

// AppendList is List appending to out, whose room a caller that lists
// often reuses: a listing of hundreds of facts is otherwise most of what
// the helper allocates, and each collection slows the listings it meets.
func (s *Session) AppendList(out []Facts, c Caller) []Facts {
	n := len(out)
	out = s.appendLive(out)
	kept := slices.DeleteFunc(out[n:], func(f Facts) bool {
		return !c.User && (f.Owner != c.owner() || (!f.Yielded && f.Kind.Yields()))
	})
	return out[:n+len(kept)]
}

// Live returns the facts of every live execution, by start (queued ones
// last, by arrival). Live means not settled in the facts it returns, so a
// listing never holds an execution whose final facts a consumer may
// already have seen.
//
// The listening ports it shows are those last read: reading them for
// hundreds of executions would make one listing in every listenFresh
// tens of milliseconds slow. Those older than listenFresh are read after
// it, off the caller's path, and a change is announced by exec/changed.
func (s *Session) Live() []Facts { return s.appendLive(nil) }

func (s *Session) appendLive(out []Facts) []Facts {
	var stale []*Execution
	n := len(out)
	s.mu.Lock()
	out = slices.Grow(out, len(s.execs))
	if out == nil {
		out = []Facts{} // a listing of none is [], not null
	}
	for _, e := range s.execs {
		if e.settledNow() {
			continue
		}
		f, old := e.factsAsRead()
		if f.State != Settled {
			out = append(out, f)
		}
		if old {
			stale = append(stale, e)
		}
	}
	// Started under mu while the session lives, so that close, which
	// ends the life under mu, waits for it.
	if len(stale) > 0 && s.life.Err() == nil && s.listening.CompareAndSwap(false, true) {
		s.Go(func() {
			defer s.listening.Store(false)
			digests := map[string]uint64{}
			for _, e := range stale {
				if s.life.Err() != nil {
					return
				}
				if e.refreshListening(digests) {
					s.changed(e)
				}
			}
		})
	}
	s.mu.Unlock()
	sortFacts(out[n:])
	return out
}

// sortFacts orders facts as exec/list does: those started by start, then
// the others; ties by id, which is arrival order.
func sortFacts(out []Facts) {
	sort.Slice(out, func(i, j int) bool {
		return factsBefore(&out[i], &out[j]) // not copies: a listing sorts hundreds
	})
}

// factsBefore says whether a comes before b in exec/list order.
func factsBefore(a, b *Facts) bool {
	if (a.StartedAt == nil) != (b.StartedAt == nil) {
		return a.StartedAt != nil
	}
	if a.StartedAt != nil && !a.StartedAt.Equal(b.StartedAt.Time) {
		return a.StartedAt.Before(b.StartedAt.Time)
	}
	return a.ExecutionID < b.ExecutionID
}

// TakeChanged returns the current facts of every execution changed since
// the last call, in exec/list order, and forgets those changes; ok is
// false when none changed. An execution whose facts differ from those it
// last returned only by growth (see Growth) is in grown instead, in the
// same order: hundreds of live commands then cost a consumer a few
// numbers each, not their whole facts. A settled execution is returned
// once, with its final facts, however often it is marked after: that
// tells a consumer it left the live set. The sink of exec/changed calls
// it when it writes one, so every change made meanwhile joins it.
func (s *Session) TakeChanged() (changed []Facts, grown []Growth, ok bool) {
	s.chMu.Lock()
	taken := s.changes
	s.changes = nil
	s.chMu.Unlock()
	if len(taken) == 0 {
		return nil, nil, false
	}
	type pair struct {
		e *Execution
		f Facts
	}
	snap := make([]pair, 0, len(taken))
	// Hundreds of live commands are marked every second by their growth
	// alone: each tree is rescanned for ports only when its namespace's
	// listening sockets changed, not every time (it was a third of the
	// helper's CPU with 200 printing commands).
	digests := map[string]uint64{}
	for e := range taken {
		snap = append(snap, pair{e, e.factsWith(digests)})
	}
	sort.Slice(snap, func(i, j int) bool { return factsBefore(&snap[i].f, &snap[j].f) })
	changed = make([]Facts, 0, len(snap))
	s.chMu.Lock()
	if s.sent == nil {
		s.sent = map[*Execution]Facts{}
	}
	for _, p := range snap {
		if p.f.State == Settled {
			delete(s.sent, p.e)
			if p.e.finalShown {
				continue
			}
			p.e.finalShown = true
			changed = append(changed, p.f)
			continue
		}
		last, seen := s.sent[p.e]
		if seen && reflect.DeepEqual(last, p.f) {
			continue // marked twice with nothing new between: no news
		}
		if seen && grewOnly(last, p.f) {
			grown = append(grown, p.f.growth())
		} else {
			changed = append(changed, p.f)
		}
		s.sent[p.e] = p.f
	}
	s.chMu.Unlock()
	return changed, grown, len(changed)+len(grown) > 0
}

// beginClose marks the session closing, stops every live execution
// (session-ended). It does not block.
func (s *Session) beginClose() {
	s.mu.Lock()
	first := s.life.Err() == nil
	s.endLife()
	for _, e := range s.execs {
		e.cancel(&stopCause{term: SessionEnded, reason: "the session was closed"})
	}
	s.mu.Unlock()
	if first {
		// A closing session delivers nothing; what is pending is dropped.
		n := s.mail.close()
		if n > 0 {
			logf("session %s: closed with %d undelivered results (their logs stay)", s.id, n)
			s.journalNotice("", "", fmt.Sprintf("● Session closed with %d undelivered results; their output stays readable", n),
				map[string]any{"kind": "SESSION_CLOSED", "discarded": n})
		}
		s.mu.Lock()
		s.discarded = n
		s.mu.Unlock()
	}
}

// Wait waits for everything the session runs after beginClose, then
// releases the state directory.
func (s *Session) Wait() {
	s.mu.Lock()
	targets := make([]*Execution, 0, len(s.execs))
	for _, e := range s.execs {
		targets = append(targets, e)
	}
	s.mu.Unlock()
	for _, e := range targets {
		<-e.done
	}
	s.mu.Lock()
	for id, e := range s.execs {
		close(e.retired) // ends its retention wait
		delete(s.execs, id)
	}
	s.mu.Unlock()
	s.wg.Wait()
	if err := s.journal.Close(); err != nil {
		logf("session %s: closing the journal: %v", s.id, err)
	}
	s.dir.Close()
	_ = s.stateDir.Release()
}

// settled is called once per execution, after its facts became final.
func (s *Session) settled(e *Execution, f Facts) {
	s.m.events.Settled(f)
	s.changed(e)
	retain := time.Duration(s.limits.RetainMs) * time.Millisecond
	s.Go(func() {
		t := time.NewTimer(retain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-e.retired:
			return
		}
		// A pending delivery keeps the execution observable.
		select {
		case <-e.unclaimed:
		case <-e.retired:
			return
		}
		s.mu.Lock()
		removed := s.execs[e.id] == e
		if removed {
			delete(s.execs, e.id)
			close(e.retired)
		}
		s.mu.Unlock()
		if removed {
			// Nobody can poll it any more: its log may be compressed.
			s.retireLater(e, f.EndedAt.Time)
		}
	})
}

// changed records that e's facts changed (registered, started, yielded,
// stopping, output grew, settled, ...) and tells the sink, which coalesces
// the news per session and takes the changes when it writes them.
func (s *Session) changed(e *Execution) {
	s.mark(e)
	s.m.events.Changed(s)
}

// mark records that e's facts changed without telling the sink.
func (s *Session) mark(e *Execution) {
	s.chMu.Lock()
	if s.changes == nil {
		s.changes = map[*Execution]struct{}{}
	}
	s.changes[e] = struct{}{}
	s.chMu.Unlock()
}

// atWindowEnd runs fn at the end of the current window of length every
// of growthGrid, with every other fn due then; fn marks a change and
// says so, and what they marked goes to the sink together: one
// exec/changed for the growth of hundreds of executions.
func (s *Session) atWindowEnd(every time.Duration, fn func() bool) {
	s.gridMu.Lock()
	defer s.gridMu.Unlock()
	if s.grid == nil {
		s.grid = map[time.Duration][]func() bool{}
	}
	if len(s.grid[every]) == 0 {
		now := time.Since(growthGrid)
		time.AfterFunc((now/every+1)*every-now, func() { s.windowEnd(every) })
	}
	s.grid[every] = append(s.grid[every], fn)
}

func (s *Session) windowEnd(every time.Duration) {
	s.gridMu.Lock()
	due := s.grid[every]
	delete(s.grid, every)
	s.gridMu.Unlock()
	marked := false
	for _, fn := range due {
		if fn() {
			marked = true
		}
	}
	if marked {
		s.m.events.Changed(s)
	}
}

// removeScratch removes a scratch directory and everything in it, even
// what the command made read-only inside.
func removeScratch(dir string) {
	if dir == "" {
		return
	}
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		logf("removing scratch directory %s: %v", dir, err)
	}
}

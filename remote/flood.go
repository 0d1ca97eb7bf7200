package remote

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/remote/agent"
)

// While a remote command floods output, the SSH library allocates a fresh
// buffer for every 32 KiB packet it decrypts: a MiB of garbage per MiB of
// output. With the helper's small live heap the collector would run every
// few MiB and spend a third of the helper's CPU on the flood (marking,
// sweeping, giving pages back to the kernel and faulting them in again).
// So while at least one execution floods, the heap may grow by
// floodHeadroom past what is live before it is collected, and no more: a
// bounded cost in memory, paid only during a flood, instead of a higher
// GOGC for every helper at all times.
//
// Each packet also passes through three goroutines (the library's
// reader, its demultiplexer, the agent's frame reader), and with more
// than one P every hand-off wakes another thread, which spins looking for
// the goroutine and sleeps again: two to three times the context
// switches of OpenSSH's client per MiB, and a third of the helper's CPU
// for the flood. So while a flood lasts the helper runs on one P: each
// hand-off is then a switch between goroutines on the same thread. The
// rest of the helper keeps working meanwhile, on that P (a goroutine
// blocked in a system call hands it on as before).
//
// The settings outlast the last flood by floodLinger: output that comes
// in bursts keeps the pages the heap grew into, rather than giving them
// back and faulting them in again at the next burst.

// floodHeadroom is the garbage the heap may hold during a flood.
const floodHeadroom = 32 << 20

// floodAfter is the output that, received within one floodSpan, makes an
// execution flood: one credit window, far more than a quick command
// prints.
const floodAfter = agent.Window

// floodSpan is how long the rate is looked at: an execution floods once
// it received floodAfter within a span, and stops flooding when a span
// passes in which less came (or when its output ends).
const floodSpan = time.Second

// floodLinger is how long the flood's settings stay after the last flood
// stopped; a variable for the tests.
var floodLinger = 2 * time.Second

// minHeap is the runtime's smallest heap goal at GOGC=100 (4 MiB, scaled
// with GOGC): the percentage is computed against no less, so that the
// scaled minimum stays within the headroom too.
const minHeap = 4 << 20

var flood struct {
	mu sync.Mutex
	n  int // guarded by mu; executions flooding now
	// applied: the settings below are in force, from the first flood to
	// floodLinger after the last; guarded by mu.
	applied bool
	prev    int  // guarded by mu; GOGC before the first of them
	set     int  // guarded by mu; GOGC set now, 0 when left alone
	oneP    bool // guarded by mu; GOMAXPROCS was set to 1
	// gen counts the floods' ends: a restore scheduled by an end runs
	// only if no flood started after it; guarded by mu.
	gen       int
	left      bool // guarded by mu; GOGC is the user's (GOGC set): never changed
	leftProcs bool // guarded by mu; GOMAXPROCS is the user's: never changed
	inited    bool // guarded by mu
	sample    []metrics.Sample
}

// floodStarted counts one more flooding execution; with the first, the
// collector is aimed and the helper runs on one P.
func floodStarted() {
	flood.mu.Lock()
	defer flood.mu.Unlock()
	if !flood.inited {
		flood.inited = true
		_, flood.left = os.LookupEnv("GOGC")
		_, flood.leftProcs = os.LookupEnv("GOMAXPROCS")
		flood.sample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}}
	}
	flood.n++
	if flood.n > 1 {
		return
	}
	flood.gen++ // a restore still waiting is not needed any more
	if flood.applied {
		return
	}
	flood.applied = true
	if !flood.left {
		metrics.Read(flood.sample)
		flood.prev, flood.set = -1, 0 // off, or unknown: left alone
		if s := flood.sample[1]; s.Value.Kind() == metrics.KindUint64 {
			flood.prev = int(s.Value.Uint64())
		}
		floodAimLocked()
	}
	if !flood.leftProcs && runtime.GOMAXPROCS(0) > 1 {
		runtime.GOMAXPROCS(1)
		flood.oneP = true
	}
}

// floodEnded counts one flooding execution less; floodLinger after the
// last (unless another started meanwhile), GOGC and GOMAXPROCS are what
// they were, and the flood's garbage is collected and its memory given
// back to the system at once (in the background: a collection and a
// scavenge take a few milliseconds), not whenever the next collection
// and the runtime's slow scavenger come to it.
func floodEnded() {
	flood.mu.Lock()
	defer flood.mu.Unlock()
	flood.n--
	if flood.n > 0 {
		return
	}
	flood.gen++
	if floodLinger <= 0 {
		floodRestoreLocked()
		return
	}
	gen := flood.gen
	time.AfterFunc(floodLinger, func() {
		flood.mu.Lock()
		defer flood.mu.Unlock()
		if flood.gen == gen && flood.n == 0 {
			floodRestoreLocked()
		}
	})
}

func floodRestoreLocked() {
	if !flood.applied {
		return
	}
	flood.applied = false
	if flood.oneP {
		runtime.SetDefaultGOMAXPROCS()
		flood.oneP = false
	}
	if flood.set != 0 {
		debug.SetGCPercent(flood.prev)
		flood.set = 0
		go debug.FreeOSMemory()
	}
	if floodRestored != nil {
		floodRestored()
	}
}

// floodRestored, when set (tests only), runs once the settings are put
// back, with flood.mu held.
var floodRestored func()

// floodAim aims the collector again at the headroom, as the live heap
// changes during a flood (called every few MiB of it).
func floodAim() {
	flood.mu.Lock()
	defer flood.mu.Unlock()
	if flood.n > 0 {
		floodAimLocked()
	}
}

func floodAimLocked() {
	if flood.left || flood.prev <= 0 {
		return // the user's GOGC, or collection off: left alone
	}
	metrics.Read(flood.sample)
	live := int64(minHeap)
	if s := flood.sample[0]; s.Value.Kind() == metrics.KindUint64 {
		live = max(live, int64(s.Value.Uint64()))
	}
	pct := max(int(floodHeadroom*100/live), flood.prev)
	// Small moves are not worth the runtime's recomputation.
	if cur := max(flood.set, flood.prev); pct*10 < cur*9 || pct*10 > cur*11 {
		debug.SetGCPercent(pct)
		flood.set = pct
	}
}

// floodMeter tells whether one execution's output floods. Its owner
// guards it with a lock of its own, which it passes to add (the meter's
// timer takes it to look at the rate), and calls stop when the output
// ends.
type floodMeter struct {
	on        bool
	spanFrom  time.Time // start of the span add counts in
	spanBytes int64     // received in it
	sinceLook int64     // received since the timer last looked, while on
	timer     *time.Timer
}

// add counts n bytes received now; mu is the owner's lock, held.
func (m *floodMeter) add(n int, mu *sync.Mutex) {
	now := time.Now()
	if now.Sub(m.spanFrom) > floodSpan {
		m.spanFrom, m.spanBytes = now, 0
	}
	m.spanBytes += int64(n)
	m.sinceLook += int64(n)
	if m.on || m.spanBytes < floodAfter {
		return
	}
	m.on, m.sinceLook = true, 0
	floodStarted()
	m.timer = time.AfterFunc(floodSpan, func() {
		mu.Lock()
		defer mu.Unlock()
		if !m.on {
			return
		}
		if m.sinceLook < floodAfter {
			m.stop()
			return
		}
		m.sinceLook = 0
		m.timer.Reset(floodSpan)
	})
}

// flooding says whether the output floods now.
func (m *floodMeter) flooding() bool { return m.on }

// stop ends the flood, if there is one; the owner's lock is held.
func (m *floodMeter) stop() {
	if m.on {
		m.on = false
		m.timer.Stop()
		floodEnded()
	}
}

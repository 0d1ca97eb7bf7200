package remote

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"

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

// floodHeadroom is the garbage the heap may hold during a flood.
const floodHeadroom = 32 << 20

// floodAfter is the output of one execution after which it floods: one
// credit window, far more than a quick command prints.
const floodAfter = agent.Window

// minHeap is the runtime's smallest heap goal at GOGC=100 (4 MiB, scaled
// with GOGC): the percentage is computed against no less, so that the
// scaled minimum stays within the headroom too.
const minHeap = 4 << 20

var flood struct {
	mu     sync.Mutex
	n      int  // guarded by mu; executions flooding now
	prev   int  // guarded by mu; GOGC before the first of them
	set    int  // guarded by mu; GOGC set now, 0 when left alone
	left   bool // guarded by mu; GOGC is the user's (GOGC set): never changed
	inited bool // guarded by mu
	sample []metrics.Sample
}

// floodStarted counts one more flooding execution and aims the collector.
func floodStarted() {
	flood.mu.Lock()
	defer flood.mu.Unlock()
	if !flood.inited {
		flood.inited = true
		_, flood.left = os.LookupEnv("GOGC")
		flood.sample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}}
	}
	flood.n++
	if flood.n == 1 && !flood.left {
		metrics.Read(flood.sample)
		flood.prev, flood.set = -1, 0 // off, or unknown: left alone
		if s := flood.sample[1]; s.Value.Kind() == metrics.KindUint64 {
			flood.prev = int(s.Value.Uint64())
		}
		floodAimLocked()
	}
}

// floodEnded counts one flooding execution less; after the last, GOGC is
// what it was, and the flood's garbage is collected and its memory given
// back to the system at once (in the background: a collection and a
// scavenge take a few milliseconds), not whenever the next collection
// and the runtime's slow scavenger come to it.
func floodEnded() {
	flood.mu.Lock()
	defer flood.mu.Unlock()
	flood.n--
	if flood.n == 0 && flood.set != 0 {
		debug.SetGCPercent(flood.prev)
		flood.set = 0
		go debug.FreeOSMemory()
	}
}

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

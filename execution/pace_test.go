package execution

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// A window's end whose timer runs late (a loaded machine) still says the
// news that comes after it: news is not said at once beside it, which
// for hundreds of executions was one exec/changed each, not one for all.
func TestPaceWaitsForALateWindowEnd(t *testing.T) {
	window := func() time.Duration { return time.Since(growthGrid) / followedEvery }
	// A loaded machine may put the steps in different windows, or run
	// the window's end before it is held: then try again.
	for try := 0; try < 20; try++ {
		s := &Session{}
		var said, atEnd atomic.Int32
		p := newPace(func(end bool) bool {
			said.Add(1)
			if end {
				atEnd.Add(1)
			}
			return false
		})
		p.step(s, followedEvery) // said at once
		w := window()
		p.step(s, followedEvery) // owed at the window's end
		// The window's end is held back, as a late timer would be,
		// until the next window has begun.
		s.gridMu.Lock()
		if !p.owed.Load() || window() != w {
			s.gridMu.Unlock()
			continue
		}
		ended := testsupport.Poll(time.Second, func() bool { return window() > w })
		p.step(s, followedEvery) // news of the next window
		before := said.Load()
		s.gridMu.Unlock()
		if !ended {
			t.Fatal("the window never ended")
		}
		if before != 1 {
			t.Fatalf("said %d times before the late window's end, want once (news waits for it)", before)
		}
		if !testsupport.Poll(5*time.Second, func() bool { return atEnd.Load() == 1 }) {
			t.Fatalf("the late window's end never said what was owed (said %d, at an end %d)", said.Load(), atEnd.Load())
		}
		return
	}
	t.Fatal("no two steps fell in one window in 20 tries")
}

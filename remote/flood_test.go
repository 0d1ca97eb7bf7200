package remote

import (
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote/agent"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
)

func gcPercent(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestFloodRaisesHeapGoalWithinHeadroom: while output floods, the heap
// may grow past what is live by about floodHeadroom and no more; after
// the last flood GOGC is what it was.
func TestFloodRaisesHeapGoalWithinHeadroom(t *testing.T) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		t.Fatal("GOGC is set in the test's environment: the flood leaves it alone")
	}
	before := gcPercent(t)
	floodStarted()
	floodStarted() // a second flood at the same time
	during := gcPercent(t)
	goal := heapGoal()
	floodEnded()
	stillDuring := gcPercent(t)
	floodEnded()
	after := gcPercent(t)
	if during <= before {
		t.Errorf("GOGC during a flood %d, want above %d", during, before)
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if bound := max(live[0].Value.Uint64(), minHeap) + floodHeadroom + floodHeadroom/10; goal > bound {
		t.Errorf("heap goal during a flood %d bytes, want at most %d (live %d + headroom)", goal, bound, live[0].Value.Uint64())
	}
	if stillDuring != during {
		t.Errorf("GOGC %d with one flood left, want %d", stillDuring, during)
	}
	if after != before {
		t.Errorf("GOGC after the floods %d, want %d again", after, before)
	}
}

// TestFloodLeavesTheUsersGOGC: a GOGC the user set is never changed.
func TestFloodLeavesTheUsersGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	old := debug.SetGCPercent(150)
	defer debug.SetGCPercent(old)
	flood.mu.Lock()
	flood.inited = false
	flood.mu.Unlock()
	defer func() {
		flood.mu.Lock()
		flood.inited = false
		flood.mu.Unlock()
	}()
	floodStarted()
	during := gcPercent(t)
	floodEnded()
	if during != 150 {
		t.Errorf("GOGC during a flood %d, want the user's 150", during)
	}
}

// TestAgentOutputFloodRaisesGCPercentUntilItsEnd: a command of the host
// agent that prints more than floodAfter raises GOGC while its output
// comes, and its end puts it back.
func TestAgentOutputFloodRaisesGCPercentUntilItsEnd(t *testing.T) {
	p, _ := agentPool(t)
	before := gcPercent(t)
	proc, err := Runner{Pool: p, Target: target("")}.Start(t.Context(), process.Spec{Command: "head -c " + strconv.Itoa(2*floodAfter) + " /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	out := proc.Output()
	if _, err := io.CopyN(io.Discard, out, floodAfter+agent.Window/2); err != nil {
		t.Fatal(err)
	}
	during := gcPercent(t)
	if _, err := io.Copy(io.Discard, out); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	_ = proc.CloseOutput()
	after := gcPercent(t)
	if during <= before {
		t.Errorf("GOGC while the output floods %d, want above %d", during, before)
	}
	if after != before {
		t.Errorf("GOGC after the output's end %d, want %d again", after, before)
	}
}

package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// scaleLive is how many executions the scale test keeps live at once:
// four times the thread bound, so a thread per process would show, while
// the race-built helper's forks stay within the suite's time (the
// benchmark, `go run ./test/bench scale`, holds 500).
const scaleLive = 250

// Limits of the helper at scaleLive live `sleep` executions.
const (
	scaleMaxThreads = 64
)

// At scale the helper holds no OS thread per live process: one
// reaper waits for every child and output is read through the poller. A
// thread count is not a time, so it is asserted here; RSS is reported
// (the race detector this helper is built with multiplies it) and bounded
// by the benchmark.
func TestThreadsAtScale(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"maxLive": scaleLive, "graceMs": 500})
	ids := make([]string, scaleLive)
	var wg sync.WaitGroup
	var failed sync.Once
	sem := make(chan struct{}, 8)
	for i := range scaleLive {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			o, err := s.start("sleep 1000", map[string]any{"yieldMs": 0})
			if err != nil {
				failed.Do(func() { t.Errorf("exec/start %d: %v", i, err) })
				return
			}
			ids[i] = o.Facts.ExecutionID
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	running := 0
	for _, f := range list.Executions {
		if f.State == execution.Running {
			running++
		}
	}
	pid := h.c.Child().Pid()
	threads, err := testsupport.StatusField(pid, "Threads")
	if err != nil {
		t.Fatal(err)
	}
	rss, _ := testsupport.StatusField(pid, "VmRSS")
	t.Logf("at %d live (%d running): %d threads, RSS %.1f MiB", len(list.Executions), running, threads, float64(rss)/(1<<20))
	if len(list.Executions) != scaleLive {
		t.Fatalf("%d live executions, want %d", len(list.Executions), scaleLive)
	}
	if threads > scaleMaxThreads {
		t.Errorf("the helper holds %d OS threads at %d live executions; at most %d", threads, scaleLive, scaleMaxThreads)
	}

	// Every one of them stops, and nothing is left.
	start := time.Now()
	var stopped sync.WaitGroup
	for _, id := range ids {
		stopped.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id}, nil)
		})
	}
	stopped.Wait()
	if !testsupport.Poll(waitBound, func() bool {
		h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
		return len(list.Executions) == 0
	}) {
		t.Fatalf("%d executions still live %v after the stops", len(list.Executions), waitBound)
	}
	t.Logf("stopping all %d took %v", scaleLive, time.Since(start))
}

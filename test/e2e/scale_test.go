package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
)

// scaleLive is how many executions the scale test keeps live at once:
// four times the thread bound, so a thread per process would show, while
// the race-built helper's forks stay within the suite's time (the
// benchmark, `go run ./test/bench scale`, holds 500).
const scaleLive = 250

// Limits of the helper at scaleLive live `sleep` executions.
const (
	scaleMaxThreads = 64
	scaleMaxRSS     = 150 << 20
)

// procStatus reads a numeric field of /proc/PID/status ("Threads",
// "VmRSS" in kB).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if len(f) == 2 && f[1] == "kB" {
				n <<= 10
			}
			return n, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// At scale the helper holds no OS thread per live process: one
// reaper waits for every child and output is read through the poller. A
// thread count is not a time, so it is asserted here; RSS is reported
// (the race detector this helper is built with multiplies it) and bounded
// by the benchmark.
func TestThreadsAtScale(t *testing.T) {
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
	threads, err := procStatus(pid, "Threads")
	if err != nil {
		t.Fatal(err)
	}
	rss, _ := procStatus(pid, "VmRSS")
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
	deadline := time.Now().Add(waitBound)
	for {
		h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
		if len(list.Executions) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d executions still live %v after the stops", len(list.Executions), waitBound)
		}
		time.Sleep(20 * time.Millisecond) // polling bound, not synchronisation
	}
	t.Logf("stopping all %d took %v", scaleLive, time.Since(start))
}

package spool

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestLowerThreadPriorityNicesOnlyItsThread(t *testing.T) {
	t.Parallel()
	type result struct {
		tid  int
		nice int
		err  error
	}
	// The test may itself run under nice: the lowering is relative.
	p0, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	base := 20 - p0
	want := min(base+10, 19)
	if want == base {
		t.Fatalf("the test runs at nice %d: nothing lower to observe", base)
	}
	ch := make(chan result)
	go func() {
		LowerThreadPriority()
		tid := unix.Gettid()
		// getpriority answers 20-nice for a thread.
		p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		ch <- result{tid, 20 - p, err}
	}()
	r := <-ch
	if r.err != nil || r.nice != want {
		t.Fatalf("background thread nice %d (%v), want %d", r.nice, r.err, want)
	}
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil || 20-p != base {
		t.Fatalf("the test's own thread was lowered too (nice %d, %v)", 20-p, err)
	}
}

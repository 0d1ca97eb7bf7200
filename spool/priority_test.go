package spool

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestLowerThreadPriorityNicesOnlyItsThread(t *testing.T) {
	type result struct {
		tid  int
		nice int
		err  error
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
	if r.err != nil || r.nice != 10 {
		t.Fatalf("background thread nice %d (%v), want 10", r.nice, r.err)
	}
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil || 20-p == 10 {
		t.Fatalf("the test's own thread was lowered too (nice %d, %v)", 20-p, err)
	}
}

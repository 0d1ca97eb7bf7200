package execution

import (
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/process"
)

func admitted(t *ticket) bool {
	select {
	case <-t.admitted:
		return true
	default:
		return false
	}
}

func TestSchedulerReadersShareWritersWaitInOrder(t *testing.T) {
	var s scheduler
	r1 := s.enqueue(LaneRead)
	r2 := s.enqueue(LaneRead)
	w := s.enqueue(LaneExclusive)
	r3 := s.enqueue(LaneRead) // behind a waiting writer: must wait
	if !admitted(r1) || !admitted(r2) || admitted(w) || admitted(r3) {
		t.Fatalf("r1 %v r2 %v w %v r3 %v", admitted(r1), admitted(r2), admitted(w), admitted(r3))
	}
	s.release(r1)
	if admitted(w) {
		t.Fatal("writer admitted while a reader holds the lane")
	}
	s.release(r2)
	if !admitted(w) || admitted(r3) {
		t.Fatal("writer not admitted alone after the readers left")
	}
	s.release(w)
	s.release(w) // idempotent
	if !admitted(r3) {
		t.Fatal("reader not admitted after the writer")
	}
	w2 := s.enqueue(LaneExclusive)
	s.release(w2) // leaves the queue while waiting
	r4 := s.enqueue(LaneRead)
	if !admitted(r4) {
		t.Fatal("a released waiting writer still blocks readers")
	}
}

func TestTransitions(t *testing.T) {
	for _, ok := range [][2]State{{Queued, Running}, {Queued, Settled}, {Running, Stopping}, {Running, Settled}, {Stopping, Settled}} {
		if err := transition(ok[0], ok[1]); err != nil {
			t.Errorf("%v", err)
		}
	}
	for _, bad := range [][2]State{{Settled, Running}, {Stopping, Running}, {Running, Queued}, {Settled, Settled}, {Queued, Stopping}} {
		err := transition(bad[0], bad[1])
		if err == nil || err.Error() != `invalid state transition "`+string(bad[0])+`" to "`+string(bad[1])+`"` {
			t.Errorf("%v → %v: %v", bad[0], bad[1], err)
		}
	}
}

func TestClassify(t *testing.T) {
	zero, one := 0, 1
	for _, tc := range []struct {
		term Termination
		code *int
		out  Outcome
		st   Status
	}{
		{Exited, &zero, Success, StatusCompleted},
		{Exited, &one, Failure, StatusFailed},
		{Signaled, nil, Failure, StatusFailed},
		{OutputLimit, nil, Failure, StatusFailed},
		{SpoolFailed, nil, Failure, StatusFailed},
		{SpawnFailed, nil, Failure, StatusFailed},
		{Unknown, nil, Failure, StatusFailed},
		{Stopped, nil, Failure, StatusStopped},
		{Aborted, nil, Failure, StatusStopped},
		{OwnerStopped, nil, Failure, StatusStopped},
		{SessionEnded, nil, Failure, StatusStopped},
		{TimedOut, nil, Failure, StatusTimedOut},
		{Lost, nil, Failure, StatusLost},
	} {
		if o, s := Classify(tc.term, tc.code); o != tc.out || s != tc.st {
			t.Errorf("%s: %s/%s, want %s/%s", tc.term, o, s, tc.out, tc.st)
		}
	}
}

func TestMergeEnvLaterLayersWin(t *testing.T) {
	got := process.MergeEnv([]string{"A=1", "TERM=xterm", "B=2"}, Defaults, []string{"PAGER=less"})
	want := map[string]string{"A": "1", "B": "2", "TERM": "dumb", "PAGER": "less", "COLORTERM": ""}
	seen := map[string]int{}
	for _, kv := range got {
		k, v, _ := strings.Cut(kv, "=")
		seen[k]++
		if w, ok := want[k]; ok && w != v {
			t.Errorf("%s=%q, want %q", k, v, w)
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s appears %d times", k, n)
		}
	}
}

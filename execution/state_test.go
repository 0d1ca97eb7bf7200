package execution

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
)

func TestStrictInTests(t *testing.T) {
	if !strict {
		t.Fatal("illegal moves must panic in every test binary")
	}
}

func TestLifecycleRefusesIllegalMoves(t *testing.T) {
	for _, tc := range []struct {
		from, to State
		ok       bool
	}{
		{Queued, Running, true},
		{Queued, Settled, true},
		{Running, Stopping, true},
		{Running, Settled, true},
		{Stopping, Settled, true},
		{Queued, Stopping, false},
		{Running, Queued, false},
		{Stopping, Running, false},
		{Settled, Running, false},
		{Settled, Settled, false},
	} {
		if err := transition(tc.from, tc.to); (err == nil) != tc.ok {
			t.Errorf("%s → %s: %v, want legal %v", tc.from, tc.to, err, tc.ok)
		}
	}
}

// Every claim reaches exactly one end, and nothing leaves an end: a
// result claimed or delivered is never claimed or delivered again.
func TestClaimRefusesIllegalMoves(t *testing.T) {
	legal := []struct{ from, to claim }{
		{claimOpen, claimStop}, {claimOpen, claimHeld}, {claimOpen, claimWaiter}, {claimOpen, claimDeciding},
		{claimStop, claimHeld}, {claimHeld, claimTaken},
		{claimWaiter, claimTaken}, {claimWaiter, claimDeciding},
		{claimDeciding, claimTaken}, {claimDeciding, claimMailed}, {claimDeciding, claimDropped},
		{claimMailed, claimDelivered}, {claimMailed, claimDropped}, {claimMailed, claimTaken},
	}
	allowed := map[[2]claim]bool{}
	for _, m := range legal {
		allowed[[2]claim{m.from, m.to}] = true
	}
	for from := claimOpen; from <= claimDropped; from++ {
		for to := claimOpen; to <= claimDropped; to++ {
			err := claimTransition(from, to)
			if (err == nil) != allowed[[2]claim{from, to}] {
				t.Errorf("%s → %s: %v", from, to, err)
			}
		}
	}
	for _, end := range []claim{claimTaken, claimDelivered, claimDropped} {
		if len(legalClaims[end]) != 0 {
			t.Errorf("%s is an end but allows %v", end, legalClaims[end])
		}
	}
}

func TestIllegalMovePanicsInTests(t *testing.T) {
	e := &Execution{id: "exec-test-000001"}
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "invalid claim transition taken to mailed") {
			t.Fatalf("recovered %v, want a panic naming the move", r)
		}
	}()
	st := &execState{claim: claimTaken}
	e.claimTo(st, claimMailed)
}

// Along every legal path from open to an end, the retention wait is
// released exactly once, and "done" is journaled exactly when the result
// stops being owed to the mailbox.
func TestClaimPathsReleaseOnce(t *testing.T) {
	dir := t.TempDir()
	j, err := transcript.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var paths [][]claim
	var walk func(path []claim)
	walk = func(path []claim) {
		next := legalClaims[path[len(path)-1]]
		if len(next) == 0 {
			paths = append(paths, append([]claim(nil), path...))
			return
		}
		for _, c := range next {
			walk(append(path, c))
		}
	}
	walk([]claim{claimOpen})
	for i, path := range paths {
		sp, err := spool.Create(filepath.Join(dir, fmt.Sprintf("p%d.log", i)), 0)
		if err != nil {
			t.Fatal(err)
		}
		e := &Execution{s: &Session{journal: j}, id: "exec-test-000001", sp: sp, unclaimed: make(chan struct{})}
		st := &execState{}
		released := 0
		for _, c := range path[1:] {
			wasReleased := isClosed(e.unclaimed)
			if !e.claimTo(st, c) {
				t.Fatalf("%v: legal move to %s refused", path, c)
			}
			if isClosed(e.unclaimed) && !wasReleased {
				released++
			}
		}
		if released != 1 {
			t.Errorf("%v: released %d times", path, released)
		}
		sp.Close()
	}
	if len(paths) < 8 {
		t.Fatalf("only %d paths", len(paths))
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

package e2e

import (
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// startAsync sends a start request that waits for the end (no yieldMs)
// and returns a channel for its reply.
func (s *session) startAsync(command string, extra map[string]any) <-chan obs {
	ch := make(chan obs, 1)
	go func() {
		o, err := s.start(command, extra)
		if err != nil {
			s.h.t.Errorf("exec/start %q: %v", command, err)
		}
		ch <- o
	}()
	return ch
}

func TestReadLaneOverlaps(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	g1, g2 := fifo(t, "g1"), fifo(t, "g2")
	a := s.startAsync("cat "+g1, nil)
	b := s.startAsync("cat "+g2, nil)
	fa := h.waitCommandState("cat "+g1, execution.Running)
	fb := h.waitCommandState("cat "+g2, execution.Running)
	if fa.Lane != execution.LaneRead || fb.Lane != execution.LaneRead || fa.Yielded || fb.Yielded {
		t.Fatalf("want two foreground read-lane executions running side by side: %+v %+v", fa, fb)
	}
	release(t, g1)
	release(t, g2)
	for _, ch := range []<-chan obs{a, b} {
		if o := <-ch; o.Facts.Status != execution.StatusCompleted {
			t.Fatalf("%+v", o.Facts)
		}
	}
}

func TestExclusiveLaneIsSerialAndWriterFair(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	g1, g2, g3 := fifo(t, "g1"), fifo(t, "g2"), fifo(t, "g3")
	// A holds the exclusive lane: its start request waits for its end.
	cmdA := "touch a.txt; cat " + g1
	a := s.startAsync(cmdA, nil)
	fa := h.waitCommandState(cmdA, execution.Running)
	if fa.Lane != execution.LaneExclusive {
		t.Fatalf("a mutating command must take the exclusive lane: %+v", fa)
	}
	b := s.mustStart("touch b.txt; cat "+g2, map[string]any{"yieldMs": 0})
	if b.Facts.State != execution.Queued || b.Facts.Pid != 0 {
		t.Fatalf("a second exclusive command ran beside the first: %+v", b.Facts)
	}
	// A reader arriving after a waiting writer waits too.
	c := s.mustStart("cat "+g3, map[string]any{"yieldMs": 0})
	if c.Facts.State != execution.Queued || c.Facts.Lane != execution.LaneRead {
		t.Fatalf("a reader overtook a waiting writer: %+v", c.Facts)
	}
	// A client can demand the exclusive lane for a read-only command.
	d := s.mustStart("echo demanded", map[string]any{"yieldMs": 0, "lane": "exclusive"})
	if d.Facts.Lane != execution.LaneExclusive || d.Facts.State != execution.Queued {
		t.Fatalf("demanded lane: %+v", d.Facts)
	}
	release(t, g1)
	if o := <-a; o.Facts.Status != execution.StatusCompleted {
		t.Fatalf("A: %+v", o.Facts)
	}
	h.waitState(b.Facts.ExecutionID, execution.Running)
	release(t, g2)
	release(t, g3)
	for _, id := range []string{b.Facts.ExecutionID, c.Facts.ExecutionID, d.Facts.ExecutionID} {
		if _, f := s.waitFinal(id, nil); f.Facts.Status != execution.StatusCompleted {
			t.Fatalf("%s: %+v", id, f.Facts)
		}
	}
}

func TestYieldReleasesTheLane(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	g1 := fifo(t, "g1")
	a := s.mustStart("touch a.txt; cat "+g1, map[string]any{"yieldMs": 100})
	if !a.Facts.Yielded || a.Facts.State != execution.Running || a.Facts.Lane != execution.LaneExclusive {
		t.Fatalf("A did not yield: %+v", a.Facts)
	}
	// B needs the exclusive lane and completes while A still runs.
	b := s.mustStart("touch b.txt && echo b", nil)
	if !b.Final || b.Output != "b\n" {
		t.Fatalf("B waited behind a yielded command: %+v", b)
	}
	if o := s.mustObserve(a.Facts.ExecutionID, nil); o.Facts.State != execution.Running {
		t.Fatalf("A: %+v", o.Facts)
	}
	release(t, g1)
	s.waitFinal(a.Facts.ExecutionID, nil)
}

func TestStopEscalatesToKill(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 300})
	// TERM is ignored by the shell and, inherited, by every sleep it runs.
	o := s.mustStart("trap '' TERM; echo ready; while :; do sleep 0.05; done", map[string]any{"yieldMs": 0})
	s.observeUntil(o, "ready")
	var final obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, &final)
	f := final.Facts
	if f.Termination != execution.Stopped || f.Signal != "SIGKILL" || f.ExitCode != nil {
		t.Fatalf("want stopped by SIGKILL after the grace, got %+v", f)
	}
	if !testsupport.WaitGone(f.Pid, 5*time.Second) {
		t.Fatal("shell survived")
	}
}

func TestStopAll(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	w := s.mustStart("sleep 1000", map[string]any{"yieldMs": 0, "owner": "/root/worker"})
	r := s.mustStart("sleep 1001", map[string]any{"yieldMs": 0})
	var res struct{ Stopped int }
	// An owner stops its own executions only.
	h.mustCall("exec/stopAll", map[string]any{"sessionId": s.id, "owner": "/root/worker"}, &res)
	if res.Stopped != 1 {
		t.Fatalf("stopAll of one owner: %+v", res)
	}
	if o := s.mustObserve(w.Facts.ExecutionID, map[string]any{"as": "user"}); o.Facts.Termination != execution.OwnerStopped {
		t.Fatalf("owner stop: %+v", o.Facts)
	}
	if o := s.mustObserve(r.Facts.ExecutionID, nil); o.Facts.State != execution.Running {
		t.Fatalf("another owner's execution was stopped: %+v", o.Facts)
	}
	x := s.mustStart("sleep 1002", map[string]any{"yieldMs": 0, "owner": "/root/worker"})
	// The user stops everything.
	h.mustCall("exec/stopAll", map[string]any{"sessionId": s.id, "as": "user"}, &res)
	if res.Stopped != 2 {
		t.Fatalf("stopAll: %+v", res)
	}
	for _, id := range []string{r.Facts.ExecutionID, x.Facts.ExecutionID} {
		if o := s.mustObserve(id, map[string]any{"as": "user"}); o.Facts.Termination != execution.Stopped {
			t.Fatalf("stop all: %+v", o.Facts)
		}
	}
}

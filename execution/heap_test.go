package execution

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// quietEvents drops every announcement; it takes what changed, as the
// server's notification writer does, so nothing waits to be announced.
type quietEvents struct{}

func (quietEvents) Changed(s *Session)     { s.TakeChanged() }
func (quietEvents) Output(e *Execution)    { e.TakeOutput() }
func (quietEvents) Settled(Facts)          {}
func (quietEvents) Progress(Facts, string) {}
func (quietEvents) Deliver(Delivery)       {}
func (quietEvents) Delivered(Delivery)     {}
func (quietEvents) Wake(*Session, string)  {}

// What a session keeps of executions that are over: real commands run to
// their end and leave the registry, and the live heap that remains is
// measured per execution. The journal used to hold every record it ever
// wrote; now it holds none once they are durable, and what is left is the
// owner of each execution (which its log's authority needs).
func TestHeapPerExecutionRun(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home) // a private login environment: no slow profile
	m := NewManager(quietEvents{})
	defer m.Shutdown()
	if _, err := m.Open("heap", filepath.Join(t.TempDir(), "state"), Limits{RetainMs: 1, RetireAfterMs: 1}); err != nil {
		t.Fatal(err)
	}
	s, err := m.Session("heap")
	if err != nil {
		t.Fatal(err)
	}
	run := func(n int) {
		for range n {
			e, err := s.Start(Caller{}, StartParams{Command: "true", Cwd: home, Label: "Run tests", ToolUseID: "toolu_0123456789abcdef"})
			if err != nil {
				t.Fatal(err)
			}
			<-e.done
		}
		left := func() int {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.execs)
		}
		if !testsupport.Poll(30*time.Second, func() bool { return left() == 0 }) {
			t.Fatalf("%d executions never left the registry", left())
		}
		if _, err := s.journal.Checkpoint(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	run(20) // warm up: the login environment, buffers
	before := heap()
	const n = 150
	run(n)
	// What is kept, not what is still at work: on a loaded machine the
	// last executions' retirement and journal writes may hold memory for
	// a moment after they left the registry, so the figure is read again
	// until it settles or the bound passes.
	var per float64
	testsupport.Poll(10*time.Second, func() bool {
		per = (float64(heap()) - float64(before)) / n
		return per <= 1024
	})
	t.Logf("live heap per execution run: %.0f bytes (%d executions)", per, n)
	if per > 1024 {
		t.Fatalf("a session keeps %.0f bytes per execution it ran", per)
	}
}

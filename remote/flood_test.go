package remote

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote/agent"
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

// floodSettings is what a flood changes: GOGC and GOMAXPROCS.
type floodSettings struct{ gogc, procs int }

func settingsNow(t *testing.T) floodSettings {
	t.Helper()
	return floodSettings{gcPercent(t), runtime.GOMAXPROCS(0)}
}

// lingerFor sets floodLinger for the test and announces each restore of
// the settings on the returned channel.
func lingerFor(t *testing.T, d time.Duration) <-chan struct{} {
	t.Helper()
	restored := make(chan struct{}, 16)
	flood.mu.Lock()
	old := floodLinger
	floodLinger = d
	floodRestored = func() { restored <- struct{}{} }
	flood.mu.Unlock()
	t.Cleanup(func() {
		flood.mu.Lock()
		floodLinger = old
		floodRestored = nil
		flood.mu.Unlock()
	})
	return restored
}

// wantFloodSettings checks the settings during a flood against those
// before it: GOGC raised, one P.
func wantFloodSettings(t *testing.T, before, during floodSettings) {
	t.Helper()
	if during.gogc <= before.gogc {
		t.Errorf("GOGC during a flood %d, want above %d", during.gogc, before.gogc)
	}
	if during.procs != 1 {
		t.Errorf("GOMAXPROCS during a flood %d, want 1", during.procs)
	}
}

// TestFloodRaisesHeapGoalWithinHeadroom: while output floods, the heap
// may grow past what is live by about floodHeadroom and no more, and the
// helper runs on one P; after the last flood GOGC and GOMAXPROCS are what
// they were.
func TestFloodRaisesHeapGoalWithinHeadroom(t *testing.T) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		t.Fatal("GOGC is set in the test's environment: the flood leaves it alone")
	}
	if _, ok := os.LookupEnv("GOMAXPROCS"); ok {
		t.Fatal("GOMAXPROCS is set in the test's environment: the flood leaves it alone")
	}
	lingerFor(t, 0)
	before := settingsNow(t)
	floodStarted()
	floodStarted() // a second flood at the same time
	during := settingsNow(t)
	goal := heapGoal()
	floodEnded()
	stillDuring := settingsNow(t)
	floodEnded()
	after := settingsNow(t)
	wantFloodSettings(t, before, during)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if bound := max(live[0].Value.Uint64(), minHeap) + floodHeadroom + floodHeadroom/10; goal > bound {
		t.Errorf("heap goal during a flood %d bytes, want at most %d (live %d + headroom)", goal, bound, live[0].Value.Uint64())
	}
	if stillDuring != during {
		t.Errorf("settings %+v with one flood left, want %+v", stillDuring, during)
	}
	if after != before {
		t.Errorf("settings after the floods %+v, want %+v again", after, before)
	}
}

// TestFloodSettingsOutlastAPause: a flood that starts while the last
// one's settings linger keeps them, and the settings put back at last
// are those from before the first (not the flood's own).
func TestFloodSettingsOutlastAPause(t *testing.T) {
	restored := lingerFor(t, time.Hour)
	before := settingsNow(t)
	floodStarted()
	during := settingsNow(t)
	floodEnded()
	if now := settingsNow(t); now != during {
		t.Errorf("settings just after a flood %+v, want the flood's %+v for floodLinger", now, during)
	}
	floodStarted() // the next burst
	if now := settingsNow(t); now != during {
		t.Errorf("settings in the next burst %+v, want %+v", now, during)
	}
	flood.mu.Lock()
	floodLinger = 0
	flood.mu.Unlock()
	floodEnded()
	select {
	case <-restored:
	default:
		t.Fatal("the settings were not put back after the last flood")
	}
	wantFloodSettings(t, before, during)
	if after := settingsNow(t); after != before {
		t.Errorf("settings after the floods %+v, want %+v again", after, before)
	}
	select {
	case <-restored:
		t.Error("the settings were put back twice")
	default:
	}
}

// TestFloodLeavesTheUsersSettings: a GOGC or GOMAXPROCS the user set is
// never changed.
func TestFloodLeavesTheUsersSettings(t *testing.T) {
	lingerFor(t, 0)
	procs := runtime.GOMAXPROCS(0)
	t.Setenv("GOGC", "150")
	t.Setenv("GOMAXPROCS", strconv.Itoa(procs))
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
	during := settingsNow(t)
	floodEnded()
	if want := (floodSettings{150, procs}); during != want {
		t.Errorf("settings during a flood %+v, want the user's %+v", during, want)
	}
}

// TestAgentOutputFloodRaisesGCPercentUntilItsEnd: a command of the host
// agent that prints more than floodAfter at once floods while its
// output comes, and its end puts the settings back.
func TestAgentOutputFloodRaisesGCPercentUntilItsEnd(t *testing.T) {
	restored := lingerFor(t, 0)
	p, _ := agentPool(t)
	before := settingsNow(t)
	proc, err := Runner{Pool: p, Target: target("")}.Start(t.Context(), process.Spec{Command: "head -c " + strconv.Itoa(2*floodAfter) + " /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	out := proc.Output()
	if _, err := io.CopyN(io.Discard, out, floodAfter+agent.Window/2); err != nil {
		t.Fatal(err)
	}
	during := settingsNow(t)
	if _, err := io.Copy(io.Discard, out); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	_ = proc.CloseOutput()
	select {
	case <-restored:
	case <-time.After(waitLimit):
		t.Fatal("the settings were not put back after the output's end")
	}
	wantFloodSettings(t, before, during)
	if after := settingsNow(t); after != before {
		t.Errorf("settings after the output's end %+v, want %+v again", after, before)
	}
}

// TestAgentOutputFloodEndsWhenTheOutputPauses: a command that floods and
// then goes quiet, still running, stops flooding: the settings are not
// held until its output ends.
func TestAgentOutputFloodEndsWhenTheOutputPauses(t *testing.T) {
	restored := lingerFor(t, 0)
	p, _ := agentPool(t)
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	before := settingsNow(t)
	proc, err := Runner{Pool: p, Target: target("")}.Start(t.Context(), process.Spec{
		Command: "head -c " + strconv.Itoa(2*floodAfter) + " /dev/zero; read -r _ < " + gate})
	if err != nil {
		t.Fatal(err)
	}
	out := proc.Output()
	if _, err := io.CopyN(io.Discard, out, 2*floodAfter); err != nil {
		t.Fatal(err)
	}
	during := settingsNow(t)
	select {
	case <-restored:
	case <-time.After(waitLimit):
		t.Fatal("the settings were still the flood's while its command was quiet")
	}
	if proc.Exited() {
		t.Fatal("the command ended before the flood did: the gate did not hold it")
	}
	wantFloodSettings(t, before, during)
	if after := settingsNow(t); after != before {
		t.Errorf("settings after the pause %+v, want %+v again", after, before)
	}
	// Let the command end.
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := io.Copy(io.Discard, out); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	_ = proc.CloseOutput()
}

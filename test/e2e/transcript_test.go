package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/transcript"
)

type records struct {
	Records []transcript.Record `json:"records"`
	Next    uint64              `json:"next"`
}

// records reads the whole journal through transcript/records, page by page.
func (s *session) records(limit int) []transcript.Record {
	s.h.t.Helper()
	var all []transcript.Record
	var since uint64
	for {
		var r records
		s.h.mustCall("transcript/records", map[string]any{"sessionId": s.id, "since": since, "limit": limit}, &r)
		if len(r.Records) == 0 {
			if r.Next != since {
				s.h.t.Fatalf("caught up at %d but next is %d", since, r.Next)
			}
			return all
		}
		if len(r.Records) > limit {
			s.h.t.Fatalf("asked for %d records, got %d", limit, len(r.Records))
		}
		all = append(all, r.Records...)
		since = r.Next
	}
}

func (s *session) checkpoint() uint64 {
	s.h.t.Helper()
	var r struct{ Seq uint64 }
	s.h.mustCall("transcript/checkpoint", map[string]any{"sessionId": s.id}, &r)
	return r.Seq
}

func ofExecution(recs []transcript.Record, id, typ string) []transcript.Record {
	var out []transcript.Record
	for _, r := range recs {
		if r.ExecutionID == id && r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

func TestJournalRowsSettlementsAndBreadcrumbs(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)

	fg := s.mustStart("echo foreground", map[string]any{"label": "Quick"}).Facts.ExecutionID
	ok := s.background("exit 0", map[string]any{"label": "Run tests"})
	s.waitFinal(ok, nil)
	failed := s.background("exit 3", map[string]any{"label": "Lint"})
	s.waitFinal(failed, nil)
	stopped := s.background("sleep 300", map[string]any{"label": "Dev server"})
	h.waitState(stopped, execution.Running)
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": stopped}, nil)

	seq := s.checkpoint()
	recs := s.records(2)
	if len(recs) == 0 || recs[len(recs)-1].Seq > seq {
		t.Fatalf("checkpoint %d does not cover the records: %+v", seq, recs)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq <= recs[i-1].Seq {
			t.Fatalf("records out of order: %d then %d", recs[i-1].Seq, recs[i].Seq)
		}
	}

	want := map[string]string{
		ok:      `● Background command "Run tests" completed (exit code 0)`,
		failed:  `● Background command "Lint" failed (exit code 3)`,
		stopped: `● Background command "Dev server" stopped`,
	}
	for id, text := range want {
		bc := ofExecution(recs, id, transcript.TypeBreadcrumb)
		if len(bc) != 1 || bc[0].Text != text {
			t.Errorf("%s: breadcrumbs %+v, want one %q", id, bc, text)
		}
	}
	if bc := ofExecution(recs, fg, transcript.TypeBreadcrumb); len(bc) != 0 {
		t.Errorf("a foreground completion got a breadcrumb: %+v", bc)
	}
	for _, id := range []string{fg, ok, failed, stopped} {
		rows := ofExecution(recs, id, transcript.TypeRow)
		settled := ofExecution(recs, id, transcript.TypeSettled)
		// A row at start, and another when it yields. A settlement that
		// means a delivery is followed by one saying it is done (here:
		// claimed or acknowledged); a stop's reply claims, so none.
		var marks []any
		for _, r := range settled {
			marks = append(marks, r.Attrs["delivery"])
		}
		want := []any{nil}
		if id == ok || id == failed {
			want = []any{"pending", "done"}
		}
		if len(rows) == 0 || len(rows) > 2 || !slices.Equal(marks, want) {
			t.Fatalf("%s: %d rows, settlements marked %v (want %v)", id, len(rows), marks, want)
		}
		for _, r := range rows {
			if l := r.Leader; l == nil || l.Pid <= 0 || l.Pgid != l.Pid || l.StartTime == 0 {
				t.Errorf("%s: row without its group leader: %+v", id, l)
			}
		}
		var last execution.Facts
		if err := json.Unmarshal(rows[len(rows)-1].Facts, &last); err != nil || last.Yielded != (id != fg) {
			t.Errorf("%s: latest row %s (%v)", id, rows[len(rows)-1].Facts, err)
		}
		var f execution.Facts
		if err := json.Unmarshal(settled[0].Facts, &f); err != nil || f.State != execution.Settled || f.OutputAddress == "" {
			t.Errorf("%s: settled facts %s (%v)", id, settled[0].Facts, err)
		}
		if rows[0].Seq > settled[0].Seq {
			t.Errorf("%s: settled before its row", id)
		}
	}
	// The journal is a private file in the state directory.
	fi, err := os.Stat(filepath.Join(s.stateDir, "transcript.jsonl"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal: %v %v", fi, err)
	}
}

// A helper killed with SIGKILL leaves its commands running. The next
// helper on the same state directory kills them (their leader is provably
// the same process), marks them lost, and draws a new id prefix.
func TestKilledHelperRunsAreLostAndReclaimed(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	h1 := startHelper(t)
	s1 := h1.openAt(dir, nil)
	// Both sides of the pipe print their pid once they exist.
	o := s1.mustStart(`(echo "pid $BASHPID"; exec sleep 1000) | (read x; echo "$x"; echo "pid $BASHPID"; echo both; exec sleep 1001)`,
		map[string]any{"yieldMs": 0, "label": "Long build"})
	id := o.Facts.ExecutionID
	out := s1.observeUntil(o, "both")
	f := h1.waitState(id, execution.Running)
	pids := append([]int{f.Pid}, pidsIn(out)...)
	// A monitor's own execution, and one queued behind a foreground
	// command holding the exclusive lane.
	mon := s1.monitorStart(map[string]any{"command": "echo tick; sleep 1000", "label": "ticker", "persistent": true})
	mf := h1.waitState(mon.ExecutionID, execution.Running)
	pids = append(pids, mf.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if _, err := h1.c.Dispatch(ctx, "exec/start", map[string]any{"sessionId": s1.id, "command": "sleep 1000", "lane": "exclusive",
		"cwd": h1.home, "env": map[string]string{"MEVEDEL_E2E": "1"}}); err != nil {
		t.Fatal(err)
	}
	holder := h1.waitCommandState("sleep 1000", execution.Running)
	pids = append(pids, holder.Pid)
	queued := s1.mustStart("echo never", map[string]any{"lane": "exclusive", "yieldMs": 0, "label": "Waits its turn"})
	if queued.Facts.State != execution.Queued {
		t.Fatalf("not queued: %+v", queued.Facts)
	}
	s1.checkpoint()
	h1.kill()
	for _, p := range pids {
		if !testsupport.Alive(p) {
			t.Fatalf("pid %d died with the helper; the test shows nothing", p)
		}
	}

	h2 := startHelper(t)
	var info execution.SessionInfo
	h2.mustCall("session/open", map[string]any{"sessionId": "again", "stateDir": dir}, &info)
	if info.IDPrefix == s1.prefix || info.IDPrefix == "" {
		t.Fatalf("prefix %q reused (was %q)", info.IDPrefix, s1.prefix)
	}
	byID := map[string]execution.Facts{}
	for _, r := range info.Recovered {
		byID[r.ExecutionID] = r
		if r.Termination != execution.Lost || r.Outcome != execution.Failure || r.Status != execution.StatusLost ||
			r.ExitCode != nil || r.State != execution.Settled {
			t.Errorf("recovered facts %+v", r)
		}
	}
	if len(byID) != 4 {
		t.Fatalf("recovered %d executions, want 4: %+v", len(byID), info.Recovered)
	}
	if r := byID[id]; !strings.Contains(r.Reason, "killed") || r.OutputBytes != int64(len(out)) || r.OutputLines != 3 {
		t.Errorf("long build: reason %q, %d bytes in %d lines (printed %q)", r.Reason, r.OutputBytes, r.OutputLines, out)
	}
	if r := byID[queued.Facts.ExecutionID]; !strings.Contains(r.Reason, "before it started") {
		t.Errorf("queued one: %q", r.Reason)
	}
	for _, p := range pids {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Errorf("pid %d survived recovery", p)
		}
	}
	s2 := &session{h: h2, id: "again", stateDir: dir, prefix: info.IDPrefix}
	recs := s2.records(1000)
	if lost := ofExecution(recs, id, transcript.TypeLost); len(lost) != 1 {
		t.Fatalf("lost records %+v", lost)
	}
	bc := ofExecution(recs, id, transcript.TypeBreadcrumb)
	if len(bc) != 1 || bc[0].Status != "lost" || !strings.HasPrefix(bc[0].Text, `● Background command "Long build" lost`) {
		t.Fatalf("breadcrumb %+v", bc)
	}
	if bc := ofExecution(recs, queued.Facts.ExecutionID, transcript.TypeBreadcrumb); len(bc) != 1 {
		t.Errorf("queued yielded one: breadcrumbs %+v", bc)
	}
	// Neither a monitor's own execution nor a foreground one gets one.
	for _, other := range []string{mon.ExecutionID, holder.ExecutionID} {
		if bc := ofExecution(recs, other, transcript.TypeBreadcrumb); len(bc) != 0 {
			t.Errorf("%s: breadcrumbs %+v", other, bc)
		}
	}
	// A second open finds nothing left to recover.
	h2.mustCall("session/close", map[string]any{"sessionId": "again"}, nil)
	h2.mustCall("session/open", map[string]any{"sessionId": "third", "stateDir": dir}, &info)
	if len(info.Recovered) != 0 {
		t.Fatalf("recovered twice: %+v", info.Recovered)
	}
	// That open compacted the journal: the latest facts of each execution
	// (here its lost record) and its breadcrumb are what is left of it.
	s3 := &session{h: h2, id: "third", stateDir: dir}
	var kept []string
	for _, r := range s3.records(1000) {
		if r.ExecutionID == id {
			kept = append(kept, r.Type)
		}
	}
	if !slices.Equal(kept, []string{transcript.TypeLost, transcript.TypeBreadcrumb}) {
		t.Fatalf("after compaction: %v", kept)
	}
}

// A journal row whose leader pid now belongs to an unrelated process (its
// start time differs) is marked lost and that process is never signalled.
// A torn last line, as a crash mid-write leaves, is ignored.
func TestRecoveryNeverSignalsAStranger(t *testing.T) {
	t.Parallel()
	stranger := exec.Command("sleep", "1000")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	pid := stranger.Process.Pid

	dir := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	row := transcript.Record{
		Seq: 1, Type: transcript.TypeRow, ExecutionID: "exec-zzzzz-000001", Owner: "/root",
		At:     time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		Facts:  json.RawMessage(`{"executionId":"exec-zzzzz-000001","owner":"/root","command":"sleep 1000","state":"running","yielded":true,"pid":` + itoa(pid) + `}`),
		Leader: &transcript.Leader{Pid: pid, Pgid: pid, StartTime: 1},
	}
	line, _ := json.Marshal(row)
	torn := `{"seq":2,"type":"settled","executionId":"exec-zzz`
	if err := os.WriteFile(filepath.Join(dir, "transcript.jsonl"), append(append(line, '\n'), torn...), 0o600); err != nil {
		t.Fatal(err)
	}

	h := startHelper(t)
	var info execution.SessionInfo
	h.mustCall("session/open", map[string]any{"sessionId": "s", "stateDir": dir}, &info)
	if len(info.Recovered) != 1 || info.Recovered[0].Termination != execution.Lost ||
		!strings.Contains(info.Recovered[0].Reason, "not signalled") {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	if !testsupport.Alive(pid) {
		t.Fatal("recovery signalled a process it could not prove was its own")
	}
	s := &session{h: h, id: "s", stateDir: dir, prefix: info.IDPrefix}
	recs := s.records(1000)
	for _, r := range recs {
		if r.Seq == 2 && r.Type == transcript.TypeSettled {
			t.Fatalf("the torn line became a record: %+v", r)
		}
	}
	// The journal goes on after the torn line.
	s.mustStart("true", nil)
	s.checkpoint()
	if n := len(s.records(1000)); n <= len(recs) {
		t.Fatalf("no records appended after recovery: %d then %d", len(recs), n)
	}
}

func TestRewindAndForkRefusedWhileLive(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	id := s.background("sleep 300")
	h.waitState(id, execution.Running)
	for _, op := range []string{"rewind", "fork"} {
		e := h.wantError("session/canRewind", map[string]any{"sessionId": s.id, "operation": op}, -32003, "refused")
		if !strings.Contains(e.Message, id) || !strings.Contains(e.Message, "stop them first") {
			t.Fatalf("%s refusal: %s", op, e.Message)
		}
	}
	h.wantError("session/canRewind", map[string]any{"sessionId": s.id, "operation": "undo"}, -32602, "invalid-params")
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id}, nil)
	var r struct{ Allowed bool }
	h.mustCall("session/canRewind", map[string]any{"sessionId": s.id, "operation": "fork"}, &r)
	if !r.Allowed {
		t.Fatal("fork refused with nothing live")
	}
}

// A result whose delivery was not yet acknowledged when the helper died
// is delivered by the next helper on the same state directory, with the
// output it had not shown, and once acknowledged never again. One that
// was acknowledged is not made again.
func TestPendingDeliverySurvivesAHelperCrash(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	h1 := startHelper(t)
	s1 := h1.openAt(dir, nil)
	acked := s1.background("echo acked")
	d := h1.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == acked })
	s1.ack(d.DeliveryID, true)
	pending := s1.background("echo first; echo second; exit 4", map[string]any{"label": "Build"})
	h1.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == pending })
	s1.checkpoint()
	h1.kill()

	h2 := startHelper(t)
	s2 := h2.openAt(dir, nil)
	again := h2.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == pending })
	if again.Observation == nil || again.Observation.Output != "first\nsecond\n" || !again.Observation.Final ||
		again.Attrs.ExitCode == nil || *again.Attrs.ExitCode != 4 || again.Attrs.Label != "Build" || again.Owner != "/root" {
		t.Fatalf("redelivery %+v (observation %+v)", again, again.Observation)
	}
	s2.ack(again.DeliveryID, true)
	s2.barrier()
	if ds := h2.deliveriesOf(acked); len(ds) != 0 {
		t.Fatalf("an acknowledged result was delivered again: %+v", ds)
	}
	h2.mustCall("session/close", map[string]any{"sessionId": s2.id}, nil)
	s3 := h2.openAt(dir, nil)
	s3.barrier()
	if ds := h2.deliveriesOf(pending); len(ds) != 1 {
		t.Fatalf("delivered %d times after its ack, want once: %+v", len(ds), ds)
	}
}

// An open whose budget for killing a crashed helper's leftovers runs out
// (a machine too loaded to see them die in time; here the budget is made
// nil) still leaves nothing: they are killed from the background, and
// the recovered facts say so.
func TestLeftoversPastTheReclaimBudgetAreStillKilled(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	h1 := startHelper(t)
	s1 := h1.openAt(dir, nil)
	o := s1.mustStart(`(echo "pid $BASHPID"; exec sleep 1000) | (read x; echo "$x"; echo "pid $BASHPID"; echo both; exec sleep 1001)`, map[string]any{"yieldMs": 0})
	out := s1.observeUntil(o, "both")
	f := h1.waitState(o.Facts.ExecutionID, execution.Running)
	pids := append([]int{f.Pid}, pidsIn(out)...)
	s1.checkpoint()
	h1.kill()
	h2 := startHelper(t, withEnv(execution.ReclaimBudgetVar+"=0s"))
	var info execution.SessionInfo
	h2.mustCall("session/open", map[string]any{"sessionId": "again", "stateDir": dir}, &info)
	if len(info.Recovered) != 1 || !strings.Contains(info.Recovered[0].Reason, "killed in the background") {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	for _, p := range pids {
		if !testsupport.WaitGone(p, waitBound) {
			t.Errorf("pid %d outlived the open's background reclaim", p)
		}
	}
}

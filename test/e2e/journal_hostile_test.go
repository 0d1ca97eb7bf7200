package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/transcript"
	"golang.org/x/sys/unix"
)

// openReply is session/open's answer as a client reads it.
type openReply struct {
	execution.SessionInfo
}

type checkpointReply struct {
	Seq     uint64            `json:"seq"`
	Journal transcript.Health `json:"journal"`
}

// latestFacts is the latest spawn, row, settled or lost record of each
// execution in recs.
func latestFacts(recs []transcript.Record) map[string]transcript.Record {
	out := map[string]transcript.Record{}
	for _, r := range recs {
		switch r.Type {
		case transcript.TypeSpawn, transcript.TypeRow, transcript.TypeSettled, transcript.TypeLost:
			out[r.ExecutionID] = r
		}
	}
	return out
}

func factsOf(t *testing.T, r transcript.Record) execution.Facts {
	t.Helper()
	var f execution.Facts
	if err := json.Unmarshal(r.Facts, &f); err != nil {
		t.Fatalf("facts of %s: %v", r.ExecutionID, err)
	}
	return f
}

// The journal of a session whose disk fills up: it degrades (a start is
// refused with -32006 and a checkpoint says why), an execution whose
// output cannot be spooled any more settles spool-failed meanwhile, and
// once the space is back every record is written. A helper killed after
// that leaves a journal from which the next one recovers every execution
// as it ended, the spool-failed one included; only the one still running
// is lost.
func TestJournalSurvivesAFullDisk(t *testing.T) {
	t.Parallel()
	disk := testsupport.SmallDisk(t, "4m")
	dir := filepath.Join(disk, "state")
	h1 := startHelper(t)
	var info openReply
	h1.mustCall("session/open", map[string]any{"sessionId": "full", "stateDir": dir}, &info)
	if info.Journal.State != transcript.StateOK {
		t.Fatalf("journal at open: %+v", info.Journal)
	}
	s1 := &session{h: h1, id: "full", stateDir: dir, prefix: info.IDPrefix}
	gate := fifo(t, "spooler")
	spooler := s1.mustStart("read x < "+gate+"; head -c 4000000 /dev/zero", map[string]any{"yieldMs": 0, "label": "Spooler"}).Facts.ExecutionID
	h1.waitState(spooler, execution.Running)
	s1.checkpoint()

	free := testsupport.FillDisk(t, disk)
	// Commands until the journal cannot take their records: the last
	// page of the file may hold a few more.
	var refusal string
	markers := t.TempDir() // on another file system, which has room
	for i := 0; i < 100 && refusal == ""; i++ {
		marker := filepath.Join(markers, fmt.Sprint(i))
		o, err := s1.start("touch "+marker, nil)
		if err != nil {
			e, ok := rpcError(err)
			if !ok || e.Code != -32006 || errKind(e) != "io" {
				t.Fatalf("start on a full disk: %v", err)
			}
			refusal = e.Message
			break
		}
		// The journal failed on this very start's spawn record: not
		// started, and it says why.
		if f := o.Facts; f.Termination == execution.SpawnFailed && !strings.Contains(f.Reason, "journal") {
			t.Fatalf("spawn failed for another reason: %+v", f)
		}
		// Its process may have been spawned, held at its gate while the
		// record was written: it never ran.
		if _, err := os.Stat(marker); (err == nil) != (o.Facts.Termination == execution.Exited) {
			t.Fatalf("start %d ended %s, and its command ran: %v", i, o.Facts.Termination, err == nil)
		}
	}
	if !strings.Contains(refusal, "journal") || !strings.Contains(refusal, "no space left") {
		t.Fatalf("start refusal %q", refusal)
	}
	err := h1.call("transcript/checkpoint", map[string]any{"sessionId": s1.id}, nil)
	e, ok := rpcError(err)
	if !ok || e.Code != -32006 || e.Data == nil {
		t.Fatalf("checkpoint on a full disk: %v", err)
	}
	var data struct {
		Kind    string
		Journal transcript.Health
	}
	if err := json.Unmarshal(*e.Data, &data); err != nil || data.Kind != "io" || data.Journal.State != transcript.StateDegraded ||
		!strings.Contains(data.Journal.Error, "no space left") || data.Journal.Since == "" {
		t.Fatalf("checkpoint error data %s (%v)", *e.Data, err)
	}

	// Its output cannot reach the disk now, nor its settlement the journal.
	release(t, gate)
	_, fin := s1.waitFinal(spooler, nil)
	if fin.Facts.Termination != execution.SpoolFailed {
		t.Fatalf("spooler ended %+v", fin.Facts)
	}

	free()
	var cp checkpointReply
	if !testsupport.Poll(waitBound, func() bool {
		return h1.call("transcript/checkpoint", map[string]any{"sessionId": s1.id}, &cp) == nil
	}) {
		t.Fatal("checkpoints kept failing after the space came back")
	}
	if cp.Journal.State != transcript.StateOK {
		t.Fatalf("checkpoint after recovery: %+v", cp)
	}
	// Nothing appended while degraded was lost: every execution is
	// settled in the journal.
	before := latestFacts(s1.records(1000))
	if r := before[spooler]; r.Type != transcript.TypeSettled || factsOf(t, r).Termination != execution.SpoolFailed {
		t.Fatalf("spooler's latest record %+v", r)
	}
	if len(before) < 2 {
		t.Fatalf("executions in the journal: %v", before)
	}
	for id, r := range before {
		if r.Type != transcript.TypeSettled {
			t.Fatalf("%s: latest record %s", id, r.Type)
		}
	}
	running := s1.mustStart("sleep 1000", map[string]any{"yieldMs": 0})
	rf := h1.waitState(running.Facts.ExecutionID, execution.Running)
	s1.checkpoint()
	// Logged before the answers that told of them, through another pipe.
	h1.stderr.Wait(waitBound, func(s string) bool {
		return strings.Contains(s, "the journal is degraded") && strings.Contains(s, "writes recovered")
	})
	if n := strings.Count(h1.stderr.String(), "the journal is degraded"); n != 1 {
		t.Errorf("the failure was logged %d times:\n%s", n, h1.stderr)
	}
	if n := strings.Count(h1.stderr.String(), "writes recovered"); n != 1 {
		t.Errorf("the recovery was logged %d times:\n%s", n, h1.stderr)
	}
	h1.kill()

	h2 := startHelper(t)
	var again openReply
	h2.mustCall("session/open", map[string]any{"sessionId": "again", "stateDir": dir}, &again)
	if again.Journal.State != transcript.StateOK {
		t.Fatalf("journal at reopen: %+v", again.Journal)
	}
	if len(again.Recovered) != 1 || again.Recovered[0].ExecutionID != running.Facts.ExecutionID ||
		!strings.Contains(again.Recovered[0].Reason, "killed") {
		t.Fatalf("recovered %+v", again.Recovered)
	}
	if !testsupport.WaitGone(rf.Pid, waitBound) {
		t.Fatalf("pid %d survived recovery", rf.Pid)
	}
	s2 := &session{h: h2, id: "again", stateDir: dir}
	after := latestFacts(s2.records(1000))
	for id, r := range before {
		a := after[id]
		if a.Type != transcript.TypeSettled || factsOf(t, a).Termination != factsOf(t, r).Termination {
			t.Errorf("%s: %s %s after the crash, was %s %s", id, a.Type, factsOf(t, a).Termination, r.Type, factsOf(t, r).Termination)
		}
	}
}

// taggedBy lists the live processes that carry the tag of an execution of
// the open with prefix.
func taggedBy(prefix string) []int {
	want := statedir.TagVar + "=" + prefix + "-exec-" + prefix + "-"
	var out []int
	for _, p := range process.Table() {
		if !p.Alive() {
			continue
		}
		env, ok := process.Environ(p.Pid)
		if ok && slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, want) }) {
			out = append(out, p.Pid)
		}
	}
	return out
}

// A helper killed with SIGKILL while five commands are starting leaves no
// process the next helper cannot find: each start is durable before its
// spawn. Twenty rounds, each killing at a different point of the starts
// (before any command is visible in /proc, after one, ... after four).
func TestKillDuringConcurrentStartsLeaksNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	const rounds, starts = 20, 5
	var prev *helper
	prevPrefix := ""
	for round := 0; round <= rounds; round++ {
		h := startHelper(t)
		var info openReply
		h.mustCall("session/open", map[string]any{"sessionId": "s", "stateDir": dir}, &info)
		if prev != nil {
			if left := taggedBy(prevPrefix); len(left) > 0 {
				t.Fatalf("round %d: %d processes of the killed helper survived recovery: %v (recovered %d executions)",
					round, len(left), left, len(info.Recovered))
			}
			for _, f := range info.Recovered {
				if f.Termination != execution.Lost {
					t.Fatalf("round %d: recovered %+v", round, f)
				}
			}
		}
		if round == rounds {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		for i := range starts {
			if _, err := h.c.Dispatch(ctx, "exec/start", map[string]any{"sessionId": "s", "command": "sleep 1000", "lane": "read",
				"cwd": h.home, "label": fmt.Sprint("start ", i)}); err != nil {
				t.Fatal(err)
			}
		}
		// Kill once round%starts commands exist; at 0, as soon as the
		// helper has registered one.
		if k := round % starts; k == 0 {
			h.waitNote(func(n note) bool { return n.Method == "exec/changed" })
		} else if !testsupport.Poll(waitBound, func() bool { return len(taggedBy(info.IDPrefix)) >= k }) {
			t.Fatalf("round %d: %d commands never appeared", round, k)
		}
		h.kill()
		cancel()
		prev, prevPrefix = h, info.IDPrefix
	}
}

// Recovery sizes a lost execution's log without following a link out of
// the state directory, blocking on a FIFO or reading a device without
// end, and ignores a journal id that is no execution id: the open answers
// promptly and the helper keeps answering.
func TestRecoveryOfHostileLogs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	logs := filepath.Join(dir, "executions")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not a log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{
		"exec-zzzzz-000001": "symlink",
		"exec-zzzzz-000002": "fifo",
		"exec-zzzzz-000003": "device",
		"exec-zzzzz-000004": "zero link",
	}
	for id, kind := range ids {
		path := filepath.Join(logs, id+".log")
		var err error
		switch kind {
		case "symlink":
			err = os.Symlink(secret, path)
		case "fifo":
			err = unix.Mkfifo(path, 0o600)
		case "device":
			err = unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))) // /dev/zero
		case "zero link":
			err = os.Symlink("/dev/zero", path)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var lines []byte
	seq := 0
	row := func(id string) {
		seq++
		r := transcript.Record{Seq: uint64(seq), Type: transcript.TypeRow, ExecutionID: id, Owner: "/root", At: "2026-12-03T00:00:00.000Z",
			Facts: json.RawMessage(`{"executionId":"` + id + `","owner":"/root","command":"cat","state":"running","startedAt":"2026-12-03T00:00:00.000Z"}`)}
		b, _ := json.Marshal(r)
		lines = append(append(lines, b...), '\n')
	}
	for id := range ids {
		row(id)
	}
	row("../..")
	row("exec-zzzzz-000005/../../../secret")
	if err := os.WriteFile(filepath.Join(dir, "transcript.jsonl"), lines, 0o600); err != nil {
		t.Fatal(err)
	}

	h := startHelper(t)
	start := time.Now()
	var info openReply
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.c.Call(ctx, "session/open", map[string]any{"sessionId": "s", "stateDir": dir}, &info); err != nil {
		t.Fatalf("session/open: %v (after %v)", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("session/open took %v", d)
	}
	got := map[string]execution.Facts{}
	for _, f := range info.Recovered {
		got[f.ExecutionID] = f
	}
	if len(got) != len(ids) {
		t.Fatalf("recovered %+v, want the %d well-formed ids", info.Recovered, len(ids))
	}
	for id := range ids {
		f := got[id]
		if f.Termination != execution.Lost || f.OutputBytes != 0 || f.OutputLines != 0 {
			t.Errorf("%s (%s): %+v", id, ids[id], f)
		}
	}
	// Logged before the answer, but read from another pipe than it.
	if !h.stderr.Wait(waitBound, func(s string) bool { return strings.Contains(s, "ignored 2 record(s) whose execution id is not one") }) {
		t.Errorf("the bad ids were not reported:\n%s", h.stderr)
	}
	// The helper answers, and the session works.
	h.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
	s := &session{h: h, id: "s", stateDir: dir, prefix: info.IDPrefix}
	if o := s.mustStart("echo fine", nil); o.Output != "fine\n" {
		t.Fatalf("output %q", o.Output)
	}
	// Nothing was written through the links.
	if b, _ := os.ReadFile(secret); string(b) != "not a log\n" {
		t.Fatalf("secret changed: %q", b)
	}
}

// Every start the client got an id for has its row on disk once the
// space is back: a start the full journal refused mid-way (answered
// spawn-failed, nothing run) is recorded like every other, however the
// starts fall against the moment the journal learns it is degraded.
// Twenty rounds of a full disk, with starts in flight when it fills.
func TestEveryStartWithAnIDIsInTheJournalAfterAFullDisk(t *testing.T) {
	t.Parallel()
	disk := testsupport.SmallDisk(t, "4m")
	h := startHelper(t)
	s := h.openAt(filepath.Join(disk, "state"), nil)
	journal := filepath.Join(s.stateDir, "transcript.jsonl")
	for round := range 20 {
		free := testsupport.FillDisk(t, disk)
		ids := map[string]execution.Termination{}
		var refused bool
		// Two starters at once: one start's failure may come while the
		// other's record is on its way.
		for i := 0; i < 200 && !refused; i++ {
			type res struct {
				o   obs
				err error
			}
			both := make(chan res, 2)
			for range 2 {
				go func() {
					o, err := s.start("true", nil)
					both <- res{o, err}
				}()
			}
			for range 2 {
				r := <-both
				if r.err != nil {
					e, ok := rpcError(r.err)
					if !ok || e.Code != -32006 {
						t.Fatalf("round %d: start on a full disk: %v", round, r.err)
					}
					refused = true
					continue
				}
				ids[r.o.Facts.ExecutionID] = r.o.Facts.Termination
			}
		}
		if !refused {
			t.Fatalf("round %d: no start was refused on a full disk", round)
		}
		free()
		if !testsupport.Poll(waitBound, func() bool {
			var cp checkpointReply
			return h.call("transcript/checkpoint", map[string]any{"sessionId": s.id}, &cp) == nil && cp.Journal.State == transcript.StateOK
		}) {
			t.Fatalf("round %d: checkpoints kept failing after the space came back", round)
		}
		data, err := os.ReadFile(journal)
		if err != nil {
			t.Fatal(err)
		}
		for id, term := range ids {
			if !strings.Contains(string(data), `"executionId":"`+id+`"`) {
				t.Errorf("round %d: %s (answered %s) has no row in %s", round, id, term, journal)
			}
		}
		failed := 0
		for _, term := range ids {
			if term == execution.SpawnFailed {
				failed++
			}
		}
		t.Logf("round %d: %d starts answered, %d of them spawn-failed", round, len(ids), failed)
		if t.Failed() {
			return
		}
	}
}

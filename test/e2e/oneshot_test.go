package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/transcript"
)

// One-shots, helpers and evals: argv without a shell, stdin, a timeout, a
// scratch directory, and the unknown-outcome gate.

func TestArgvRunsWithoutAShell(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	argv := []string{"printf", "%s|", "a b", "it's", `"q"`, "$HOME", "*", "; rm -rf /tmp/never"}
	o := s.mustStart("", map[string]any{"command": nil, "argv": argv, "kind": "one-shot"})
	if !o.Final || o.Output != `a b|it's|"q"|$HOME|*|; rm -rf /tmp/never|` || o.Facts.Kind != execution.KindOneShot {
		t.Fatalf("argv: %+v", o)
	}
	if strings.Join(o.Facts.Argv, "\x00") != strings.Join(argv, "\x00") {
		t.Fatalf("facts argv %q", o.Facts.Argv)
	}
	if o.Facts.Command == "" || !strings.Contains(o.Facts.Command, `'a b'`) {
		t.Fatalf("facts command %q", o.Facts.Command)
	}
	// A program that is not there fails to spawn, with its name.
	o = s.mustStart("", map[string]any{"command": nil, "argv": []string{"no-such-program-here"}})
	if o.Facts.Termination != execution.SpawnFailed || !strings.Contains(o.Facts.Reason, "no-such-program-here") {
		t.Fatalf("missing program: %+v", o.Facts)
	}
	// An argv that runs a shell with -c is that shell command, analysed.
	h.wantError("exec/start", map[string]any{"sessionId": s.id, "argv": []string{"bash", "-c", "sleep 9 &"}}, -32003, "refused")
	h.wantError("exec/start", map[string]any{"sessionId": s.id, "argv": []string{"echo"}, "command": "echo"}, -32602, "invalid-params")
	h.wantError("exec/start", map[string]any{"sessionId": s.id}, -32602, "invalid-params")
	h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "kind": "daemon"}, -32602, "invalid-params")
	h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "timeoutMs": 0}, -32602, "invalid-params")
	// A number past int64 is worded as the bound it breaks, not as the
	// decoder's text.
	for _, huge := range []json.RawMessage{json.RawMessage("99999999999999999999"), json.RawMessage("1e30")} {
		e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "timeoutMs": huge}, -32602, "invalid-params")
		if !strings.Contains(e.Message, "timeoutMs") || !strings.Contains(e.Message, "out of range") || strings.Contains(e.Message, "unmarshal") {
			t.Errorf("timeoutMs %s: %q", huge, e.Message)
		}
	}
	e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "timeoutMs": json.RawMessage("1.5")}, -32602, "invalid-params")
	if !strings.Contains(e.Message, "not a whole number") {
		t.Errorf("timeoutMs 1.5: %q", e.Message)
	}
	// readOnly is the caller's lane, whatever the parser says.
	ro := s.mustStart("touch x-never-mind", map[string]any{"readOnly": true, "cwd": t.TempDir()})
	rw := s.mustStart("cat /dev/null", map[string]any{"readOnly": false})
	if ro.Facts.Lane != execution.LaneRead || rw.Facts.Lane != execution.LaneExclusive {
		t.Fatalf("lanes %s %s", ro.Facts.Lane, rw.Facts.Lane)
	}
}

// stdin of 8 MiB goes in while the helper keeps answering: the command
// waits on a gate before it reads, so the whole write waits with it.
func TestStdinLargeDoesNotBlockTheHelper(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	data := strings.Repeat("0123456789abcdef", 8<<20/16)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	call, err := h.c.Dispatch(ctx, "exec/start", map[string]any{
		"sessionId": s.id, "argv": []string{"sh", "-c", "read x < " + gate + "; wc -c"}, "stdin": data, "kind": "one-shot",
	})
	if err != nil {
		t.Fatal(err)
	}
	f := h.waitCommandState("sh -c 'read x < "+gate+"; wc -c'", execution.Running)
	// Answered while 8 MiB wait to be written.
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	found := false
	for _, l := range list.Executions {
		found = found || l.ExecutionID == f.ExecutionID
	}
	if !found {
		t.Fatalf("a live one-shot is not listed: %+v", list)
	}
	release(t, gate)
	var o obs
	if err := call.Wait(ctx, &o); err != nil {
		t.Fatal(err)
	}
	if !o.Final || strings.TrimSpace(o.Output) != "8388608" {
		t.Fatalf("wc -c of 8 MiB said %+v", o)
	}
	// Typed into a terminal when tty.
	o = s.mustStart("read -r line; echo got:$line", map[string]any{"tty": true, "stdin": "typed\n"})
	if !strings.Contains(o.Output, "got:typed") {
		t.Fatalf("tty stdin: %q", o.Output)
	}
	// Without stdin, stdin is empty, not the helper's.
	if o := s.mustStart("", map[string]any{"argv": []string{"wc", "-c"}}); strings.TrimSpace(o.Output) != "0" {
		t.Fatalf("no stdin: %q", o.Output)
	}
}

// A timeout fires after the start request yielded: the command is stopped
// as a stop does, ends timed-out, and nothing of it is left.
func TestTimeoutSurvivesAYield(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart(`echo pid $$; bash -c 'echo pid $$; exec sleep 300'`, map[string]any{"yieldMs": 0, "timeoutMs": 300})
	if o.Final {
		t.Fatalf("did not yield: %+v", o)
	}
	out, final := s.waitFinal(o.Facts.ExecutionID, nil)
	f := final.Facts
	if f.Termination != execution.TimedOut || f.Status != execution.StatusTimedOut || f.TimeoutMs != 300 {
		t.Fatalf("after the timeout: %+v", f)
	}
	pids := pidsIn(o.Output + out)
	if len(pids) != 2 {
		t.Fatalf("pids %v in %q", pids, o.Output+out)
	}
	for _, p := range pids {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Fatalf("process %d survived the timeout", p)
		}
	}
	var recs []transcript.Record
	for _, r := range s.records(1000) {
		if r.ExecutionID == f.ExecutionID && r.Type == transcript.TypeBreadcrumb {
			recs = append(recs, r)
		}
	}
	if len(recs) != 1 || !strings.Contains(recs[0].Text, "timed out") {
		t.Fatalf("breadcrumb %+v", recs)
	}
}

// A scratch directory is the cwd while the command runs and is gone,
// with everything the command made read-only in it, before the final
// observation arrives.
func TestScratchIsRemovedBeforeTheEnd(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	call, err := h.c.Dispatch(ctx, "exec/start", map[string]any{
		"sessionId": s.id, "kind": "helper", "scratch": true, "yieldMs": 0,
		"argv": []string{"sh", "-c", "pwd; mkdir -p d/e && touch d/e/f && chmod 0500 d/e d . && { read x < " + gate + " || true; }"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := h.waitLive(func(f execution.Facts) bool { return f.ScratchDir != "" && f.State == execution.Running })
	fi, err := os.Stat(f.ScratchDir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 || f.Cwd != f.ScratchDir ||
		!strings.HasPrefix(f.ScratchDir, s.stateDir+string(filepath.Separator)) || f.Kind != execution.KindHelper {
		t.Fatalf("scratch while running: %+v (%v, %v)", f, fi, err)
	}
	release(t, gate)
	var o obs
	if err := call.Wait(ctx, &o); err != nil {
		t.Fatal(err)
	}
	if !o.Final || o.Facts.Status != execution.StatusCompleted || strings.TrimSpace(o.Output) != f.ScratchDir {
		t.Fatalf("final %+v", o)
	}
	if _, err := os.Stat(f.ScratchDir); !os.IsNotExist(err) {
		t.Fatalf("scratch %s still there when the final observation arrived: %v", f.ScratchDir, err)
	}
	// A given cwd stays the cwd; the scratch directory is still made.
	dir := t.TempDir()
	o = s.mustStart("pwd", map[string]any{"scratch": true, "cwd": dir})
	if strings.TrimSpace(o.Output) != dir || o.Facts.ScratchDir == "" {
		t.Fatalf("scratch with cwd: %+v", o)
	}
	if _, err := os.Stat(o.Facts.ScratchDir); !os.IsNotExist(err) {
		t.Fatalf("scratch left: %v", err)
	}
}

// An unknown outcome on an SSH host refuses what may change something
// until the person acknowledges it; read-only commands still run; the gate
// survives a reopen of the session.
func TestUnknownOutcomeGatesMutations(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testUnknownOutcomeGatesMutations)
}

func testUnknownOutcomeGatesMutations(t *testing.T) {
	h, srv := remoteHelper(t)
	state := filepath.Join(t.TempDir(), "state")
	s := openWith(h, map[string]any{"stateDir": state, "remoteArtifactDir": filepath.Join(t.TempDir(), "art")})
	o := s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0})
	s.observeUntil(o, "started")
	if srv.KillConnections() == 0 {
		t.Fatal("no connection to cut")
	}
	id := o.Facts.ExecutionID
	if _, final := s.waitFinal(id, nil); final.Facts.Termination != execution.Unknown {
		t.Fatalf("after the cut: %+v", final.Facts)
	}
	local := t.TempDir()
	gated := func(s *session) {
		t.Helper()
		e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "touch made", "cwd": local}, -32003, "refused")
		if !strings.Contains(e.Message, id) {
			t.Fatalf("the refusal does not name %s: %s", id, e.Message)
		}
		if o := s.mustStart("ls", map[string]any{"cwd": local}); o.Facts.Status != execution.StatusCompleted {
			t.Fatalf("a read-only command under the gate: %+v", o)
		}
		var u struct {
			Facts   *execution.Facts
			Unknown []execution.Facts
		}
		h.mustCall("session/unknownOutcome", map[string]any{"sessionId": s.id}, &u)
		if u.Facts == nil || u.Facts.ExecutionID != id || len(u.Unknown) != 1 {
			t.Fatalf("unknownOutcome %+v", u)
		}
	}
	gated(s)
	h.mustCall("session/close", map[string]any{"sessionId": s.id}, nil)
	s = h.openAt(state, nil)
	gated(s)

	var ack struct{ Acknowledged int }
	h.mustCall("session/acknowledgeUnknown", map[string]any{"sessionId": s.id}, &ack)
	if ack.Acknowledged != 1 {
		t.Fatalf("acknowledged %d", ack.Acknowledged)
	}
	if o := s.mustStart("touch made", map[string]any{"cwd": local}); o.Facts.Status != execution.StatusCompleted {
		t.Fatalf("after the acknowledgment: %+v", o)
	}
	var u struct{ Facts *execution.Facts }
	h.mustCall("session/unknownOutcome", map[string]any{"sessionId": s.id}, &u)
	if u.Facts != nil {
		t.Fatalf("still unknown after the acknowledgment: %+v", u.Facts)
	}
	h.mustCall("session/close", map[string]any{"sessionId": s.id}, nil)
	s = h.openAt(state, nil)
	s.mustStart("touch made-again", map[string]any{"cwd": local})
}

// A helper killed while a command has a scratch directory leaves it; the
// next open of the state directory removes it with the rest of what it
// left.
func TestScratchOfAKilledHelperIsRemovedAtOpen(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	h1 := startHelper(t)
	s1 := h1.openAt(state, nil)
	o := s1.mustStart("echo in $PWD; exec sleep 300", map[string]any{"scratch": true, "yieldMs": 0})
	s1.observeUntil(o, "in ")
	dir := o.Facts.ScratchDir
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("scratch while running: %v", err)
	}
	h1.kill()
	h2 := startHelper(t)
	h2.openAt(state, nil)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("scratch %s survived the next open: %v", dir, err)
	}
}

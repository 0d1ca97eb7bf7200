package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/sourcegraph/jsonrpc2"
)

var idPattern = regexp.MustCompile(`^exec-[a-z0-9]{5}-\d{6}$`)

func TestForegroundCompletionAndExitCodes(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	for _, tc := range []struct {
		cmd    string
		code   int
		status execution.Status
	}{
		{"echo hello", 0, execution.StatusCompleted},
		{"exit 3", 3, execution.StatusFailed},
		{"false", 1, execution.StatusFailed},
	} {
		o := s.mustStart(tc.cmd, nil)
		f := o.Facts
		if !o.Final || f.State != execution.Settled || f.Termination != execution.Exited {
			t.Fatalf("%q: want a final exited observation, got %+v", tc.cmd, o)
		}
		if f.ExitCode == nil || *f.ExitCode != tc.code || f.Signal != "" {
			t.Fatalf("%q: exit code %v signal %q, want %d", tc.cmd, f.ExitCode, f.Signal, tc.code)
		}
		if f.Status != tc.status || (f.Outcome == execution.Success) != (tc.code == 0) {
			t.Fatalf("%q: status %s outcome %s", tc.cmd, f.Status, f.Outcome)
		}
		if !idPattern.MatchString(f.ExecutionID) || !strings.Contains(f.ExecutionID, s.prefix) {
			t.Fatalf("id %q does not look like exec-<prefix>-<6 digits> with prefix %s", f.ExecutionID, s.prefix)
		}
		if f.OutputAddress != "artifact://executions/"+f.ExecutionID+".log" || f.Yielded {
			t.Fatalf("foreground facts: %+v", f)
		}
	}
	// Signals as a login shell has them, whatever the helper catches: a
	// pipe's writer dies of SIGPIPE when its reader is gone.
	if o := s.mustStart(`yes | head -n1; echo "${PIPESTATUS[0]}"`, nil); o.Output != "y\n141\n" {
		t.Fatalf("a pipe's writer did not die of SIGPIPE: %q", o.Output)
	}
	o := s.mustStart("echo hello", nil)
	if o.Output != "hello\n" || o.Facts.OutputBytes != 6 || o.Facts.OutputLines != 1 {
		t.Fatalf("output %q bytes %d lines %d", o.Output, o.Facts.OutputBytes, o.Facts.OutputLines)
	}
	// The spool holds every byte, privately.
	log := filepath.Join(s.stateDir, "executions", o.Facts.ExecutionID+".log")
	b, err := os.ReadFile(log)
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("spool %s: %q %v", log, b, err)
	}
	for path, mode := range map[string]os.FileMode{log: 0o600, s.stateDir: 0o700, filepath.Dir(log): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), mode, err)
		}
	}
}

func TestSignalIsNotAnExitCode(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("kill -KILL $$", nil)
	f := o.Facts
	if f.Termination != execution.Signaled || f.Signal != "SIGKILL" || f.ExitCode != nil || f.Status != execution.StatusFailed {
		t.Fatalf("want signaled SIGKILL without exit code, got %+v", f)
	}
}

func TestYieldThenPoll(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	o := s.mustStart("echo started; cat "+gate+" >/dev/null; echo finished", map[string]any{"yieldMs": 200, "label": "gated"})
	f := o.Facts
	if o.Final || !f.Yielded || f.State != execution.Running || f.Termination != "" {
		t.Fatalf("want a yielded running execution, got %+v", o)
	}
	if f.Pid == 0 || f.Pgid != f.Pid {
		t.Fatalf("pid %d pgid %d", f.Pid, f.Pgid)
	}
	if out := s.observeUntil(o, "started"); out != "started\n" {
		t.Fatalf("output before the gate: %q", out)
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 1 || list.Executions[0].ExecutionID != f.ExecutionID {
		t.Fatalf("list: %+v", list.Executions)
	}
	release(t, gate)
	rest, final := s.waitFinal(f.ExecutionID, nil)
	if rest != "finished\n" || final.Facts.Termination != execution.Exited || *final.Facts.ExitCode != 0 {
		t.Fatalf("final %q %+v", rest, final.Facts)
	}
	// Repeats return the same final observation. (When the end came
	// between polls, the final one showed the pending delivery that
	// waitFinal then acknowledged: the frozen copy is the acknowledged
	// one, with the same output and a later version.)
	again := s.mustObserve(f.ExecutionID, nil)
	if !again.Final || again.Output != final.Output || again.Facts.Version < final.Facts.Version {
		t.Fatalf("repeat differs: %+v vs %+v", again, final)
	}
	if twice := s.mustObserve(f.ExecutionID, nil); twice.Output != again.Output || twice.Facts.Version != again.Facts.Version || !twice.Final {
		t.Fatalf("repeats differ: %+v vs %+v", twice, again)
	}
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 0 {
		t.Fatalf("list after settlement: %+v", list.Executions)
	}
}

func TestYieldZeroReturnsAtOnce(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	o := s.mustStart("cat "+gate, map[string]any{"yieldMs": 0})
	if o.Final || !o.Facts.Yielded {
		t.Fatalf("yieldMs 0: %+v", o)
	}
	release(t, gate)
	if _, f := s.waitFinal(o.Facts.ExecutionID, nil); f.Facts.Status != execution.StatusCompleted {
		t.Fatalf("%+v", f.Facts)
	}
}

func TestRetentionWindow(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"retainMs": 300})
	gate := fifo(t, "gate")
	o := s.mustStart("cat "+gate, map[string]any{"yieldMs": 0})
	release(t, gate)
	s.waitFinal(o.Facts.ExecutionID, nil)
	deadline := time.Now().Add(waitBound)
	for {
		_, err := s.observe(o.Facts.ExecutionID, nil)
		if e, ok := rpcError(err); ok && e.Code == -32001 {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("settled execution still observable long after its retention window")
		}
		time.Sleep(20 * time.Millisecond) // polling an expiry, not synchronising
	}
	// The spool outlives the window.
	if _, err := os.Stat(filepath.Join(s.stateDir, "executions", o.Facts.ExecutionID+".log")); err != nil {
		t.Fatal(err)
	}
}

func TestBackgroundingRefused(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	for _, cmd := range []string{"sleep 5 &", "nohup sleep 5", "(sleep 5 &); echo x", "echo $(setsid sleep 5)", "sleep 5 & disown"} {
		_, err := s.start(cmd, nil)
		e, ok := rpcError(err)
		if !ok || e.Code != -32003 || errKind(e) != "refused" || !strings.Contains(e.Message, "yieldMs") {
			t.Fatalf("%q: want refused mentioning yieldMs, got %v", cmd, err)
		}
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	if len(list.Executions) != 0 {
		t.Fatalf("a refused command ran: %+v", list.Executions)
	}
	if o := s.mustStart("true && echo ok", nil); o.Output != "ok\n" {
		t.Fatalf("&& is not backgrounding: %q", o.Output)
	}
	var an struct {
		Class   string
		Reasons []string
	}
	h.mustCall("exec/analyze", map[string]any{"command": "sleep 1 &"}, &an)
	if an.Class != "refused" || len(an.Reasons) == 0 {
		t.Fatalf("analyze: %+v", an)
	}
	h.mustCall("exec/analyze", map[string]any{"command": "ls | grep x"}, &an)
	if an.Class != "read-only" {
		t.Fatalf("analyze: %+v", an)
	}
}

// treeScript starts two escapees, one with setsid and one by a double
// fork, prints their pids and keeps the shell busy.
const treeScript = `setsid sleep 1000 & echo "pid $!"
( sleep 1001 & echo "pid $!" )
echo ready
`

func TestStopKillsTreeWithEscapees(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 500})
	script := filepath.Join(t.TempDir(), "tree.sh")
	if err := os.WriteFile(script, []byte(treeScript+"sleep 1002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, map[string]any{"yieldMs": 0})
	out := s.observeUntil(o, "ready")
	pids := pidsIn(out)
	if len(pids) != 2 {
		t.Fatalf("want 2 escapee pids in %q", out)
	}
	for _, p := range pids {
		if !testsupport.Alive(p) {
			t.Fatalf("escapee %d not running before the stop", p)
		}
	}
	var final obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, &final)
	f := final.Facts
	if !final.Final || f.Termination != execution.Stopped || f.Status != execution.StatusStopped || f.Outcome != execution.Failure {
		t.Fatalf("stop: %+v", final)
	}
	for _, p := range append(pids, f.Pid) {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Fatalf("process %d survived the stop", p)
		}
	}
	// The helper, as subreaper, reaps the adopted escapees: they leave /proc.
	waitGone(t, pids)
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for _, p := range pids {
		if !testsupport.WaitGone(p, time.Until(deadline)) {
			st, _ := process.Stat(p)
			t.Fatalf("process %d still in /proc (state %c)", p, st.State)
		}
	}
}

func TestLingeringDescendantsCleanedAfterShellExit(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 500})
	script := filepath.Join(t.TempDir(), "linger.sh")
	if err := os.WriteFile(script, []byte(treeScript+"exit 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, nil)
	f := o.Facts
	if !o.Final || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 4 {
		t.Fatalf("want exited 4, got %+v", f)
	}
	pids := pidsIn(o.Output)
	if len(pids) != 2 {
		t.Fatalf("want 2 pids in %q", o.Output)
	}
	for _, p := range pids {
		if !testsupport.WaitGone(p, 5*time.Second) {
			t.Fatalf("lingering descendant %d survived the shell's exit", p)
		}
	}
	waitGone(t, pids)
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"outputLimitBytes": 1000, "graceMs": 500})
	o := s.mustStart("head -c 1000 /dev/zero | tr '\\0' a", nil)
	if f := o.Facts; f.Termination != execution.Exited || f.OutputBytes != 1000 || f.Status != execution.StatusCompleted {
		t.Fatalf("exactly at the cap: %+v", f)
	}
	o = s.mustStart("head -c 1001 /dev/zero | tr '\\0' a", nil)
	if f := o.Facts; f.Termination != execution.OutputLimit || f.OutputBytes != 1000 || f.Outcome != execution.Failure || f.Reason == "" {
		t.Fatalf("one byte over: %+v", f)
	}
	// The cut falls inside a two-byte character: the spool ends before it.
	o = s.mustStart("head -c 999 /dev/zero | tr '\\0' a; printf '\\303\\251'; echo more", nil)
	f := o.Facts
	if f.Termination != execution.OutputLimit || f.OutputBytes != 999 {
		t.Fatalf("split cut: %+v", f)
	}
	b, _ := os.ReadFile(filepath.Join(s.stateDir, "executions", f.ExecutionID+".log"))
	if len(b) != 999 || !utf8.Valid(b) {
		t.Fatalf("spool is %d bytes, valid UTF-8 %v", len(b), utf8.Valid(b))
	}
	// A producer that would run forever is stopped at the cap.
	o = s.mustStart("yes", nil)
	if f := o.Facts; f.Termination != execution.OutputLimit || f.OutputBytes != 1000 {
		t.Fatalf("endless producer: %+v", f)
	}
}

func TestHeadTailBounding(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("seq 1 100000", nil)
	out, f := o.Output, o.Facts
	if n := utf8.RuneCountInString(out); n > 2000 {
		t.Fatalf("output has %d characters, bound is 2000", n)
	}
	if !strings.HasPrefix(out, "1\n2\n3\n") || !strings.HasSuffix(out, "\n99999\n100000\n") {
		t.Fatalf("head or tail missing: %q ... %q", out[:40], out[len(out)-40:])
	}
	markers := regexp.MustCompile(`(?m)^\[\.\.\. (\d+) bytes omitted \.\.\.\]$`).FindAllStringSubmatch(out, -1)
	if len(markers) != 1 {
		t.Fatalf("want one marker line, got %d in %q", len(markers), out)
	}
	shown := int64(len(out) - len(markers[0][0]) - 1)
	if f.OmittedBytes != f.OutputBytes-shown || markers[0][1] != itoa64(f.OmittedBytes) {
		t.Fatalf("omitted %d (marker %s), output %d, shown %d", f.OmittedBytes, markers[0][1], f.OutputBytes, shown)
	}
	// Lines are never cut in the middle.
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !regexp.MustCompile(`^(\d+|\[\.\.\. \d+ bytes omitted \.\.\.\])$`).MatchString(line) {
			t.Fatalf("cut line %q", line)
		}
	}
	o = s.mustStart("seq 1 100000", map[string]any{"maxOutputChars": 500})
	if n := utf8.RuneCountInString(o.Output); n > 500 {
		t.Fatalf("maxOutputChars 500: %d characters", n)
	}
}

func TestOwnerScoping(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	o := s.mustStart("cat "+gate, map[string]any{"yieldMs": 0, "owner": "/root/worker"})
	id := o.Facts.ExecutionID
	if o.Facts.Owner != "/root/worker" {
		t.Fatalf("owner %q", o.Facts.Owner)
	}
	// Another owner sees nothing: not found, as for an id that never existed.
	e1 := h.wantError("exec/observe", map[string]any{"sessionId": s.id, "executionId": id}, -32001, "not-found")
	e2 := h.wantError("exec/observe", map[string]any{"sessionId": s.id, "executionId": "exec-zzzzz-999999"}, -32001, "not-found")
	if strings.ReplaceAll(e1.Message, id, "X") != strings.ReplaceAll(e2.Message, "exec-zzzzz-999999", "X") {
		t.Fatalf("not-found messages differ: %q vs %q", e1.Message, e2.Message)
	}
	h.wantError("exec/stop", map[string]any{"sessionId": s.id, "executionId": id, "owner": "/root/other"}, -32001, "not-found")
	h.wantError("exec/interrupt", map[string]any{"sessionId": s.id, "executionId": id}, -32001, "not-found")
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 0 {
		t.Fatalf("/root sees %+v", list.Executions)
	}
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "owner": "/root/worker"}, &list)
	if len(list.Executions) != 1 {
		t.Fatalf("owner's list: %+v", list.Executions)
	}
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	if len(list.Executions) != 1 {
		t.Fatalf("user's list: %+v", list.Executions)
	}
	if _, err := s.observe(id, map[string]any{"owner": "/root/worker"}); err != nil {
		t.Fatal(err)
	}
	var final obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id, "as": "user"}, &final)
	if final.Facts.Termination != execution.Stopped {
		t.Fatalf("user stop: %+v", final.Facts)
	}
}

func TestLiveLimit(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"maxLive": 2})
	g1, g2 := fifo(t, "g1"), fifo(t, "g2")
	a := s.mustStart("cat "+g1, map[string]any{"yieldMs": 0})
	s.mustStart("cat "+g2, map[string]any{"yieldMs": 0})
	_, err := s.start("echo third", nil)
	if e, ok := rpcError(err); !ok || e.Code != -32002 || errKind(e) != "limit" {
		t.Fatalf("third live execution: %v", err)
	}
	release(t, g1)
	s.waitFinal(a.Facts.ExecutionID, nil)
	if o := s.mustStart("echo third", nil); o.Output != "third\n" {
		t.Fatalf("after one ended: %q", o.Output)
	}
	release(t, g2)
}

func TestSplitUTF8NeverShown(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	// 日 is e6 97 a5: the first two bytes come, then the command blocks.
	o := s.mustStart(`printf '\346\227'; cat `+gate+`; printf '\245\n'`, map[string]any{"yieldMs": 0})
	id := o.Facts.ExecutionID
	deadline := time.Now().Add(waitBound)
	for f := o.Facts; f.OutputBytes < 2; f = o.Facts {
		if o.Output != "" {
			t.Fatalf("a partial character was shown: %q", o.Output)
		}
		if time.Now().After(deadline) {
			t.Fatal("the first bytes never arrived")
		}
		o = s.mustObserve(id, map[string]any{"waitMs": 20})
	}
	if o.Output != "" || o.Facts.UnreadBytes != 2 {
		t.Fatalf("partial character: output %q unread %d", o.Output, o.Facts.UnreadBytes)
	}
	release(t, gate)
	out, _ := s.waitFinal(id, nil)
	if out != "日\n" {
		t.Fatalf("completed character: %q", out)
	}
}

func TestCancelBeforeYieldAborts(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	type result struct {
		o   obs
		err error
	}
	done := make(chan result, 1)
	const cmd = "echo ready; sleep 1000"
	go func() {
		var o obs
		err := h.c.Call(context.Background(), "exec/start",
			map[string]any{"sessionId": s.id, "command": cmd, "cwd": h.home, "env": map[string]string{"MEVEDEL_E2E": "1"}},
			&o, jsonrpc2.PickID(jsonrpc2.ID{Str: "cancel-me", IsString: true}))
		done <- result{o, err}
	}()
	f := h.waitCommandState(cmd, execution.Running)
	if err := h.c.Notify(context.Background(), "$/cancelRequest", map[string]any{"id": "cancel-me"}); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(waitBound):
		t.Fatal("the cancelled start request got no reply")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.o.Final || r.o.Facts.Termination != execution.Aborted || r.o.Facts.Status != execution.StatusStopped {
		t.Fatalf("cancel before yield: %+v", r.o)
	}
	if !testsupport.WaitGone(f.Pid, 5*time.Second) {
		t.Fatalf("aborted command %d still alive", f.Pid)
	}
}

func TestYieldedImmuneToCancel(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	var o obs
	err := h.c.Call(context.Background(), "exec/start",
		map[string]any{"sessionId": s.id, "command": "cat " + gate, "cwd": h.home, "yieldMs": 0, "env": map[string]string{"MEVEDEL_E2E": "1"}},
		&o, jsonrpc2.PickID(jsonrpc2.ID{Str: "late-cancel", IsString: true}))
	if err != nil || !o.Facts.Yielded {
		t.Fatalf("%v %+v", err, o)
	}
	_ = h.c.Notify(context.Background(), "$/cancelRequest", map[string]any{"id": "late-cancel"})
	// Requests are handled in order: once this list answers, the cancel
	// has been processed.
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 1 || list.Executions[0].State != execution.Running {
		t.Fatalf("a yielded execution was touched by a late cancel: %+v", list.Executions)
	}
	release(t, gate)
	if _, f := s.waitFinal(o.Facts.ExecutionID, nil); f.Facts.Termination != execution.Exited {
		t.Fatalf("%+v", f.Facts)
	}
}

func itoa(n int) string     { return strconv.Itoa(n) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func TestUnreadTerminalInputNeverBlocksRequests(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":1,"method":"session/open","params":{"sessionId":"a","stateDir":"` + dir + `"}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":2,"method":"exec/start","params":{"sessionId":"a","command":"sleep 1000","yieldMs":0,"tty":true,"env":{"MEVEDEL_E2E":"1"},"cwd":"/"}}`)
	m := c.next()
	var o obs
	if err := json.Unmarshal(m.Result, &o); err != nil || o.Facts.State != execution.Running {
		t.Fatalf("start: %s %+v", m.Result, m.Error)
	}
	id := o.Facts.ExecutionID
	// Far more than a terminal's input queue holds, to a command that
	// never reads: the write waits, the helper does not.
	flood := strings.Repeat("x\\n", 100000)
	c.sendFrame(`{"jsonrpc":"2.0","id":3,"method":"exec/observe","params":{"sessionId":"a","executionId":"` + id + `","chars":"` + flood + `"}}`)
	c.sendFrame(`{"jsonrpc":"2.0","id":4,"method":"exec/list","params":{"sessionId":"a"}}`)
	if m := c.next(); string(m.ID) != "4" {
		t.Fatalf("a request behind pending input got no answer first: id %s %s", m.ID, m.Result)
	}
	// Ctrl-C is a signal, not queued behind the input.
	c.sendFrame(`{"jsonrpc":"2.0","id":5,"method":"exec/interrupt","params":{"sessionId":"a","executionId":"` + id + `"}}`)
	replies := map[string]rawMsg{}
	for len(replies) < 2 {
		m := c.next()
		replies[string(m.ID)] = m
	}
	if replies["5"].Error != nil {
		t.Fatalf("interrupt: %+v", replies["5"].Error)
	}
	// The pending input ends with a clear error once the command is gone.
	if e := replies["3"].Error; e == nil || e.Code != -32003 || !strings.Contains(e.Message, "before it read the input") {
		t.Fatalf("pending input: %s %+v", replies["3"].Result, e)
	}
}

func TestShellExitAtYieldIsForeground(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"graceMs": 6000})
	// The shell exits at once (well within the 2 s yield, even on a loaded
	// machine), but a descendant that ignores TERM keeps the execution
	// unsettled for the 6 s grace, past the yield deadline: the shell had exited when
	// the timer fired, so the reply is the foreground completion, never a
	// handle to something already over.
	script := filepath.Join(t.TempDir(), "exit.sh")
	body := "setsid bash -c 'trap \"\" TERM; echo \"pid $$\"; exec sleep 1000' &\nwhile ! grep -q pid out.txt 2>/dev/null; do :; done\nexit 0\n"
	body = strings.Replace(body, "echo \"pid $$\"", "echo \"pid $$\" > out.txt", 1)
	if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, map[string]any{"yieldMs": 2000})
	f := o.Facts
	if !o.Final || f.Yielded || f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 0 {
		t.Fatalf("want a foreground completion, got %+v", o)
	}
	b, _ := os.ReadFile(filepath.Join(h.home, "out.txt"))
	if pids := pidsIn(string(b)); len(pids) != 1 || !testsupport.WaitGone(pids[0], 5*time.Second) {
		t.Fatalf("descendant %v survived", pids)
	}
}

// Output that arrives just after an exec/changed still reaches the live
// set once its one-second window ends, though nothing else happens: a
// panel never shows a stale size for a command that went quiet.
func TestQuietOutputGrowthIsAnnounced(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate, hold := fifo(t, "gate"), fifo(t, "hold")
	id := s.mustStart("echo a; read < "+gate+"; echo b; read < "+hold, map[string]any{"yieldMs": 0}).Facts.ExecutionID
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.OutputBytes == 2 })
	release(t, gate)
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.OutputBytes == 4 })
	release(t, hold)
	s.waitFinal(id, nil)
}

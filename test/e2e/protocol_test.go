package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// rawClient speaks the framing directly, for input a library would never
// send.
type rawClient struct {
	t      *testing.T
	child  *client.Child
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testsupport.Buffer
}

func startRaw(t *testing.T) *rawClient {
	t.Helper()
	home := t.TempDir()
	c := &rawClient{t: t, stderr: &testsupport.Buffer{}}
	child, err := client.SpawnPiped(client.Options{Bin: helperBin, Env: baseEnv(home), Stderr: c.stderr})
	if err != nil {
		t.Fatal(err)
	}
	c.child, c.in, c.out = child, child.Stdin(), bufio.NewReader(child.Stdout())
	t.Cleanup(func() {
		c.in.Close()
		if err := child.Wait(waitBound); err != nil {
			t.Errorf("raw helper did not exit at EOF: %v", err)
		}
		child.Stdout().Close()
		if s := c.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "DATA RACE") {
			t.Errorf("helper stderr:\n%s", s)
		}
	})
	return c
}

func (c *rawClient) sendFrame(body string) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.in, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		c.t.Fatal(err)
	}
}

type rawMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64
		Message string
		Data    struct{ Kind string }
	} `json:"error"`
}

// next reads the next response, skipping notifications.
func (c *rawClient) next() rawMsg {
	c.t.Helper()
	type res struct {
		m   rawMsg
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			length := -1
			for {
				line, err := c.out.ReadString('\n')
				if err != nil {
					ch <- res{err: err}
					return
				}
				line = strings.TrimRight(line, "\r\n")
				if line == "" {
					break
				}
				if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
					length, _ = strconv.Atoi(v)
				}
			}
			body := make([]byte, length)
			if _, err := io.ReadFull(c.out, body); err != nil {
				ch <- res{err: err}
				return
			}
			var m rawMsg
			if err := json.Unmarshal(body, &m); err != nil {
				ch <- res{err: fmt.Errorf("helper sent invalid JSON %q: %v", body, err)}
				return
			}
			if m.Method == "" {
				ch <- res{m: m}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			c.t.Fatal(r.err)
		}
		return r.m
	case <-time.After(waitBound):
		c.t.Fatal("no response from the helper")
	}
	return rawMsg{}
}

func TestMalformedInput(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	for _, tc := range []struct {
		body string
		id   string
		code int64
		kind string
	}{
		{`this is not json`, "null", -32700, "parse"},
		{`{"jsonrpc":"2.0","id":1,"method":"initialize"`, "null", -32700, "parse"},
		{`[]`, "null", -32600, "invalid-request"},
		{`[{"jsonrpc":"2.0","id":2,"method":"initialize"}]`, "null", -32600, "invalid-request"},
		{`{"jsonrpc":"2.0","id":3}`, "null", -32600, "invalid-request"},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}`, "null", -32600, "invalid-request"},
		{`{"jsonrpc":"2.0","id":4,"method":"no/such"}`, "4", -32601, "no-method"},
		{`{"jsonrpc":"2.0","id":5,"method":"exec/start","params":{"sessionId":5}}`, "5", -32602, "invalid-params"},
		{`{"jsonrpc":"2.0","id":6,"method":"exec/start","params":{"sessionId":"s","comand":"ls"}}`, "6", -32602, "invalid-params"},
		{`{"jsonrpc":"2.0","id":7,"method":"exec/start","params":["positional"]}`, "7", -32602, "invalid-params"},
		{`{"jsonrpc":"2.0","id":8,"method":"exec/observe","params":{"sessionId":"nope","executionId":"x"}}`, "8", -32001, "not-found"},
		{`{"jsonrpc":"2.0","id":9,"method":"session/open","params":{"sessionId":"a","stateDir":"relative/dir"}}`, "9", -32602, "invalid-params"},
		{`{"jsonrpc":"2.0","id":10,"method":"initialize","params":{"protocolVersion":99}}`, "10", -32602, "invalid-params"},
	} {
		c.sendFrame(tc.body)
		m := c.next()
		if string(m.ID) != tc.id || m.Error == nil || m.Error.Code != tc.code || m.Error.Data.Kind != tc.kind {
			t.Fatalf("%s: got id %s error %+v", tc.body, m.ID, m.Error)
		}
	}
	// The connection survived all of it.
	c.sendFrame(`{"jsonrpc":"2.0","id":"ok","method":"initialize","params":{"protocolVersion":1,"clientName":"test"}}`)
	m := c.next()
	var init struct {
		ServerName      string
		ProtocolVersion int
		Pid             int
	}
	if err := json.Unmarshal(m.Result, &init); err != nil || m.Error != nil || init.ServerName != "mevedel-exec" || init.ProtocolVersion != 1 || init.Pid != c.child.Pid() {
		t.Fatalf("initialize after bad input: %s %+v", m.Result, m.Error)
	}
}

func TestCorruptHeaderEndsConnectionCleanly(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":1,"method":"session/open","params":{"sessionId":"a","stateDir":"` + dir + `"}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":2,"method":"exec/start","params":{"sessionId":"a","command":"echo ready; sleep 1000","yieldMs":0,"env":{"MEVEDEL_E2E":"1"},"cwd":"/"}}`)
	m := c.next()
	var o obs
	_ = json.Unmarshal(m.Result, &o)
	if m.Error != nil || o.Facts.Pid == 0 {
		t.Fatalf("start: %s %+v", m.Result, m.Error)
	}
	if _, err := io.WriteString(c.in, "Content-Length: banana\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.child.Exited():
	case <-time.After(waitBound):
		t.Fatal("helper kept running after a corrupt frame header")
	}
	if code := c.child.ExitCode(); code != 0 {
		t.Fatalf("helper exit code %d after a corrupt header, want a clean exit", code)
	}
	if !testsupport.WaitGone(o.Facts.Pid, 5*time.Second) {
		t.Fatal("the running command survived the end of the connection")
	}
	if !strings.Contains(c.stderr.String(), "Content-Length") {
		t.Fatalf("the corrupt header was not logged: %s", c.stderr.String())
	}
}

func TestEveryRequestGetsExactlyOneReply(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	dir := filepath.Join(t.TempDir(), "state")
	gate := fifo(t, "gate")
	bodies := []string{
		`{"jsonrpc":"2.0","id":1,"method":"session/open","params":{"sessionId":"a","stateDir":"` + dir + `"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"exec/start","params":{"sessionId":"a","command":"cat ` + gate + `","yieldMs":0,"env":{"MEVEDEL_E2E":"1"},"cwd":"/"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"exec/start","params":{"sessionId":"a","command":"echo one","cwd":"/"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"exec/start","params":{"sessionId":"a","command":"sleep 5 &","cwd":"/"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"exec/list","params":{"sessionId":"a","as":"user"}}`,
		`{"jsonrpc":"2.0","id":6,"method":"no/such"}`,
		`{"jsonrpc":"2.0","id":7,"method":"exec/start","params":{"sessionId":"a","command":"echo two; sleep 1000","cwd":"/","env":{"MEVEDEL_E2E":"1"}}}`,
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}`,
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}`,
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":12345}}`,
		`{"jsonrpc":"2.0","id":8,"method":"exec/analyze","params":{"command":"ls"}}`,
		`{"jsonrpc":"2.0","id":9,"method":"exec/stopAll","params":{"sessionId":"a"}}`,
		`{"jsonrpc":"2.0","id":10,"method":"session/close","params":{"sessionId":"a"}}`,
		`{"jsonrpc":"2.0","id":11,"method":"session/close","params":{"sessionId":"a"}}`,
		`{"jsonrpc":"2.0","id":12,"method":"shutdown"}`,
		`{"jsonrpc":"2.0","id":13,"method":"exec/list","params":{"sessionId":"a"}}`,
	}
	for _, b := range bodies {
		c.sendFrame(b)
	}
	replies := map[string]int{}
	msgs := map[string]rawMsg{}
	for i := 0; i < 13; i++ {
		m := c.next()
		replies[string(m.ID)]++
		msgs[string(m.ID)] = m
	}
	// Close and shutdown take effect at once for what follows them.
	if e := msgs["11"].Error; e == nil || e.Code != -32001 {
		t.Errorf("second session/close: %+v", e)
	}
	if e := msgs["13"].Error; e == nil || e.Code != -32005 {
		t.Errorf("request after shutdown: %+v", e)
	}
	// The cancelled start races the stopAll behind it: either ends it, and
	// its one reply is the final observation.
	if e := msgs["7"]; e.Error != nil || !strings.Contains(string(e.Result), `"status":"stopped"`) || !strings.Contains(string(e.Result), `"final":true`) {
		t.Errorf("cancelled start: %s %+v", e.Result, e.Error)
	}
	c.in.Close()
	// After EOF nothing more may arrive: read to the end.
	rest, _ := io.ReadAll(c.out)
	for i := 1; i <= 13; i++ {
		if n := replies[strconv.Itoa(i)]; n != 1 {
			t.Errorf("request %d got %d replies (%v)", i, n, replies)
		}
	}
	if strings.Contains(string(rest), `"id":`) && strings.Contains(string(rest), `"result"`) {
		t.Errorf("extra replies after all 13: %s", rest)
	}
}

func TestStateDirectoryHeldByOneHelper(t *testing.T) {
	t.Parallel()
	a, b := startHelper(t), startHelper(t)
	dir := filepath.Join(t.TempDir(), "state")
	first := a.openAt(dir, nil)
	b.wantError("session/open", map[string]any{"sessionId": "other", "stateDir": dir}, -32004, "conflict")
	a.wantError("session/open", map[string]any{"sessionId": "other", "stateDir": dir}, -32004, "conflict")
	a.wantError("session/open", map[string]any{"sessionId": first.id, "stateDir": t.TempDir()}, -32004, "conflict")
	// Closing releases it; a reopen draws a fresh id prefix.
	var closed struct{ Discarded int }
	a.mustCall("session/close", map[string]any{"sessionId": first.id}, &closed)
	second := b.openAt(dir, nil)
	if second.prefix == first.prefix {
		t.Fatalf("reopen reused the id prefix %s", first.prefix)
	}
	o := second.mustStart("echo x", nil)
	if !strings.Contains(o.Facts.ExecutionID, second.prefix) {
		t.Fatalf("id %s without the new prefix %s", o.Facts.ExecutionID, second.prefix)
	}
}

func TestSessionCloseEndsLiveExecutions(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("echo ready; sleep 1000", map[string]any{"yieldMs": 0})
	s.observeUntil(o, "ready")
	var closed struct{ Discarded int }
	h.mustCall("session/close", map[string]any{"sessionId": s.id}, &closed)
	n := h.waitNote(func(n note) bool {
		if n.Method != "exec/settled" {
			return false
		}
		var p struct{ Facts execution.Facts }
		_ = json.Unmarshal(n.Params, &p)
		return p.Facts.ExecutionID == o.Facts.ExecutionID
	})
	var p struct{ Facts execution.Facts }
	_ = json.Unmarshal(n.Params, &p)
	if p.Facts.Termination != execution.SessionEnded || p.Facts.Status != execution.StatusStopped {
		t.Fatalf("closed session: %+v", p.Facts)
	}
	if !testsupport.WaitGone(o.Facts.Pid, 5*time.Second) {
		t.Fatal("command survived session close")
	}
	h.wantError("exec/observe", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, -32001, "not-found")
	if _, err := os.Stat(filepath.Join(s.stateDir, "executions", o.Facts.ExecutionID+".log")); err != nil {
		t.Fatalf("spool removed at close: %v", err)
	}
}

func TestSpoolWriteFailure(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a small tmpfs and needs root, as CI runs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mounting a small tmpfs: %v %s", err, out)
	}
	h := startHelper(t)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	s := h.openAt(filepath.Join(dir, "state"), nil)
	o := s.mustStart("head -c 4000000 /dev/zero", nil)
	f := o.Facts
	if f.Termination != execution.SpoolFailed || f.Status != execution.StatusFailed || !strings.Contains(f.Reason, "no space") {
		t.Fatalf("disk full: %+v", f)
	}
	var st struct{}
	_ = st
	fi, err := os.Stat(filepath.Join(s.stateDir, "executions", f.ExecutionID+".log"))
	if err != nil || fi.Size() != f.OutputBytes {
		t.Fatalf("outputBytes %d vs spool %v %v", f.OutputBytes, fi, err)
	}
}

func TestProgressNotifications(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("echo tick; echo ready; sleep 1000", map[string]any{"yieldMs": 0, "toolUseId": "tool-1"})
	n := h.waitNote(func(n note) bool { return n.Method == "exec/progress" })
	var p struct {
		SessionID, ExecutionID, ToolUseID, Tail string
		Facts                                   execution.Facts
	}
	_ = json.Unmarshal(n.Params, &p)
	if p.ExecutionID != o.Facts.ExecutionID || p.ToolUseID != "tool-1" || !strings.Contains(p.Tail, "tick") || p.Facts.State != execution.Running {
		t.Fatalf("progress: %+v", p)
	}
	first := p.Facts.StartedAt.Time
	if n.Params == nil || time.Since(first) < 0 {
		t.Fatal("no params")
	}
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, nil)
}

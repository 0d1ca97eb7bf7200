package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
)

// Every string of params is bounded: 4 KiB unless the protocol names a
// larger bound. One over it is -32602 naming the field and the limit, and
// the connection goes on; one at the bound is taken.
func TestOverlongStringsRefused(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart("echo ready; sleep 1000", map[string]any{"yieldMs": 0, "tty": true})
	s.observeUntil(o, "ready")
	id := o.Facts.ExecutionID
	over := strings.Repeat("x", 4097)
	for _, tc := range []struct {
		method string
		params map[string]any
		field  string
		limit  string
	}{
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "label": over}, "label", "4096"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "owner": over}, "owner", "4096"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "toolUseId": over}, "toolUseId", "4096"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "cwd": "/" + over}, "cwd", "4096"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "as": over}, "as", "4096"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "env": map[string]string{over: "v"}}, "a name in env", "4096"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": "true", "env": map[string]string{"BIG": strings.Repeat("v", 128<<10+1)}}, `env["BIG"]`, "131072"},
		{"exec/start", map[string]any{"sessionId": s.id, "argv": []string{"echo", strings.Repeat("a", 1<<20+1)}}, "argv[1]", "1048576"},
		{"exec/start", map[string]any{"sessionId": s.id, "command": strings.Repeat("a", 1<<20+1)}, "command", "1048576"},
		{"exec/observe", map[string]any{"sessionId": s.id, "executionId": id, "chars": strings.Repeat("c", 1<<20+1)}, "chars", "1048576"},
		{"exec/observe", map[string]any{"sessionId": s.id, "executionId": over}, "executionId", "4096"},
		{"exec/list", map[string]any{"sessionId": over}, "sessionId", "4096"},
		{"exec/analyze", map[string]any{"command": strings.Repeat("a", 1<<20+1)}, "command", "1048576"},
		{"session/open", map[string]any{"sessionId": "other", "stateDir": "/" + over}, "stateDir", "4096"},
		{"spool/glob", map[string]any{"sessionId": s.id, "pattern": over}, "pattern", "4096"},
		{"spool/grep", map[string]any{"sessionId": s.id, "pattern": "x", "addresses": []string{"executions/a.log", over}}, "addresses[1]", "4096"},
		{"monitor/start", map[string]any{"sessionId": s.id, "command": "true", "filter": over}, "filter", "4096"},
		{"monitor/stop", map[string]any{"sessionId": s.id, "monitorId": over}, "monitorId", "4096"},
		{"mailbox/ack", map[string]any{"sessionId": s.id, "deliveryId": over, "durable": true}, "deliveryId", "4096"},
		{"initialize", map[string]any{"clientName": over}, "clientName", "4096"},
	} {
		e := h.wantError(tc.method, tc.params, -32602, "invalid-params")
		if !strings.Contains(e.Message, tc.field+" is ") || !strings.Contains(e.Message, "the limit is "+tc.limit+" bytes") {
			t.Errorf("%s %s: message %q does not name the field and its limit", tc.method, tc.field, e.Message)
		}
	}
	// Nothing of it reached the session, and the connection goes on.
	var list struct {
		Executions []struct{ ExecutionID string }
	}
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	if len(list.Executions) != 1 || list.Executions[0].ExecutionID != id {
		t.Fatalf("live after the refusals: %+v", list)
	}
	// At the bound it is taken.
	at := s.mustStart("true", map[string]any{"label": strings.Repeat("l", 4096)})
	if len(at.Facts.Label) != 4096 || !at.Final {
		t.Fatalf("a label of 4096 bytes: %d bytes, final %v", len(at.Facts.Label), at.Final)
	}
}

// A stdin one byte over its 16 MiB bound is refused, and nothing runs.
// The frame is written as bytes: encoding 16 MiB of JSON under the race
// detector costs the test more than the helper's whole answer.
func TestOverlongStdinRefused(t *testing.T) {
	c := startRaw(t)
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":"open","method":"session/open","params":{"sessionId":"a","stateDir":"` + dir + `"}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":"big","method":"exec/start","params":{"sessionId":"a","argv":["cat"],"kind":"one-shot","stdin":"` + strings.Repeat("i", 16<<20+1) + `"}}`)
	m := c.next()
	if string(m.ID) != `"big"` || m.Error == nil || m.Error.Code != -32602 ||
		!strings.Contains(m.Error.Message, "stdin is ") || !strings.Contains(m.Error.Message, "the limit is 16777216 bytes") {
		t.Fatalf("16 MiB + 1 of stdin: %s %+v", m.ID, m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":"list","method":"exec/list","params":{"sessionId":"a","as":"user"}}`)
	if m := c.next(); string(m.ID) != `"list"` || m.Error != nil || string(m.Result) != `{"executions":[]}` {
		t.Fatalf("after the refusal: %s %s %+v", m.ID, m.Result, m.Error)
	}
}

// A command longer than the kernel takes as one argument (128 KiB) runs
// all the same, up to the 1 MiB bound, and its processes do not see the
// descriptor it came through.
func TestLongCommandRuns(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	pad := strings.Repeat("x", 1<<20-200)
	cmd := "echo start; : " + pad + "; [ -e /dev/fd/3 ] && echo fd3 open; echo done"
	o := s.mustStart(cmd, nil)
	if f := o.Facts; f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 0 || o.Output != "start\ndone\n" {
		t.Fatalf("a %d-byte command: output %q, termination %s, reason %q", len(cmd), o.Output, f.Termination, f.Reason)
	}
}

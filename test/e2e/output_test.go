package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
)

// outputNote is one exec/output notification.
type outputNote struct {
	SessionID   string `json:"sessionId"`
	ExecutionID string `json:"executionId"`
	Offset      int64  `json:"offset"`
	Length      int    `json:"length"`
	Text        string `json:"text"`
}

// outputsOf returns the exec/output notifications of execution id so far.
func (h *helper) outputsOf(id string) []outputNote {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []outputNote
	for _, n := range h.notes {
		if n.Method != "exec/output" {
			continue
		}
		var p outputNote
		if err := json.Unmarshal(n.Params, &p); err != nil {
			h.t.Fatalf("exec/output: %v", err)
		}
		if p.ExecutionID == id {
			out = append(out, p)
		}
	}
	return out
}

// waitOutput waits for an exec/output of execution id with bytes from
// offset (not one that only shows a gap there).
func (h *helper) waitOutput(id string, offset int64) outputNote {
	h.t.Helper()
	var found outputNote
	h.waitNote(func(n note) bool {
		var p outputNote
		if n.Method != "exec/output" || json.Unmarshal(n.Params, &p) != nil {
			return false
		}
		found = p
		return p.ExecutionID == id && p.Offset == offset && p.Length > 0
	})
	return found
}

// A start that follows its execution gets what it prints in exec/output,
// each chunk placed by its offset in the log, without asking: an output
// buffer shows the first bytes without a spool/read. A character split
// across two writes comes whole, in the chunk that completes it.
func TestStartFollowedOutputComesInNotifications(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	g1, g2, g3 := fifo(t, "g1"), fifo(t, "g2"), fifo(t, "g3")
	command := "read -r _ < " + g1 + "; printf ready; read -r _ < " + g2 + `; printf ' caf\xc3'; read -r _ < ` + g3 + `; printf '\xa9!\n'`
	id := s.mustStart(command, map[string]any{"yieldMs": 0, "follow": true}).Facts.ExecutionID
	plain := s.mustStart("printf ready", map[string]any{"yieldMs": 0}).Facts.ExecutionID

	release(t, g1)
	first := h.waitOutput(id, 0)
	if first.Text != "ready" || first.Length != 5 || first.SessionID != s.id {
		t.Fatalf("first chunk %+v, want offset 0, 5 bytes, \"ready\"", first)
	}
	release(t, g2)
	second := h.waitOutput(id, 5)
	if second.Text != " caf" || second.Length != 4 {
		t.Fatalf("second chunk %+v, want \" caf\" (the half character held back)", second)
	}
	release(t, g3)
	third := h.waitOutput(id, 9)
	if third.Text != "é!\n" || third.Length != 4 {
		t.Fatalf("third chunk %+v, want \"é!\\n\" from the held byte on", third)
	}
	h.waitState(id, execution.Settled)
	h.waitState(plain, execution.Settled)

	// The chunks are the log, byte for byte.
	var log struct{ Text string }
	h.mustCall("spool/read", map[string]any{"sessionId": s.id, "address": "artifact://executions/" + id + ".log", "length": 1 << 16}, &log)
	var streamed strings.Builder
	for _, o := range h.outputsOf(id) {
		streamed.WriteString(o.Text)
	}
	if streamed.String() != log.Text || log.Text != "ready café!\n" {
		t.Errorf("streamed %q, log %q", streamed.String(), log.Text)
	}
	// Nobody followed the other one: its output stayed in its log.
	if n := h.outputsOf(plain); len(n) > 0 {
		t.Errorf("an execution nobody follows had its output sent: %+v", n)
	}
}

// exec/follow with output streams from then on, and its own unfollow
// (output true) stops the stream; the other follow's announcements go on.
func TestFollowWithOutputStreamsUntilUnfollowed(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	g1, g2 := fifo(t, "g1"), fifo(t, "g2")
	id := s.mustStart("read -r _ < "+g1+"; printf one; read -r _ < "+g2+"; printf two",
		map[string]any{"yieldMs": 0}).Facts.ExecutionID
	follow := func(on bool) {
		h.mustCall("exec/follow", map[string]any{"sessionId": s.id, "executionId": id, "as": "user", "follow": on, "output": true}, nil)
	}
	follow(true)
	release(t, g1)
	if o := h.waitOutput(id, 0); o.Text != "one" {
		t.Fatalf("chunk %+v, want \"one\"", o)
	}
	follow(false)
	release(t, g2)
	h.waitState(id, execution.Settled)
	for _, o := range h.outputsOf(id) {
		if strings.Contains(o.Text, "two") {
			t.Errorf("output came after its follow was undone: %+v", o)
		}
	}
}

// A burst larger than one notification carries is not sent at all: the
// client sees a gap in the offsets and reads the log. Whatever is sent
// is the log at its offset, chunks never overlap, and the last bytes,
// written after the burst, still come.
func TestFollowedOutputBurstLeavesAGap(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	g1, g2 := fifo(t, "g1"), fifo(t, "g2")
	// 4 MiB in one go, far past what notifications carry at their pace.
	id := s.mustStart("read -r _ < "+g1+"; head -c 4194304 /dev/zero | tr '\\0' a; read -r _ < "+g2+"; printf end",
		map[string]any{"yieldMs": 0, "follow": true}).Facts.ExecutionID
	release(t, g1)
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.OutputBytes == 4<<20 })
	release(t, g2)
	last := h.waitOutput(id, 4<<20)
	if last.Text != "end" {
		t.Fatalf("last chunk %+v, want \"end\" at 4 MiB", last)
	}
	h.waitState(id, execution.Settled)
	sent, end := 0, int64(0)
	for _, o := range h.outputsOf(id) {
		if o.Offset < end {
			t.Fatalf("chunk at %d overlaps the one before, which ended at %d", o.Offset, end)
		}
		want := strings.Repeat("a", o.Length)
		if o.Offset == 4<<20 && o.Length > 0 {
			want = "end"
		}
		if o.Text != want || len(o.Text) != o.Length {
			t.Fatalf("chunk at %d is not the log there: %d bytes, %q...", o.Offset, o.Length, o.Text[:min(len(o.Text), 20)])
		}
		sent += o.Length
		end = o.Offset + int64(o.Length)
	}
	if sent >= 4<<20 {
		t.Errorf("all %d bytes of the burst were sent in notifications; want a gap past the %d bytes one carries", sent, 64<<10)
	}
}

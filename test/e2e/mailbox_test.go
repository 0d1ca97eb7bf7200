package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
)

type delivery = execution.Delivery

type wake struct {
	SessionID   string
	Owner       string
	DeliveryIDs []string
}

// waitDelivery waits for a mailbox/deliver notification that satisfies
// match, among all received so far and those to come.
func (h *helper) waitDelivery(match func(delivery) bool) delivery {
	h.t.Helper()
	var d delivery
	h.waitNote(func(n note) bool {
		if n.Method != "mailbox/deliver" {
			return false
		}
		var x delivery
		if json.Unmarshal(n.Params, &x) != nil || !match(x) {
			return false
		}
		d = x
		return true
	})
	return d
}

// deliveriesOf returns every delivery notification so far about execution
// or monitor id.
func (h *helper) deliveriesOf(id string) []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []delivery
	for _, n := range h.notes {
		var d delivery
		if n.Method == "mailbox/deliver" && json.Unmarshal(n.Params, &d) == nil &&
			(d.Attrs.ExecutionID == id || d.Attrs.MonitorID == id) {
			out = append(out, d)
		}
	}
	return out
}

// wakes returns every session/wake so far.
func (h *helper) wakes() []wake {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []wake
	for _, n := range h.notes {
		var w wake
		if n.Method == "session/wake" && json.Unmarshal(n.Params, &w) == nil {
			out = append(out, w)
		}
	}
	return out
}

func (s *session) ack(id string, durable bool) {
	s.h.t.Helper()
	p := map[string]any{"sessionId": s.id, "deliveryId": id}
	if durable {
		p["durable"] = true
	} else {
		p["error"] = "the test refused it"
	}
	s.h.mustCall("mailbox/ack", p, nil)
}

// attend tells the helper the owner's model read ids, and checks that
// every one of them was owed.
func (s *session) attend(owner string, ids ...string) {
	s.h.t.Helper()
	var r struct{ Attended int }
	s.h.mustCall("owner/attend", map[string]any{"sessionId": s.id, "owner": owner, "deliveryIds": ids}, &r)
	if r.Attended != len(ids) {
		s.h.t.Fatalf("attended %d of %v", r.Attended, ids)
	}
}

func (s *session) ownerState(owner, state string) {
	s.h.t.Helper()
	s.h.mustCall("owner/state", map[string]any{"sessionId": s.id, "owner": owner, "state": state}, nil)
}

// background starts command yielded and returns its id. The command waits
// on a gate until it has yielded, so even `true` is a yielded execution.
func (s *session) background(command string, extra ...map[string]any) string {
	s.h.t.Helper()
	gate := fifo(s.h.t, "yielded")
	p := map[string]any{"yieldMs": 0}
	for _, m := range extra {
		for k, v := range m {
			p[k] = v
		}
	}
	o := s.mustStart("read < "+gate+"; "+command, p)
	if o.Final {
		s.h.t.Fatalf("%q did not yield", command)
	}
	release(s.h.t, gate)
	return o.Facts.ExecutionID
}

// barrier runs one more yielded command to its durable delivery. Deliveries
// go out in the order they are made, so anything the earlier executions
// were going to deliver has been sent by the time this one arrives.
func (s *session) barrier() {
	s.h.t.Helper()
	id := s.background("true")
	d := s.h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	s.ack(d.DeliveryID, true)
}

func TestDeliveryIsPendingUntilDurableAck(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	id := s.background("echo finished; exit 3")

	d := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	if d.Kind != execution.KindExecution || d.Owner != "/root" || d.SessionID != s.id || d.Attempt != 1 {
		t.Fatalf("delivery %+v", d)
	}
	if d.Attrs.ExitCode == nil || *d.Attrs.ExitCode != 3 || d.Attrs.Status != execution.StatusFailed {
		t.Fatalf("attrs %+v", d.Attrs)
	}
	if d.Observation == nil || !d.Observation.Final || d.Observation.Output != "finished\n" {
		t.Fatalf("observation %+v", d.Observation)
	}

	// Pending: a poll sees the result without claiming it.
	o := s.mustObserve(id, nil)
	if !o.Final || o.Output != "finished\n" || o.DeliveryID != d.DeliveryID || o.Facts.UnreadBytes != 9 {
		t.Fatalf("poll while pending: %+v", o)
	}
	s.ack(d.DeliveryID, true)
	o = s.mustObserve(id, nil)
	if !o.Final || o.Output != "finished\n" || o.DeliveryID != "" || o.Facts.UnreadBytes != 0 {
		t.Fatalf("poll after the durable ack: %+v", o)
	}
	// Acks are idempotent: a repeat and a late failure change nothing.
	s.ack(d.DeliveryID, true)
	s.ack(d.DeliveryID, false)
	s.barrier()
	if n := len(h.deliveriesOf(id)); n != 1 {
		t.Fatalf("%d deliveries of %s, want 1", n, id)
	}
}

func TestDeliveryIsSentAgainAfterFailureAndTimeout(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"ackTimeoutMs": 300, "retryMs": 50})
	id := s.background("echo again")

	first := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	s.ack(first.DeliveryID, false)
	second := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id && d.Attempt == 2 })
	// No ack this time: the timeout restores it.
	third := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id && d.Attempt == 3 })
	for _, d := range []delivery{second, third} {
		if d.DeliveryID != first.DeliveryID || d.Observation.Output != "again\n" {
			t.Fatalf("resend %+v differs from the first %+v", d, first)
		}
	}
	s.ack(first.DeliveryID, true)
	s.barrier()
	for _, d := range h.deliveriesOf(id) {
		if d.DeliveryID != first.DeliveryID {
			t.Fatalf("a second delivery id %s for one result", d.DeliveryID)
		}
	}
	if o := s.mustObserve(id, nil); o.Facts.UnreadBytes != 0 || !o.Final {
		t.Fatalf("after the ack: %+v", o)
	}
}

func TestClaimedResultsAreNotDelivered(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")

	// A waiting observation claims the result.
	waited := s.background(fmt.Sprintf("read < %s; echo waited", gate))
	// The request is written before the gate opens, and the helper reads
	// requests in order, so the waiter is registered before the end.
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	w, err := h.c.Dispatch(ctx, "exec/observe", map[string]any{"sessionId": s.id, "executionId": waited, "waitMs": 30000})
	if err != nil {
		t.Fatal(err)
	}
	h.waitState(waited, execution.Running)
	// Requests are handled in order: once this reply is in, the waiting
	// observation is registered.
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, nil)
	release(t, gate)
	var o obs
	if err := w.Wait(ctx, &o); err != nil || !o.Final || o.Output != "waited\n" {
		t.Fatalf("waiting observation: %+v %v", o, err)
	}

	// exec/stop's reply claims it too.
	stopped := s.background("sleep 300")
	h.waitState(stopped, execution.Running)
	var so obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": stopped}, &so)
	if !so.Final || so.Facts.Termination != execution.Stopped {
		t.Fatalf("stop: %+v", so)
	}

	// Foreground completions never produce one.
	fg := s.mustStart("echo fg", nil)

	// Nor does a start that asked for none (a person's output buffer
	// watches its end), though nothing claimed it: its end is held for
	// the owner's observation.
	watched := s.background("echo watched", map[string]any{"deliver": false})
	h.waitState(watched, execution.Settled)

	s.barrier()
	var wo obs
	h.mustCall("exec/observe", map[string]any{"sessionId": s.id, "executionId": watched}, &wo)
	if !wo.Final || wo.Output != "watched\n" || wo.DeliveryID != "" {
		t.Errorf("the owner's observation of an undelivered end: %+v", wo)
	}
	for _, id := range []string{waited, stopped, fg.Facts.ExecutionID, watched} {
		if ds := h.deliveriesOf(id); len(ds) != 0 {
			t.Errorf("claimed result %s was delivered: %+v", id, ds)
		}
	}
	for _, w := range h.wakes() {
		if slices.Contains(w.DeliveryIDs, stopped) {
			t.Errorf("wake for a stopped execution: %+v", w)
		}
	}
}

func TestWakeOnlyWhileIdleAndCoalesced(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)

	// Idle by default: one durable result wakes the owner.
	id := s.background("true")
	d := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	s.ack(d.DeliveryID, true)
	h.waitNote(func(n note) bool {
		return n.Method == "session/wake" && strings.Contains(string(n.Params), d.DeliveryID)
	})
	// The agent's turn read it.
	s.attend("/root", d.DeliveryID)

	// Busy: results are owed, not woken; idle again brings one wake for all.
	s.ownerState("/root", "busy")
	var ids []string
	for range 3 {
		id := s.background("true")
		d := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
		s.ack(d.DeliveryID, true)
		ids = append(ids, d.DeliveryID)
	}
	before := len(h.wakes())
	s.ownerState("/root", "idle")
	h.waitNote(func(n note) bool {
		return n.Method == "session/wake" && strings.Contains(string(n.Params), ids[2])
	})
	ws := h.wakes()
	if len(ws) != before+1 || !slices.Equal(ws[len(ws)-1].DeliveryIDs, ids) {
		t.Fatalf("wakes %+v, want one with %v", ws[before:], ids)
	}
	s.attend("/root", ids...)

	// owner/retire drops what is owed up to then; later results stay owed.
	s.ownerState("/root", "busy")
	old := s.background("true")
	od := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == old })
	s.ack(od.DeliveryID, true)
	var r struct{ Retired int }
	h.mustCall("owner/retire", map[string]any{"sessionId": s.id}, &r)
	if r.Retired != 1 {
		t.Fatalf("retired %d, want 1", r.Retired)
	}
	later := s.background("true")
	ld := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == later })
	s.ack(ld.DeliveryID, true)
	s.ownerState("/root", "idle")
	w := h.waitNote(func(n note) bool {
		return n.Method == "session/wake" && strings.Contains(string(n.Params), ld.DeliveryID)
	})
	if strings.Contains(string(w.Params), od.DeliveryID) {
		t.Fatalf("retired attention woke again: %s", w.Params)
	}

	// A result the model polled is not woken for, and another owner's
	// results never wake anyone.
	polled := s.background("echo seen")
	pd := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == polled })
	if o := s.mustObserve(polled, nil); !o.Final {
		t.Fatalf("poll: %+v", o)
	}
	s.ack(pd.DeliveryID, true)
	subGate := fifo(t, "sub")
	sub := s.mustStart("read < "+subGate, map[string]any{"yieldMs": 0, "owner": "/root/sub"}).Facts.ExecutionID
	release(t, subGate)
	sd := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == sub })
	if sd.Owner != "/root/sub" {
		t.Fatalf("delivery owner %q", sd.Owner)
	}
	s.ack(sd.DeliveryID, true)
	s.barrier()
	for _, w := range h.wakes() {
		if slices.Contains(w.DeliveryIDs, pd.DeliveryID) || slices.Contains(w.DeliveryIDs, sd.DeliveryID) || w.Owner != "/root" {
			t.Fatalf("unexpected wake %+v", w)
		}
	}
}

func TestSessionCloseDiscardsPendingDeliveries(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	id := s.background("echo unacked")
	h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	var r struct{ Discarded int }
	h.mustCall("session/close", map[string]any{"sessionId": s.id}, &r)
	if r.Discarded != 1 {
		t.Fatalf("discarded %d, want 1", r.Discarded)
	}
}

func TestMailboxAckBadInput(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	h.wantError("mailbox/ack", map[string]any{"sessionId": s.id, "deliveryId": "x"}, -32602, "invalid-params")
	h.wantError("mailbox/ack", map[string]any{"sessionId": s.id, "deliveryId": "x", "durable": true, "error": "both"}, -32602, "invalid-params")
	h.wantError("owner/state", map[string]any{"sessionId": s.id, "state": "asleep"}, -32602, "invalid-params")
	h.wantError("mailbox/ack", map[string]any{"sessionId": "nope", "deliveryId": "x", "durable": true}, -32001, "not-found")
	// Unknown ids are success: acks are idempotent.
	h.mustCall("mailbox/ack", map[string]any{"sessionId": s.id, "deliveryId": "dlv-unknown", "durable": true}, nil)
}

// monitorStart starts a monitor and returns its wire shape.
func (s *session) monitorStart(p map[string]any) execution.MonitorInfo {
	s.h.t.Helper()
	q := map[string]any{"sessionId": s.id, "cwd": s.h.home, "env": map[string]string{"MEVEDEL_E2E": "1"}}
	for k, v := range p {
		q[k] = v
	}
	var m execution.MonitorInfo
	s.h.mustCall("monitor/start", q, &m)
	return m
}

// monitorLines acks every MONITOR batch of monitor id not in seen until
// its terminal delivery, and returns the lines in order and the terminal.
func (s *session) monitorLines(id string, seen map[string]bool) ([]string, delivery) {
	s.h.t.Helper()
	var lines []string
	if seen == nil {
		seen = map[string]bool{}
	}
	for {
		d := s.h.waitDelivery(func(d delivery) bool { return d.Attrs.MonitorID == id && !seen[d.DeliveryID] })
		seen[d.DeliveryID] = true
		s.ack(d.DeliveryID, true)
		if d.Kind == execution.KindMonitorTerminal {
			return lines, d
		}
		lines = append(lines, d.Lines...)
	}
}

func TestMonitorDeliversFilteredLinesOnceThenItsEnd(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	m := s.monitorStart(map[string]any{
		"command": fmt.Sprintf("for i in 1 2 3; do echo tick $i; echo noise; done; read < %s", gate),
		"label":   "ticker", "filter": "^tick",
	})
	if m.State != "running" || m.MonitorID == "" || m.ExecutionID == "" {
		t.Fatalf("monitor/start: %+v", m)
	}
	var list struct{ Monitors []execution.MonitorInfo }
	h.mustCall("monitor/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Monitors) != 1 || list.Monitors[0].MonitorID != m.MonitorID {
		t.Fatalf("monitor/list: %+v", list)
	}
	// Read batches until the three events are in, then stop it.
	var lines []string
	seen := map[string]bool{}
	for len(lines) < 3 {
		d := h.waitDelivery(func(d delivery) bool { return d.Attrs.MonitorID == m.MonitorID && !seen[d.DeliveryID] })
		seen[d.DeliveryID] = true
		if d.Kind != execution.KindMonitor || d.Attrs.Label != "ticker" {
			t.Fatalf("batch %+v", d)
		}
		lines = append(lines, d.Lines...)
		s.ack(d.DeliveryID, true)
	}
	if !slices.Equal(lines, []string{"tick 1", "tick 2", "tick 3"}) {
		t.Fatalf("events %q", lines)
	}
	var stopped execution.MonitorInfo
	h.mustCall("monitor/stop", map[string]any{"sessionId": s.id, "monitorId": m.MonitorID}, &stopped)
	if stopped.State != "stopped" || stopped.Events != 3 {
		t.Fatalf("monitor/stop: %+v", stopped)
	}
	rest, term := s.monitorLines(m.MonitorID, seen)
	if len(rest) != 0 || term.Text != `● Monitor "ticker" stopped · 3 events` || *term.Attrs.Events != 3 {
		t.Fatalf("terminal %+v after extra lines %q", term, rest)
	}
	s.barrier()
	// Its own execution makes no EXECUTION delivery.
	for _, d := range h.deliveriesOf(m.ExecutionID) {
		if d.Kind == execution.KindExecution {
			t.Fatalf("monitor execution delivered as a command: %+v", d)
		}
	}
	h.mustCall("monitor/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Monitors) != 0 {
		t.Fatalf("stopped monitor still listed: %+v", list)
	}
	h.wantError("monitor/stop", map[string]any{"sessionId": s.id, "monitorId": m.MonitorID, "owner": "/root/other"}, -32001, "not-found")
	h.wantError("monitor/start", map[string]any{"sessionId": s.id, "command": "true", "filter": "("}, -32602, "invalid-params")
}

func TestMonitorBatchesWhileOneIsInFlight(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	gate := fifo(t, "gate")
	m := s.monitorStart(map[string]any{
		"command": fmt.Sprintf("echo first; read < %s; for i in $(seq 2 50); do echo line $i; done", gate),
	})
	first := h.waitDelivery(func(d delivery) bool { return d.Attrs.MonitorID == m.MonitorID })
	if !slices.Equal(first.Lines, []string{"first"}) {
		t.Fatalf("first batch %q", first.Lines)
	}
	// The first batch is unacked: the 49 later lines wait and come together,
	// after a failure ack sends the first one again.
	release(t, gate)
	h.waitNote(func(n note) bool {
		return n.Method == "exec/settled" && strings.Contains(string(n.Params), m.ExecutionID)
	})
	s.ack(first.DeliveryID, false)
	again := h.waitDelivery(func(d delivery) bool { return d.DeliveryID == first.DeliveryID && d.Attempt == 2 })
	if !slices.Equal(again.Lines, first.Lines) {
		t.Fatalf("resent batch %q", again.Lines)
	}
	s.ack(first.DeliveryID, true)
	lines, term := s.monitorLines(m.MonitorID, map[string]bool{first.DeliveryID: true})
	if len(lines) != 49 || lines[0] != "line 2" || lines[48] != "line 50" {
		t.Fatalf("later lines %d: %q", len(lines), lines)
	}
	if n := len(h.deliveriesOf(m.MonitorID)); n != 4 { // first, its resend, one batch, the end
		t.Fatalf("%d deliveries, want 4", n)
	}
	if term.Attrs.Status != execution.StatusCompleted || *term.Attrs.Events != 50 {
		t.Fatalf("terminal %+v", term.Attrs)
	}
}

func TestMonitorThrottlesAndTimesOut(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	// 5000 lines at once: most are over the per-second budget.
	noisy := s.monitorStart(map[string]any{"command": "seq 5000", "label": "noisy"})
	lines, term := s.monitorLines(noisy.MonitorID, nil)
	if term.Attrs.Suppressed == 0 || int64(len(lines))+term.Attrs.Suppressed != 5000 || *term.Attrs.Events != int64(len(lines)) {
		t.Fatalf("%d lines, terminal %+v", len(lines), term.Attrs)
	}
	if !strings.Contains(term.Text, "suppressed") {
		t.Fatalf("terminal text %q", term.Text)
	}
	// A non-persistent monitor ends at its timeout.
	slow := s.monitorStart(map[string]any{"command": "sleep 300", "label": "slow", "timeoutMs": 200})
	_, term = s.monitorLines(slow.MonitorID, nil)
	if term.Attrs.Status != execution.StatusTimedOut || !strings.Contains(term.Text, "timed out") {
		t.Fatalf("terminal %+v", term)
	}
}

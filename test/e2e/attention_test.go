package e2e

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/transcript"
)

// The attention contract: every result reaches its owner, only natural
// ends wake, and owed attention lasts until it is attended or retired.

// wokenFor reports whether any wake so far carried delivery id.
func (h *helper) wokenFor(id string) bool {
	for _, w := range h.wakes() {
		if slices.Contains(w.DeliveryIDs, id) {
			return true
		}
	}
	return false
}

// wakeWith waits for a wake that carries every id in ids, and returns it.
func (h *helper) wakeWith(ids ...string) wake {
	h.t.Helper()
	return h.wakeAfter(0, ids...)
}

// wakeAfter waits for a wake, later than the first skip wakes, that
// carries every id in ids.
func (h *helper) wakeAfter(skip int, ids ...string) wake {
	h.t.Helper()
	var got wake
	seen := 0
	h.waitNote(func(n note) bool {
		var w wake
		if n.Method != "session/wake" || json.Unmarshal(n.Params, &w) != nil {
			return false
		}
		if seen++; seen <= skip {
			return false
		}
		for _, id := range ids {
			if !slices.Contains(w.DeliveryIDs, id) {
				return false
			}
		}
		got = w
		return true
	})
	return got
}

// durableResult runs command in the background and acks its delivery.
func (s *session) durableResult(command string) delivery {
	s.h.t.Helper()
	id := s.background(command)
	d := s.h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	s.ack(d.DeliveryID, true)
	return d
}

func (s *session) retire(p map[string]any) (retired int, frontier uint64) {
	s.h.t.Helper()
	q := map[string]any{"sessionId": s.id}
	for k, v := range p {
		q[k] = v
	}
	var r struct {
		Retired  int
		Frontier uint64
	}
	s.h.mustCall("owner/retire", q, &r)
	return r.Retired, r.Frontier
}

// A person's stop of the model's command answers the person and still
// gives the model its result: one delivery, status stopped, and no wake.
func TestPersonsStopStillReachesTheOwner(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	id := s.background("echo working; sleep 300")
	s.observeUntil(obs{Facts: execution.Facts{ExecutionID: id}}, "working")
	var stop obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id, "as": "user"}, &stop)
	if !stop.Final || stop.Facts.Termination != execution.Stopped {
		t.Fatalf("the person's stop answered %+v", stop)
	}
	d := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	if d.Owner != "/root" || d.Attrs.Status != execution.StatusStopped || d.Observation == nil || !d.Observation.Final {
		t.Fatalf("the owner's delivery %+v", d)
	}
	s.ack(d.DeliveryID, true)
	// The model's poll within retention sees the same end.
	if o := s.mustObserve(id, nil); !o.Final || o.Facts.Termination != execution.Stopped || o.DeliveryID != "" {
		t.Fatalf("the owner's poll after the delivery: %+v", o)
	}
	s.barrier()
	if h.wokenFor(d.DeliveryID) {
		t.Fatalf("a stopped command woke the agent: %+v", h.wakes())
	}
	if ds := h.deliveriesOf(id); len(ds) != 1 {
		t.Fatalf("%d deliveries, want one: %+v", len(ds), ds)
	}

	// A person's stopAll does the same for every command it stops.
	other := s.background("sleep 300")
	h.waitState(other, execution.Running)
	var all struct{ Stopped int }
	h.mustCall("exec/stopAll", map[string]any{"sessionId": s.id, "as": "user"}, &all)
	od := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == other })
	if od.Attrs.Status != execution.StatusStopped {
		t.Fatalf("stopAll delivery %+v", od)
	}
	s.ack(od.DeliveryID, true)

	// The model's own stop claims the result in its reply: no delivery.
	own := s.background("sleep 300")
	h.waitState(own, execution.Running)
	var mine obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": own}, &mine)
	if !mine.Final {
		t.Fatalf("own stop %+v", mine)
	}
	s.barrier()
	if ds := h.deliveriesOf(own); len(ds) != 0 {
		t.Fatalf("the owner's own stop was delivered too: %+v", ds)
	}
	if h.wokenFor(od.DeliveryID) {
		t.Fatalf("stopAll woke the agent")
	}
}

// The owner's poll of a result a person stopped consumes it, whether or
// not its delivery went out first: one result, one id, and no second end.
func TestOwnersPollTakesAStoppedResult(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	id := s.background("echo before-stop; sleep 300")
	// Stopped only once its output is in the spool.
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.OutputBytes > 0 })
	var stop obs
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id, "as": "user"}, &stop)
	o := s.mustObserve(id, nil)
	if !o.Final || !strings.Contains(stop.Output+o.Output, "before-stop") {
		t.Fatalf("poll %+v after the stop %+v", o, stop)
	}
	if o.DeliveryID != "" {
		t.Fatalf("the owner's poll did not take the stopped result: %+v", o)
	}
	again := s.mustObserve(id, nil)
	if again.Output != o.Output || again.Facts.UnreadBytes != 0 {
		t.Fatalf("a later poll %+v differs from the first %+v", again, o)
	}
	for _, d := range h.deliveriesOf(id) {
		s.ack(d.DeliveryID, true) // sent before the poll withdrew it: a late ack is harmless
	}
	s.barrier()
	if ids := deliveryIDs(h.deliveriesOf(id)); len(ids) > 1 {
		t.Fatalf("one result under several ids: %v", ids)
	}
}

func deliveryIDs(ds []delivery) []string {
	var ids []string
	for _, d := range ds {
		if !slices.Contains(ids, d.DeliveryID) {
			ids = append(ids, d.DeliveryID)
		}
	}
	return ids
}

// Stopping a monitor, by the model or the person, ends it with its
// terminal delivery and wakes nobody; a monitor that ends on its own may.
func TestStoppedMonitorDoesNotWake(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	for _, as := range []string{"", "user"} {
		m := s.monitorStart(map[string]any{"command": "echo tick; sleep 300", "label": "ticker " + as})
		_, _ = s.waitMonitorLine(m.MonitorID, "tick")
		p := map[string]any{"sessionId": s.id, "monitorId": m.MonitorID}
		if as != "" {
			p["as"] = as
		}
		h.mustCall("monitor/stop", p, nil)
		term := h.waitDelivery(func(d delivery) bool {
			return d.Attrs.MonitorID == m.MonitorID && d.Kind == execution.KindMonitorTerminal
		})
		s.ack(term.DeliveryID, true)
		s.barrier()
		if h.wokenFor(term.DeliveryID) {
			t.Fatalf("a stopped monitor (as %q) woke the agent: %+v", as, h.wakes())
		}
	}
	m := s.monitorStart(map[string]any{"command": "echo once", "label": "ends"})
	_, term := s.monitorLines(m.MonitorID, nil)
	h.wakeWith(term.DeliveryID)
}

// waitMonitorLine acks MONITOR batches of id until one carries line.
func (s *session) waitMonitorLine(id, line string) (delivery, bool) {
	s.h.t.Helper()
	seen := map[string]bool{}
	for {
		d := s.h.waitDelivery(func(d delivery) bool { return d.Attrs.MonitorID == id && !seen[d.DeliveryID] })
		seen[d.DeliveryID] = true
		s.ack(d.DeliveryID, true)
		if slices.Contains(d.Lines, line) {
			return d, true
		}
		if d.Kind == execution.KindMonitorTerminal {
			s.h.t.Fatalf("monitor %s ended before %q", id, line)
		}
	}
}

// A wake the agent could not act on is offered again at the next idle,
// until the owner attends it or the person retires it.
func TestOwedAttentionIsOfferedAgainUntilAttended(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	first := s.durableResult("true")
	h.wakeWith(first.DeliveryID)
	// The agent application could not start the turn: nothing attended.
	offered := len(h.wakes())
	s.ownerState("/root", "busy")
	s.ownerState("/root", "idle")
	w := h.wakeAfter(offered, first.DeliveryID)
	if len(w.DeliveryIDs) != 1 {
		t.Fatalf("second offer %+v", w)
	}
	// The turn read it: attended, never offered again.
	s.attend("/root", first.DeliveryID)
	var none struct{ Attended int }
	h.mustCall("owner/attend", map[string]any{"sessionId": s.id, "deliveryIds": []string{first.DeliveryID}}, &none)
	if none.Attended != 0 {
		t.Fatalf("attended twice: %d", none.Attended)
	}
	offered = len(h.wakes())
	second := s.durableResult("true")
	w = h.wakeAfter(offered, second.DeliveryID)
	if slices.Contains(w.DeliveryIDs, first.DeliveryID) {
		t.Fatalf("attended result offered again: %+v", w)
	}

	// Two-phase retire: what was owed up to the frontier goes on commit;
	// what came after stays owed; an abort leaves everything owed.
	s.ownerState("/root", "busy")
	_, frontier := s.retire(map[string]any{"phase": "begin"})
	late := s.durableResult("true")
	if n, _ := s.retire(map[string]any{"phase": "abort", "frontier": frontier}); n != 0 {
		t.Fatalf("abort retired %d", n)
	}
	if n, _ := s.retire(map[string]any{"phase": "commit", "frontier": frontier}); n != 1 {
		t.Fatalf("commit retired %d, want the one owed before the frontier", n)
	}
	offered = len(h.wakes())
	s.ownerState("/root", "idle")
	w = h.wakeAfter(offered, late.DeliveryID)
	if slices.Contains(w.DeliveryIDs, second.DeliveryID) {
		t.Fatalf("retired attention offered again: %+v", w)
	}
	h.wantError("owner/retire", map[string]any{"sessionId": s.id, "phase": "commit"}, -32602, "invalid-params")
	h.wantError("owner/retire", map[string]any{"sessionId": s.id, "phase": "commit", "frontier": frontier + 1000}, -32602, "invalid-params")
	h.wantError("owner/retire", map[string]any{"sessionId": s.id, "phase": "later"}, -32602, "invalid-params")

	// Each durable ack is announced for passive listeners.
	h.waitNote(func(n note) bool {
		var p struct{ SessionID, DeliveryID, ExecutionID, Owner string }
		return n.Method == "mailbox/delivered" && json.Unmarshal(n.Params, &p) == nil &&
			p.DeliveryID == late.DeliveryID && p.ExecutionID == late.Attrs.ExecutionID && p.Owner == "/root" && p.SessionID == s.id
	})
	// The retirement is in the journal.
	retired := false
	for _, r := range s.records(1000) {
		retired = retired || (r.Type == transcript.TypeRetire && r.Owner == "/root")
	}
	if !retired {
		t.Fatal("no retire record in the journal")
	}
}

// After a crash the next open makes a pending delivery again under its
// original id, and never wakes for it.
func TestRecoveryKeepsDeliveryIDsAndNeverWakes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	h1 := startHelper(t)
	s1 := h1.openAt(dir, nil)
	id := s1.background("echo result")
	d := h1.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	s1.checkpoint()
	h1.kill()

	h2 := startHelper(t)
	s2 := h2.openAt(dir, nil)
	again := h2.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	if again.DeliveryID != d.DeliveryID {
		t.Fatalf("re-made under %s, was %s", again.DeliveryID, d.DeliveryID)
	}
	s2.ack(again.DeliveryID, true)
	s2.barrier()
	if h2.wokenFor(again.DeliveryID) {
		t.Fatalf("recovery woke the agent: %+v", h2.wakes())
	}
}

// An owner reads and greps its own logs of earlier opens of the session,
// and nobody else's.
func TestEarlierLogsStayTheOwners(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	h := startHelper(t)
	s1 := h.openAt(dir, nil)
	mine := s1.mustStart("echo mine-earlier", nil).Facts.OutputAddress
	theirs := s1.mustStart("echo theirs-earlier", map[string]any{"owner": "/root/other"}).Facts.OutputAddress
	h.mustCall("session/close", map[string]any{"sessionId": s1.id}, nil)

	s2 := h.openAt(dir, nil)
	var r struct{ Text string }
	h.mustCall("spool/read", map[string]any{"sessionId": s2.id, "address": mine}, &r)
	if r.Text != "mine-earlier\n" {
		t.Fatalf("read %q", r.Text)
	}
	h.wantError("spool/read", map[string]any{"sessionId": s2.id, "address": theirs}, -32001, "not-found")
	var g struct{ Matches []struct{ Address string } }
	h.mustCall("spool/grep", map[string]any{"sessionId": s2.id, "pattern": "earlier"}, &g)
	if len(g.Matches) != 1 || g.Matches[0].Address != mine {
		t.Fatalf("grep %+v", g)
	}
	var glob struct{ Addresses []string }
	h.mustCall("spool/glob", map[string]any{"sessionId": s2.id}, &glob)
	if !slices.Equal(glob.Addresses, []string{mine}) {
		t.Fatalf("glob %+v", glob)
	}
	var st struct{ LogicalBytes int64 }
	h.mustCall("spool/stat", map[string]any{"sessionId": s2.id, "address": mine}, &st)
	if st.LogicalBytes != int64(len("mine-earlier\n")) {
		t.Fatalf("stat %+v", st)
	}
	h.mustCall("spool/read", map[string]any{"sessionId": s2.id, "address": theirs, "owner": "/root/other"}, &r)
	if r.Text != "theirs-earlier\n" {
		t.Fatalf("the other owner read %q", r.Text)
	}
}

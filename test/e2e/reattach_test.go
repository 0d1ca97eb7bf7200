package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// A client that comes back after the resend backoff elapsed gets the
// pending delivery at once, not after an ack timeout.
func TestReattachAfterBackoffGetsResendAtOnce(t *testing.T) {
	l := startListener(t)
	got := make(chan delivery, 64)
	handle := func(_ *jsonrpc2.Conn, n note) {
		var d delivery
		if n.Method == "mailbox/deliver" && json.Unmarshal(n.Params, &d) == nil {
			select {
			case got <- d:
			default:
			}
		}
	}
	next := func() delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(waitBound):
			t.Fatal("no delivery")
			return delivery{}
		}
	}
	conn := l.dial(handle)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	sid := "late"
	if err := conn.Call(ctx, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(l.home, "state"),
		"limits": map[string]any{"retryMs": 5}}, nil); err != nil {
		t.Fatal(err)
	}
	gate := fifo(t, "gate")
	var o obs
	if err := conn.Call(ctx, "exec/start", map[string]any{"sessionId": sid, "command": "read < " + gate + "; echo kept", "yieldMs": 0, "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o); err != nil || o.Final {
		t.Fatalf("start: %+v %v", o, err)
	}
	release(t, gate)
	first := next()
	conn.Close()
	if !l.stderr.waitCount("client left without shutdown", 1, waitBound) {
		t.Fatal("the helper did not notice the disconnect")
	}
	// Not synchronisation: the client comes back well after the 5 ms
	// backoff, so the resend is due the moment it attaches.
	time.Sleep(50 * time.Millisecond)
	conn = l.dial(handle)
	again := next()
	if again.DeliveryID != first.DeliveryID || again.Attempt != 2 {
		t.Fatalf("after reattach %+v, first %+v", again, first)
	}
	if err := conn.Call(ctx, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": again.DeliveryID, "durable": true}, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Call(ctx, "shutdown", nil, nil)
	conn.Close()
}

// A waiting observation whose client disconnects reads nothing and claims
// nothing: the whole output reaches the client that comes back, through
// the mailbox.
func TestObservationCutOffByDisconnectClaimsNothing(t *testing.T) {
	l := startListener(t)
	got := make(chan delivery, 64)
	handle := func(_ *jsonrpc2.Conn, n note) {
		var d delivery
		if n.Method == "mailbox/deliver" && json.Unmarshal(n.Params, &d) == nil {
			got <- d
		}
	}
	conn := l.dial(handle)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	sid := "cut"
	if err := conn.Call(ctx, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(l.home, "state")}, nil); err != nil {
		t.Fatal(err)
	}
	gate := fifo(t, "gate")
	var o obs
	if err := conn.Call(ctx, "exec/start", map[string]any{"sessionId": sid, "command": "echo before; read < " + gate + "; echo after", "yieldMs": 0, "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o); err != nil || o.Final {
		t.Fatalf("start: %+v %v", o, err)
	}
	if _, err := conn.DispatchCall(ctx, "exec/observe", map[string]any{"sessionId": sid, "executionId": o.Facts.ExecutionID, "waitMs": 60000}); err != nil {
		t.Fatal(err)
	}
	// Requests are handled in order: once this answers, the wait is on.
	if err := conn.Call(ctx, "exec/list", map[string]any{"sessionId": sid}, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if !l.stderr.waitCount("client left without shutdown", 1, waitBound) {
		t.Fatal("the helper did not notice the disconnect")
	}
	release(t, gate)
	conn = l.dial(handle)
	select {
	case d := <-got:
		if d.Attrs.ExecutionID != o.Facts.ExecutionID || d.Observation == nil || o.Output+d.Observation.Output != "before\nafter\n" {
			t.Fatalf("delivery %+v (observation %+v)", d, d.Observation)
		}
		if err := conn.Call(ctx, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": d.DeliveryID, "durable": true}, nil); err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitBound):
		t.Fatal("no delivery after the cut-off observation")
	}
	_ = conn.Call(ctx, "shutdown", nil, nil)
	conn.Close()
}

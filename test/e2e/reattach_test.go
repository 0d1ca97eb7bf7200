package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/client"
)

// deliveryFeed collects the mailbox/deliver notifications a listener's
// clients receive, across reconnections.
type deliveryFeed chan delivery

// handle is a dial handler; it never blocks the read loop.
func (f deliveryFeed) handle(_ *client.Client, n note) {
	var d delivery
	if n.Method == "mailbox/deliver" && json.Unmarshal(n.Params, &d) == nil {
		select {
		case f <- d:
		default:
		}
	}
}

func (f deliveryFeed) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-f:
		return d
	case <-time.After(waitBound):
		t.Fatal("no delivery")
		return delivery{}
	}
}

// openGated opens session sid on conn with limits and starts command
// after a gate, yielded at once; it returns the start's observation and
// the gate to release.
func (l *listener) openGated(ctx context.Context, conn *client.Client, sid string, limits map[string]any, command string) (obs, string) {
	t := l.t
	t.Helper()
	if err := conn.Call(ctx, "session/open", map[string]any{"sessionId": sid, "stateDir": filepath.Join(l.home, "state"), "limits": limits}, nil); err != nil {
		t.Fatal(err)
	}
	gate := fifo(t, "gate")
	var o obs
	if err := conn.Call(ctx, "exec/start", map[string]any{"sessionId": sid, "command": "read < " + gate + "; " + command, "yieldMs": 0, "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o); err != nil || o.Final {
		t.Fatalf("start: %+v %v", o, err)
	}
	return o, gate
}

func ackOn(t *testing.T, ctx context.Context, conn *client.Client, sid, id string) {
	t.Helper()
	if err := conn.Call(ctx, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": id, "durable": true}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestReattachedClientGetsPendingDeliveryAgain(t *testing.T) {
	t.Parallel()
	l := startListener(t)
	feed := make(deliveryFeed, 64)
	conn := l.dial(feed.handle)
	// Closed before the listener's cleanup, which cannot connect while a
	// client is attached.
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	sid := "reattach"
	// A short ack timeout bounds the wait should the resend go out before
	// the helper has taken the new connection (see ServeListener).
	_, gate := l.openGated(ctx, conn, sid, map[string]any{"ackTimeoutMs": 2000}, "echo kept")
	release(t, gate)
	first := feed.next(t)
	// Leave without acking or shutting down; the result waits for the next
	// client.
	conn.Close()
	conn = l.dial(feed.handle)
	again := feed.next(t)
	if again.DeliveryID != first.DeliveryID || again.Attempt < 2 || again.Observation.Output != "kept\n" {
		t.Fatalf("after reattach %+v, first %+v", again, first)
	}
	ackOn(t, ctx, conn, sid, again.DeliveryID)
	var r struct{ Discarded int }
	if err := conn.Call(ctx, "session/close", map[string]any{"sessionId": sid}, &r); err != nil || r.Discarded != 0 {
		t.Fatalf("close: %+v %v", r, err)
	}
	_ = conn.Call(ctx, "shutdown", nil, nil)
	conn.Close()
}

// A client that comes back after the resend backoff elapsed gets the
// pending delivery at once, not after an ack timeout.
func TestReattachAfterBackoffGetsResendAtOnce(t *testing.T) {
	t.Parallel()
	l := startListener(t)
	feed := make(deliveryFeed, 64)
	conn := l.dial(feed.handle)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	sid := "late"
	_, gate := l.openGated(ctx, conn, sid, map[string]any{"retryMs": 5}, "echo kept")
	release(t, gate)
	first := feed.next(t)
	conn.Close()
	if !l.waitLog("client left without shutdown", 1) {
		t.Fatal("the helper did not notice the disconnect")
	}
	// Not synchronisation but the case under test: the client comes back
	// well after the 5 ms backoff, so the resend is due the moment it
	// attaches. Shorter, the test would only pass more easily.
	time.Sleep(50 * time.Millisecond)
	conn = l.dial(feed.handle)
	again := feed.next(t)
	if again.DeliveryID != first.DeliveryID || again.Attempt != 2 {
		t.Fatalf("after reattach %+v, first %+v", again, first)
	}
	ackOn(t, ctx, conn, sid, again.DeliveryID)
	_ = conn.Call(ctx, "shutdown", nil, nil)
	conn.Close()
}

// A waiting observation whose client disconnects reads nothing and claims
// nothing: the whole output reaches the client that comes back, through
// the mailbox.
func TestObservationCutOffByDisconnectClaimsNothing(t *testing.T) {
	t.Parallel()
	l := startListener(t)
	feed := make(deliveryFeed, 64)
	conn := l.dial(feed.handle)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	sid := "cut"
	o, gate := l.openGated(ctx, conn, sid, nil, "echo cut; echo after")
	if _, err := conn.Dispatch(ctx, "exec/observe", map[string]any{"sessionId": sid, "executionId": o.Facts.ExecutionID, "waitMs": 60000}); err != nil {
		t.Fatal(err)
	}
	// Requests are handled in order: once this answers, the wait is on.
	if err := conn.Call(ctx, "exec/list", map[string]any{"sessionId": sid}, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if !l.waitLog("client left without shutdown", 1) {
		t.Fatal("the helper did not notice the disconnect")
	}
	release(t, gate)
	conn = l.dial(feed.handle)
	d := feed.next(t)
	if d.Attrs.ExecutionID != o.Facts.ExecutionID || d.Observation == nil || d.Observation.Output != "cut\nafter\n" {
		t.Fatalf("delivery %+v (observation %+v)", d, d.Observation)
	}
	ackOn(t, ctx, conn, sid, d.DeliveryID)
	_ = conn.Call(ctx, "shutdown", nil, nil)
	conn.Close()
}

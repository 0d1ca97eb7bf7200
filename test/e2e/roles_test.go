package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
)

// An observer (a panel, the command line, a ps-like tool) reads
// everything and stops with the person's authority, but what belongs to
// the agent client is refused and named: acking a delivery, speaking for
// the model's owners, starting as one of them. The delivery it tried to
// take reaches the agent when it comes back, under the same id.
func TestDaemonObserverCannotTakeTheAgentsResults(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	d.start()
	stateDir := filepath.Join(d.home, "state")
	sid := "observed"
	first := newNoteLog()
	agent, _ := d.dial(first)
	call(t, agent, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, nil)
	observer, _ := d.dial(nil)
	call(t, observer, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir, "role": "observer"}, nil)

	o, gate := startGated(t, agent, sid, d.home, "echo result", nil)
	id := o.Facts.ExecutionID
	release(t, gate)
	dl := first.waitDelivery(t, id)
	agent.Close()

	refused := func(method string, params map[string]any) {
		t.Helper()
		params["sessionId"] = sid
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		err := observer.Call(ctx, method, params, nil)
		e, ok := rpcError(err)
		if !ok || e.Code != -32001 || !strings.Contains(e.Message, "role observer") {
			t.Errorf("%s by an observer: %v, want -32001 naming the role", method, err)
		}
	}
	refused("mailbox/ack", map[string]any{"deliveryId": dl.DeliveryID, "durable": true})
	refused("owner/retire", map[string]any{})
	refused("owner/attend", map[string]any{"deliveryIds": []string{dl.DeliveryID}})
	refused("owner/state", map[string]any{"state": "idle"})
	refused("exec/start", map[string]any{"command": "true", "cwd": d.home})
	refused("monitor/start", map[string]any{"command": "true", "cwd": d.home})

	// What an observer may do: list, read, start as the person, stop.
	var lst struct{ Executions []execution.Facts }
	call(t, observer, "exec/list", map[string]any{"sessionId": sid, "as": "user"}, &lst)
	var mine obs
	call(t, observer, "exec/start", map[string]any{"sessionId": sid, "command": "exec sleep 1000", "cwd": d.home, "as": "user", "yieldMs": 0}, &mine)
	call(t, observer, "exec/stop", map[string]any{"sessionId": sid, "executionId": mine.Facts.ExecutionID, "as": "user"}, nil)
	// The command line's observer commands keep working.
	if out, errOut, code := d.run("ps", "--all"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("ps as an observer: exit %d: %s%s", code, out, errOut)
	}

	// The agent comes back: the delivery is still its own, same id.
	again := newNoteLog()
	agent2, _ := d.dial(again)
	call(t, agent2, "session/open", map[string]any{"sessionId": sid, "stateDir": stateDir}, nil)
	got := again.waitDelivery(t, id)
	if got.DeliveryID != dl.DeliveryID {
		t.Fatalf("the agent got delivery %s again as %s", dl.DeliveryID, got.DeliveryID)
	}
	call(t, agent2, "mailbox/ack", map[string]any{"sessionId": sid, "deliveryId": got.DeliveryID, "durable": true}, nil)
}

// Off a daemon the one client is the agent: role observer changes nothing.
func TestObserverRoleOffADaemonIsTheAgent(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	id := "solo"
	h.mustCall("session/open", map[string]any{"sessionId": id, "stateDir": filepath.Join(t.TempDir(), "s"), "role": "observer"}, nil)
	h.mustCall("owner/state", map[string]any{"sessionId": id, "state": "busy"}, nil)
	s := &session{h: h, id: id}
	if o := s.mustStart("echo ok", nil); o.Output != "ok\n" {
		t.Fatalf("start: %+v", o)
	}
}

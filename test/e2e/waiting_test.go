package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// everWaiting reports whether any exec/changed so far showed execution id
// waiting for input.
func (h *helper) everWaiting(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.notes {
		if n.Method != "exec/changed" {
			continue
		}
		var p struct{ Changed []execution.Facts }
		_ = json.Unmarshal(n.Params, &p)
		for _, f := range p.Changed {
			if f.ExecutionID == id && f.WaitingForInput {
				return true
			}
		}
	}
	return false
}

// inputRequests returns the INPUT_REQUESTED deliveries about id so far.
func (h *helper) inputRequests(id string) []delivery {
	var out []delivery
	for _, d := range h.deliveriesOf(id) {
		if d.Kind == execution.KindInputRequested {
			out = append(out, d)
		}
	}
	return out
}

func TestTTYPromptIsReportedWaitingOnceAndClearedByInput(t *testing.T) {
	h := startHelper(t)
	s := h.open(nil)
	began := time.Now()
	// -s: the answer is not echoed, so only the input can end the wait.
	o := s.mustStart(`read -s -p "Name? " x; echo; echo "hello $x"; read -p "More? " y; echo "bye $y"`,
		map[string]any{"tty": true, "yieldMs": 0, "label": "ask name"})
	id := o.Facts.ExecutionID
	f := h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.WaitingForInput })
	if took := time.Since(began); took > time.Second+500*time.Millisecond {
		// The goal is within a second of the prompt; the bound leaves room
		// for a loaded machine.
		t.Errorf("reported waiting after %v", took)
	}
	if f.Prompt != "Name? " || f.WaitingSince == nil {
		t.Fatalf("facts %+v: want prompt %q and waitingSince", f, "Name? ")
	}

	// One delivery, which wakes the idle root once durable.
	d := h.waitDelivery(func(d delivery) bool { return d.Kind == execution.KindInputRequested && d.Attrs.ExecutionID == id })
	if d.Attrs.Prompt != "Name? " || d.Attrs.Label != "ask name" || d.Owner != "/root" {
		t.Fatalf("delivery %+v", d)
	}
	s.ack(d.DeliveryID, true)
	h.waitNote(func(n note) bool {
		return n.Method == "session/wake" && strings.Contains(string(n.Params), d.DeliveryID)
	})

	// An observation that waits returns at once while it waits.
	t0 := time.Now()
	w := s.mustObserve(id, map[string]any{"waitMs": 20000})
	if !w.Facts.WaitingForInput || time.Since(t0) > 5*time.Second {
		t.Fatalf("waiting observation took %v: %+v", time.Since(t0), w.Facts)
	}

	// Input ends the wait (nothing is echoed: -s).
	a := s.mustObserve(id, map[string]any{"chars": "Bob\n"})
	if a.Facts.WaitingForInput || a.Facts.Prompt != "" {
		t.Fatalf("still waiting after input: %+v", a.Facts)
	}
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && !f.WaitingForInput })

	// The second prompt is a second wait, with its own delivery; a
	// waiting observation returns as soon as it begins.
	next := s.mustObserve(id, map[string]any{"waitMs": 20000})
	if !next.Facts.WaitingForInput || next.Facts.Prompt != "More? " {
		t.Fatalf("second prompt: %+v", next.Facts)
	}
	d2 := h.waitDelivery(func(d delivery) bool {
		return d.Kind == execution.KindInputRequested && d.Attrs.ExecutionID == id && d.Attrs.Prompt == "More? "
	})
	s.ack(d2.DeliveryID, true)
	out, fin := s.waitFinal(id, map[string]any{"chars": "now\n"})
	out = w.Output + a.Output + next.Output + out
	if !strings.Contains(out, "hello Bob") || !strings.Contains(out, "bye now") || fin.Facts.WaitingForInput {
		t.Fatalf("final %q %+v", out, fin.Facts)
	}
	s.barrier()
	if n := len(h.inputRequests(id)); n != 2 {
		t.Fatalf("%d INPUT_REQUESTED deliveries, want one per wait (2)", n)
	}
}

func TestPythonInputIsReportedWaiting(t *testing.T) {
	h := startHelper(t)
	s := h.open(nil)
	o := s.mustStart(`python3 -c 'x = input("Your pick [y/N]: "); print("picked", x)'`, map[string]any{"tty": true, "yieldMs": 0})
	id := o.Facts.ExecutionID
	f := h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.WaitingForInput })
	if f.Prompt != "Your pick [y/N]: " {
		t.Fatalf("prompt %q", f.Prompt)
	}
	out, fin := s.waitFinal(id, map[string]any{"chars": "y\n"})
	if !strings.Contains(out, "picked y") || fin.Facts.ExitCode == nil || *fin.Facts.ExitCode != 0 {
		t.Fatalf("final %q %+v", out, fin.Facts)
	}
}

// A yield that comes while the command waits carries the facts.
func TestYieldWhileWaitingCarriesTheFacts(t *testing.T) {
	h := startHelper(t)
	s := h.open(map[string]any{"waitingAfterMs": 200})
	o := s.mustStart(`read -p "Continue? " x`, map[string]any{"tty": true, "yieldMs": 2500})
	if o.Final || !o.Facts.WaitingForInput || o.Facts.Prompt != "Continue? " {
		t.Fatalf("yield %+v", o.Facts)
	}
	s.mustCall(t, "exec/stop", o.Facts.ExecutionID)
}

func (s *session) mustCall(t *testing.T, method, id string) {
	t.Helper()
	s.h.mustCall(method, map[string]any{"sessionId": s.id, "executionId": id}, nil)
}

func TestBusyAndSleepingCommandsAreNeverWaiting(t *testing.T) {
	h := startHelper(t)
	s := h.open(nil)
	var ids []string
	for _, c := range []string{`yes > /dev/null`, `while :; do :; done`, `sleep 100`, `cat /dev/zero > /dev/null`} {
		ids = append(ids, s.mustStart(c, map[string]any{"tty": true, "yieldMs": 0}).Facts.ExecutionID)
	}
	// A prompt started after them is reported: every one of them has been
	// quiet longer, and looked at.
	marker := s.mustStart(`read -p "Marker? " m`, map[string]any{"tty": true, "yieldMs": 0}).Facts.ExecutionID
	h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == marker && f.WaitingForInput })
	for _, id := range ids {
		// A waiting observation would return as soon as it waited: this
		// one runs out its time.
		t0 := time.Now()
		o := s.mustObserve(id, map[string]any{"waitMs": 1500})
		if o.Facts.WaitingForInput || time.Since(t0) < 1400*time.Millisecond {
			t.Errorf("%s (%s) reported waiting: %+v", id, o.Facts.Command, o.Facts)
		}
		if h.everWaiting(id) || len(h.inputRequests(id)) > 0 {
			t.Errorf("%s (%s) was reported waiting", id, o.Facts.Command)
		}
	}
	var n struct{ Stopped int }
	h.mustCall("exec/stopAll", map[string]any{"sessionId": s.id, "as": "user"}, &n)
}

// Without a terminal stdin is at EOF and there is no controlling
// terminal: a prompt fails at once instead of waiting.
func TestPipeModePromptsFailFast(t *testing.T) {
	srv := sshd.Start(t)
	h := startHelper(t)
	s := h.open(nil)
	for _, c := range []string{
		`read -p "Name? " x`,
		`python3 -c 'input("Name? ")'`,
		`python3 -c 'import getpass; getpass.getpass("Password: ")'`,
		fmt.Sprintf(`ssh -F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive -p %d nobody@127.0.0.1 true`, srv.Port),
	} {
		t0 := time.Now()
		o := s.mustStart(c, map[string]any{"yieldMs": 20000})
		if !o.Final || o.Facts.ExitCode == nil || *o.Facts.ExitCode == 0 || o.Facts.WaitingForInput {
			t.Errorf("%s: %+v %q", c, o.Facts, o.Output)
		}
		if took := time.Since(t0); took > 10*time.Second {
			t.Errorf("%s: failed only after %v", c, took)
		}
		if h.everWaiting(o.Facts.ExecutionID) {
			t.Errorf("%s: reported waiting", c)
		}
	}
}

func TestRemoteTTYPromptIsReportedWaiting(t *testing.T) {
	inModesAndHop(t, testRemoteTTYPromptIsReportedWaiting)
}

func testRemoteTTYPromptIsReportedWaiting(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	o := s.mustStart(`read -p "Remote name? " x; echo "hi $x"`, map[string]any{"tty": true, "yieldMs": 0, "cwd": tramp(srv, t.TempDir())})
	id := o.Facts.ExecutionID
	f := h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.WaitingForInput })
	if f.Prompt != "Remote name? " {
		t.Fatalf("prompt %q", f.Prompt)
	}
	d := h.waitDelivery(func(d delivery) bool { return d.Kind == execution.KindInputRequested && d.Attrs.ExecutionID == id })
	s.ack(d.DeliveryID, true)
	out, fin := s.waitFinal(id, map[string]any{"chars": "Ann\n"})
	if !strings.Contains(out, "hi Ann") || fin.Facts.WaitingForInput {
		t.Fatalf("final %q %+v", out, fin.Facts)
	}
}

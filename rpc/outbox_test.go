package rpc

import (
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A client that takes nothing is given up after the stall timeout: the
// writer waiting for room is released, and onFail is called once.
func TestOutboxStall(t *testing.T) {
	r, w := io.Pipe() // nobody reads r
	defer r.Close()
	failed := make(chan error, 2)
	o := newOutbox(w, 50*time.Millisecond, func(err error) { failed <- err })
	big := make([]byte, outboxBytes)
	if err := o.put(nil, big); err != nil {
		t.Fatal(err)
	}
	// The outbox is full: this one waits for room until the stall.
	if err := o.put(nil, []byte("x")); !errors.Is(err, errStalled) {
		t.Fatalf("put on a stalled client: %v", err)
	}
	select {
	case err := <-failed:
		if !errors.Is(err, errStalled) {
			t.Fatalf("onFail: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("onFail not called")
	}
	o.close() // returns: nothing more can be written
	if len(failed) != 0 {
		t.Fatal("onFail called twice")
	}
}

// A write error is a failure too, and a slow but reading client is not
// stalled.
func TestOutboxWriteErrorAndSlowReader(t *testing.T) {
	r, w := io.Pipe()
	failed := make(chan error, 1)
	o := newOutbox(w, time.Minute, func(err error) { failed <- err })
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 3*writeChunk))
		got <- b
	}()
	if err := o.put([]byte("h"), make([]byte, 3*writeChunk-1)); err != nil {
		t.Fatal(err)
	}
	if b := <-got; len(b) != 3*writeChunk {
		t.Fatalf("read %d bytes", len(b))
	}
	r.CloseWithError(errors.New("gone"))
	_ = o.put(nil, []byte("x"))
	if err := <-failed; err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("onFail: %v", err)
	}
}

func TestForwarderDropsProgressWhileBehind(t *testing.T) {
	var sent []string
	var behind atomic.Bool
	gate := make(chan struct{})
	f := newForwarder(func(method string, params any) {
		if method == "block" {
			<-gate
			return
		}
		p, _ := params.(ProgressParams)
		sent = append(sent, method+":"+p.Tail)
	}, behind.Load, func() {})
	f.push(&note{method: "block"}) // holds the forwarder, so what follows queues
	progress := func(exec, tail string) {
		f.push(&note{method: NotifyProgress, params: ProgressParams{SessionID: "s", ExecutionID: exec, Tail: tail}})
	}
	progress("e1", "1")
	progress("e1", "2") // replaces the queued one
	progress("e2", "1")
	f.push(&note{method: NotifySettled})
	behind.Store(true)
	progress("e3", "dropped")
	behind.Store(false)
	close(gate)
	f.close()
	want := []string{"exec/progress:2", "exec/progress:1", "exec/settled:"}
	if strings.Join(sent, " ") != strings.Join(want, " ") {
		t.Fatalf("sent %v, want %v", sent, want)
	}
}

package execution

import (
	"testing"
	"time"
)

// gatedEvents holds the sender inside Deliver until the test opens gate.
type gatedEvents struct {
	quietEvents
	entered chan Delivery
	gate    chan struct{}
}

func (g gatedEvents) Deliver(d Delivery) {
	g.entered <- d
	<-g.gate
}

// A poll that takes a result back from the mailbox may race its sender:
// the sender has chosen the delivery but not yet handed it to the client's
// queue. The withdrawal must then wait for that hand-over, or the send
// would reach the client after the poll's reply and after replies ordered
// behind it (the property test saw one after the next request's reply).
func TestWithdrawWaitsForASendUnderWay(t *testing.T) {
	ev := gatedEvents{entered: make(chan Delivery), gate: make(chan struct{})}
	s := &Session{id: "s", prefix: "t", m: &Manager{events: ev}}
	mb := newMailbox(s)
	done := make(chan struct{})
	go func() { defer close(done); mb.run() }()
	defer func() { close(ev.gate); mb.close(); <-done }()

	id, ok := mb.post(Delivery{Owner: "o", Kind: KindExecution}, nil, nil)
	if !ok {
		t.Fatal("the mailbox refused a delivery")
	}
	var sent Delivery
	select {
	case sent = <-ev.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery was never sent")
	}
	if sent.DeliveryID != id {
		t.Fatalf("sent %s, posted %s", sent.DeliveryID, id)
	}
	withdrawn := make(chan bool)
	go func() { withdrawn <- mb.withdraw(id) }()
	select {
	case <-withdrawn:
		t.Fatal("withdraw returned while the send it races was still being handed over")
	case <-time.After(100 * time.Millisecond): // bounds the wait for a wrong answer only
	}
	ev.gate <- struct{}{}
	select {
	case was := <-withdrawn:
		if !was {
			t.Fatal("the delivery in flight was not pending any more")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("withdraw never returned after the hand-over")
	}
}

package execution

// What happens to a settled execution's final result once the claim (see
// state.go) says the mailbox gets it: one delivery, its durable ack, and
// the attention it owes.

// decide makes the one delivery of a result owed to the mailbox, unless an
// observation claimed it first. obsMu keeps a concurrent poll from
// claiming while the delivery is made.
func (e *Execution) decide() {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	deciding, id := false, ""
	e.update(func(st *execState) { deciding, id = st.claim == claimDeciding, st.delivery })
	if !deciding {
		return
	}
	o, err := e.sp.PeekUnread(0)
	if err != nil {
		logf("execution %s: reading the spool: %v", e.id, err)
	}
	obs := Observation{Output: o.Text, Facts: e.Facts(), Final: true}
	f := obs.Facts
	seq := e.s.attentionTick()
	// Only a root-owned result that ended on its own may wake; a stop,
	// whoever made it, never does.
	wake := f.Owner == RootOwner && endedOnItsOwn(f.Termination)
	d := Delivery{Owner: f.Owner, DeliveryID: id, Kind: KindExecution, Attrs: executionAttrs(f), Observation: &obs}
	_, ok := e.s.mail.post(d, func(d Delivery) { e.durable(d, o.To, o.Omitted, wake, seq) }, e.dropped)
	e.update(func(st *execState) {
		if !ok {
			e.claimTo(st, claimDropped)
			return
		}
		e.claimTo(st, claimMailed)
	})
}

// dropped is called when the session closes with the delivery pending.
// obsMu orders it after decide has recorded the delivery.
func (e *Execution) dropped() {
	e.obsMu.Lock()
	defer e.obsMu.Unlock()
	e.update(func(st *execState) {
		if st.claim == claimMailed {
			e.claimTo(st, claimDropped)
		}
	})
}

// durable retires the delivery d: its range is consumed, and later
// observations repeat what it carried.
func (e *Execution) durable(d Delivery, to, omitted int64, wake bool, seq uint64) {
	e.obsMu.Lock()
	seen, moved := false, false
	e.update(func(st *execState) {
		if st.claim != claimMailed {
			return // withdrawn by the owner's poll meanwhile
		}
		e.sp.ConsumeTo(to)
		st.facts.OmittedBytes += omitted
		st.facts.Version++
		obs := Observation{Output: d.Observation.Output, Facts: e.snapshot(st), Final: true}
		st.final = &obs
		seen = st.seen
		moved = e.claimTo(st, claimDelivered)
	})
	e.obsMu.Unlock()
	if !moved {
		return
	}
	e.s.m.events.Delivered(d)
	if wake && !seen {
		e.s.owe(d.Owner, d.DeliveryID, seq)
	}
}

// endedOnItsOwn reports whether nobody stopped the execution.
func endedOnItsOwn(t Termination) bool {
	switch t {
	case Stopped, OwnerStopped, Aborted, SessionEnded:
		return false
	}
	return true
}

func executionAttrs(f Facts) DeliveryAttrs {
	return DeliveryAttrs{
		ExecutionID: f.ExecutionID, Label: f.Label, Command: f.Command, Status: f.Status,
		Termination: f.Termination, ExitCode: f.ExitCode, Signal: f.Signal, Reason: f.Reason,
	}
}

// readByOwner records that the owner's model read the final result: it
// owes no attention to it, whether its delivery is still to come or
// already made.
func (e *Execution) readByOwner() {
	delivered := ""
	e.update(func(st *execState) {
		st.seen = true
		if st.claim == claimDelivered {
			delivered = st.delivery
		}
	})
	if delivered != "" {
		e.s.Attend(e.owner, []string{delivered})
	}
}

// claimStop makes the owner's own exec/stop's reply the one claim of the
// result, unless the execution has already settled (then its claim
// stands). A stop by anyone else claims nothing: the owner still gets the
// result.
func (e *Execution) claimStop() {
	e.update(func(st *execState) {
		if st.claim == claimOpen {
			e.claimTo(st, claimStop)
		}
	})
}

// Package execution is the lifecycle of managed commands: sessions and
// their owners' authority, executions from queued to settled, lanes,
// yield, input, stop, who gets each final result (the start reply, an
// observation, a stop, the acknowledged mailbox, or nobody), the attention
// a result owes its owner, monitors, and what goes into the journal.
//
// It does not run processes itself: a process.Runner does (package process
// here, package remote on an SSH host). Bytes on disk and their views are
// package spool's, the journal's format is package transcript's, and the
// state directory's layout is internal/statedir's; this package adds
// authority and lifecycle around them.
//
// The files, in the order to read them (each a room; a newcomer can stop
// after any row and know that much):
//
//  1. The registry. manager.go (the helper's sessions: open, close,
//     the control paths every box hides), attach.go (a daemon's second
//     client attaching to an open session), session.go (one session: its
//     executions by id, listings, changes, close).
//  2. One execution. execution.go (what an execution holds), facts.go
//     (the immutable facts it answers with), state.go (its two state
//     machines, changed only through one update), strict_on.go and
//     strict_off.go (an illegal move panics in test builds).
//  3. From request to settlement. start.go (validation, analysis, lane,
//     registration), scheduler.go (lanes: readers together, a writer
//     alone), confine.go (the sandbox and limits a start was granted),
//     run.go (spawn to settlement), journal.go (the records it leaves).
//  4. Talking to a live execution. act.go (await a start, observe, stop,
//     interrupt), observe.go (yield and bounded observations), input.go
//     (terminal input), waiting.go (waiting for input), ready.go and
//     follow.go (ready conditions, listening ports), portforward.go.
//  5. Who gets the result. claim.go (the one delivery), mailbox.go
//     (acknowledged delivery), attention.go (wake marks and retirement),
//     monitor.go (monitors and their events).
//  6. After a crash or a lost host. recovery.go (what a previous helper
//     left), unknown.go (outcomes that cannot be proven).
//  7. Reaching further. remote.go (SSH targets and publication), logs.go
//     (reading and searching logs under authority), wirejson.go (facts
//     written to the wire without reflection).
package execution

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
// Files: manager.go (the helper's sessions, open and close), session.go
// (one session: start, observe, stop, list), execution.go, state.go (the
// two state machines and the one update function), run.go (spawn to
// settlement), observe.go (yield and observations), claim.go (the one
// delivery of a result), input.go, scheduler.go (lanes), mailbox.go and
// attention.go (acknowledged delivery and wake marks), monitor.go,
// journal.go (records), recovery.go (what a previous helper left),
// logs.go (reading and searching logs under authority), remote.go (SSH
// targets and publication).
package execution

package execution

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/transcript"
)

// The session's journal (transcript.jsonl) holds what a reload needs to
// rebuild every row: a spawn record made durable before the command is
// spawned, a row once it runs (with its group leader, for recovery), its
// settlement, one breadcrumb per yielded execution, notices, and lost
// records. Only the spawn record waits for the disk: a process recovery
// cannot find must never exist.

// helperStart is this helper's start time in clock ticks since boot: no
// process of an execution it spawns started before it.
var helperStart = sync.OnceValue(func() uint64 {
	t, _ := process.StartTime(os.Getpid())
	return t
})

// journalSpawn makes the execution's spawn record durable: its facts, and
// for a local command the earliest start its processes can have, so
// recovery after a crash finds them by their tag even when the helper died
// before it learnt the leader's pid. Starts at the same moment share one
// fsync. It fails when the journal cannot write now (the command must
// then not be spawned) or the execution is stopped meanwhile.
func (e *Execution) journalSpawn() error {
	f := e.Facts()
	r := factsRecord(transcript.TypeSpawn, f)
	r.Leader = &transcript.Leader{Target: f.Target}
	if e.remote == nil {
		r.Leader.StartTime = helperStart()
	}
	_, err := e.s.journal.AppendDurable(e.ctx, r)
	return err
}

// beginJournalSpawn makes the spawn record durable in the background; the
// channel gives the result.
func (e *Execution) beginJournalSpawn() chan error {
	done := make(chan error, 1)
	go func() { done <- e.journalSpawn() }()
	return done
}

// leaderOf identifies proc's group leader for recovery.
func leaderOf(f Facts, proc process.Process) *transcript.Leader {
	if f.Pid == 0 {
		return nil
	}
	l := &transcript.Leader{Pid: f.Pid, Pgid: f.Pgid, StartTime: proc.LeaderStart(), Target: f.Target}
	if f.TargetIncarnation != nil {
		l.Boot = f.TargetIncarnation.Key()
	}
	return l
}

// factsRecord is a record of type typ carrying f.
func factsRecord(typ string, f Facts) transcript.Record {
	return transcript.Record{
		Type: typ, ExecutionID: f.ExecutionID, ToolUseID: f.ToolUseID, Owner: f.Owner, Facts: factsJSON(f),
	}
}

// settledRecord is f's settled record; delivery, when set, says whether
// its delivery is pending or done.
func settledRecord(f Facts, delivery string) transcript.Record {
	r := factsRecord(transcript.TypeSettled, f)
	if delivery != "" {
		r.Attrs = map[string]any{"delivery": delivery}
	}
	return r
}

// journalRow records a running execution's row: at start, and again
// when it yields (it becomes a background row).
func (e *Execution) journalRow(f Facts, leader *transcript.Leader) {
	r := factsRecord(transcript.TypeRow, f)
	r.Leader = leader
	e.s.journal.Append(r)
}

// journalSettled records the end and, for an execution that yielded
// (a monitor's own aside), its one breadcrumb.
//
// A settlement that means a delivery says so (attrs delivery: pending),
// and a second settled record says when it stopped being pending
// (delivery: done): acknowledged, claimed by a poll, or dropped at close.
// A helper that dies in between leaves "pending" last, and the next open
// makes that delivery again.
func (e *Execution) journalSettled(f Facts, deliveryID string) {
	j := e.s.journal
	r := settledRecord(f, "")
	if deliveryID != "" {
		r.Attrs = map[string]any{"delivery": "pending", "deliveryId": deliveryID}
	}
	j.Append(r)
	if f.Yielded && e.monitor == nil {
		j.Append(breadcrumb(f))
	}
}

func breadcrumb(f Facts) transcript.Record {
	return transcript.Record{
		Type: transcript.TypeBreadcrumb, ExecutionID: f.ExecutionID, ToolUseID: f.ToolUseID, Owner: f.Owner,
		Status: string(f.Status), ExitCode: f.ExitCode, Signal: f.Signal, Label: f.Label,
		Text: transcript.Breadcrumb(f.Label, f.Command, string(f.Status), f.ExitCode, f.Signal),
	}
}

// journalNotice records a one-line notice built from attributes only.
func (s *Session) journalNotice(executionID, owner, text string, attrs map[string]any) {
	s.journal.Append(transcript.Record{
		Type: transcript.TypeNotice, ExecutionID: executionID, Owner: owner, Text: text, Attrs: attrs,
	})
}

func factsJSON(f Facts) json.RawMessage { return f.AppendJSON(nil) }

// Records returns journal records after since; see transcript.Journal.
func (s *Session) Records(since uint64, limit int) ([]transcript.Record, uint64, error) {
	recs, next, err := s.journal.Records(since, limit)
	if recs == nil {
		recs = []transcript.Record{}
	}
	return recs, next, err
}

// Checkpoint returns once every record appended so far is on disk, with
// the journal's health after trying.
func (s *Session) Checkpoint(ctx context.Context) (uint64, transcript.Health, error) {
	seq, err := s.journal.Checkpoint(ctx)
	return seq, s.journal.Health(), err
}

// JournalHealth says whether the session's journal writes.
func (s *Session) JournalHealth() transcript.Health { return s.journal.Health() }

// journalWritable refuses a start while the journal is degraded: the
// command's spawn record could not be made durable, and a command recovery
// could not find after a crash must not run. It asks the journal to try
// again at once, so the first start after the disk has room is not
// refused for long.
func (s *Session) journalWritable() error {
	h := s.journal.Health()
	if h.State == transcript.StateOK {
		return nil
	}
	s.journal.Retry()
	return fault.New(fault.IO, "the session's journal cannot be written since %s (%s): a command started now could not be found again after a crash, so none is started until the journal recovers; free space on the state directory's file system",
		h.Since, h.Error)
}

// CanRewind answers whether the conversation may be rewound or forked:
// never while an execution of the session is live, since its result would
// belong to a turn that no longer exists.
func (s *Session) CanRewind(op string) error {
	if op != "rewind" && op != "fork" {
		return fault.New(fault.InvalidParams, `operation must be "rewind" or "fork", got %q`, op)
	}
	live := s.Live()
	if len(live) == 0 {
		return nil
	}
	ids := make([]string, len(live))
	for i, f := range live {
		ids[i] = f.ExecutionID
	}
	return fault.New(fault.Refused, "cannot %s session %s while %d executions are live (%s): stop them first", op, s.id, len(live), strings.Join(ids, ", "))
}

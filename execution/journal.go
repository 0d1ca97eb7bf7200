package execution

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
	"golang.org/x/sys/unix"
)

// The session's journal (transcript.jsonl) holds what a reload needs to
// rebuild every row: a row when an execution starts (with its group
// leader, for recovery), its settlement, one breadcrumb per yielded
// execution, notices, and lost records. Appends never wait for the disk.

// leaderOf identifies proc's group leader for recovery.
func leaderOf(f Facts, proc process.Process) *transcript.Leader {
	if f.Pid == 0 {
		return nil
	}
	return &transcript.Leader{Pid: f.Pid, Pgid: f.Pgid, StartTime: proc.LeaderStart(), Target: f.Target}
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
func (e *Execution) journalSettled(f Facts, deliver bool) {
	j := e.s.journal
	delivery := ""
	if deliver {
		e.mailed.Store(true)
		delivery = "pending"
	}
	j.Append(settledRecord(f, delivery))
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

func factsJSON(f Facts) json.RawMessage {
	b, err := json.Marshal(f)
	if err != nil { // Facts has no type that fails to encode
		logf("execution %s: encoding facts: %v", f.ExecutionID, err)
		return nil
	}
	return b
}

// reclaimBudget bounds the time one open spends killing leftovers, all
// of its lost executions together: a process stuck in the kernel must not
// hold the open for long.
const reclaimBudget = 3 * time.Second

// remoteKill reclaims a lost execution's leftovers on an SSH host; see
// Manager.reclaimRemote.
type remoteKill func(cwd string, l *transcript.Leader, tag string, deadline time.Time) string

// openJournal opens the session's journal and marks every execution that
// a previous helper left without a settlement as lost, killing its
// leftover processes first where they are provably the ones it started.
// It also returns the final facts of every execution whose delivery the
// journal shows pending (the helper died before its durable ack): the
// session makes those deliveries again (see redeliver).
func openJournal(stateDir string, onHost remoteKill) (j *transcript.Journal, recovered, owed []Facts, err error) {
	j, err = transcript.Open(stateDir)
	if err != nil {
		return nil, nil, nil, fault.New(fault.IO, "opening the journal in %s: %w", stateDir, err)
	}
	recovered = []Facts{}
	deadline := time.Now().Add(reclaimBudget)
	for _, r := range j.Latest() {
		if r.Type == transcript.TypeSettled && r.Attrs["delivery"] == "pending" {
			var f Facts
			if json.Unmarshal(r.Facts, &f) == nil && f.ExecutionID != "" {
				owed = append(owed, f)
			}
			continue
		}
		if r.Type != transcript.TypeRow {
			continue
		}
		var f Facts
		if err := json.Unmarshal(r.Facts, &f); err != nil || f.ExecutionID == "" {
			f = Facts{ExecutionID: r.ExecutionID, Owner: r.Owner, ToolUseID: r.ToolUseID}
		}
		reason := "the helper that ran it ended without recording its end"
		switch {
		case r.Leader != nil:
			reason += "; " + reclaim(f.ExecutionID, f.Cwd, r.Leader, deadline, onHost)
		case f.StartedAt == nil:
			reason = "the helper that queued it ended before it started"
		}
		now := time.Now()
		f.State = Settled
		f.Termination, f.ExitCode, f.Signal, f.Reason = Lost, nil, "", reason
		f.Outcome, f.Status = Classify(Lost, nil)
		f.EndedAt = stamp(now)
		if f.StartedAt != nil {
			f.WallMs = now.Sub(f.StartedAt.Time).Milliseconds()
		}
		// The row was written at start; the spool says how much came.
		f.OutputBytes, f.OutputLines = spoolSize(filepath.Join(stateDir, "executions", f.ExecutionID+".log"))
		f.UnreadBytes = 0
		f.Version++
		j.Append(factsRecord(transcript.TypeLost, f))
		if f.Yielded && f.MonitorID == "" {
			j.Append(breadcrumb(f))
		}
		recovered = append(recovered, f)
	}
	// Each open starts from a compact journal: the latest facts of every
	// execution and every breadcrumb and notice, so it grows with the
	// executions, not with their updates.
	if err := j.Compact(); err != nil {
		logf("compacting the journal in %s: %v", stateDir, err)
	}
	return j, recovered, owed, nil
}

// spoolSize counts the bytes and lines of a raw spool file, as the spool
// itself counts them (a non-empty unterminated last line is a line).
func spoolSize(path string) (bytes, lines int64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	last := byte('\n')
	for {
		n, err := f.Read(buf)
		if n > 0 {
			bytes += int64(n)
			for _, b := range buf[:n] {
				if b == '\n' {
					lines++
				}
			}
			last = buf[n-1]
		}
		if err != nil {
			break
		}
	}
	if last != '\n' {
		lines++
	}
	return bytes, lines
}

// reclaim kills what is left of a lost execution's processes, within the
// deadline, and says what it did. Only processes proven to be the ones the
// helper started are signalled: the group of a leader whose pid and start
// time both match (checked before every signal: once the leader is gone
// the group's number could be reused), and processes carrying the
// execution's tag that started no earlier than the leader. A pid now used
// by another process is left alone, and so is one the kernel refuses to
// let us signal.
func reclaim(id, cwd string, l *transcript.Leader, deadline time.Time, onHost remoteKill) string {
	if l.Pid <= 0 || l.StartTime == 0 {
		return "no process identity was recorded"
	}
	tag := ""
	if p := prefixOf(id); p != "" {
		tag = "MEVEDEL_EXEC_TAG=" + p + "-" + id
	}
	if l.Target != "" && l.Target != "local" {
		if onHost == nil {
			return "its processes on " + l.Target + " were not checked"
		}
		return onHost(cwd, l, tag, deadline)
	}
	proven := func() int {
		if t, ok := process.StartTime(l.Pid); ok && t == l.StartTime && l.Pgid == l.Pid {
			return l.Pgid
		}
		return 0
	}
	_, pidUsed := process.StartTime(l.Pid)
	stranger := pidUsed && proven() == 0
	killed := map[int]bool{}
	refused := map[int]bool{}
	left := func() []process.Info {
		var out []process.Info
		for _, p := range process.Members(proven(), tag, l.StartTime) {
			if !refused[p.Pid] {
				out = append(out, p)
			}
		}
		return out
	}
	for ps := left(); len(ps) > 0 && time.Now().Before(deadline); ps = left() {
		if pgid := proven(); pgid > 0 {
			// The leader is alive, so the group is still the one it leads.
			_ = unix.Kill(-pgid, unix.SIGKILL)
		}
		for _, p := range ps {
			switch err := unix.Kill(p.Pid, unix.SIGKILL); err {
			case nil, unix.ESRCH:
				killed[p.Pid] = true
			default:
				refused[p.Pid] = true
			}
		}
		// Nothing tells us when a signalled process is gone: we are not
		// its parent. Look again shortly, within the deadline.
		time.Sleep(reclaimProbe)
	}
	survivors := len(left()) + len(refused)
	var parts []string
	if n := len(killed); n > 0 {
		parts = append(parts, fmt.Sprintf("its %d leftover processes were killed", n))
	}
	if survivors > 0 {
		parts = append(parts, fmt.Sprintf("%d of its processes could not be killed", survivors))
	}
	if stranger {
		parts = append(parts, fmt.Sprintf("pid %d now belongs to another process and was not signalled", l.Pid))
	}
	if len(parts) == 0 {
		return "none of its processes was left"
	}
	return strings.Join(parts, "; ")
}

// prefixOf extracts the open's id prefix from exec-PREFIX-NNNNNN.
func prefixOf(id string) string {
	parts := strings.Split(id, "-")
	if len(parts) != 3 || parts[0] != "exec" {
		return ""
	}
	return parts[1]
}

// Records returns journal records after since; see transcript.Journal.
func (s *Session) Records(since uint64, limit int) ([]transcript.Record, uint64, error) {
	recs, next, err := s.journal.Records(since, limit)
	if recs == nil {
		recs = []transcript.Record{}
	}
	return recs, next, err
}

// Checkpoint returns once every record appended so far is on disk.
func (s *Session) Checkpoint(ctx context.Context) (uint64, error) {
	return s.journal.Checkpoint(ctx)
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

// redeliver makes again the deliveries a previous helper left pending.
// The unread range the result had at settlement is read from its spool;
// once durable, the journal says so, and the owner owes attention as for
// any result that ended on its own.
func (s *Session) redeliver(owed []Facts) {
	for _, f := range owed {
		o, err := spool.RenderFile(filepath.Join(s.stateDir, "executions", f.ExecutionID+".log"),
			f.OutputBytes-f.UnreadBytes, f.OutputBytes, 0)
		if err != nil {
			logf("session %s: reading the output of %s for its delivery: %v", s.id, f.ExecutionID, err)
		}
		f.OmittedBytes += o.Omitted
		f.UnreadBytes = 0
		f.Version++
		obs := Observation{Output: o.Text, Facts: f, Final: true}
		wake := f.Owner == RootOwner && endedOnItsOwn(f.Termination)
		epoch := s.attentionEpoch()
		d := Delivery{Owner: f.Owner, Kind: KindExecution, Attrs: executionAttrs(f), Observation: &obs}
		s.mail.post(d, func(d Delivery) {
			s.journal.Append(settledRecord(f, "done"))
			if wake {
				s.owe(d.Owner, d.DeliveryID, epoch)
			}
		}, nil)
	}
}

package execution

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
	"golang.org/x/sys/unix"
)

// Recovery at session/open: what a previous helper left in the state
// directory. Executions without a recorded end are marked lost (after
// their leftover processes, proven ours, are killed), and deliveries it
// left pending are made again.

// recovery is what an open finds in a state directory.
type recovery struct {
	dir       *statedir.Dir
	journal   *transcript.Journal
	recovered []Facts           // executions marked lost now
	owed      []pendingDelivery // deliveries left pending
	owners    map[string]string // owner of every execution the journal knows
	unknown   []Facts           // unknown outcomes nobody acknowledged
}

// pendingDelivery is a delivery a previous helper left pending: the final
// facts and the id it was journaled with.
type pendingDelivery struct {
	facts Facts
	id    string
}

// recoverStateDir takes the state directory and opens its journal,
// recovering what a previous helper left unsettled.
func recoverStateDir(root string, onHost remoteKill) (*recovery, error) {
	dir, err := statedir.Take(root)
	if err != nil {
		return nil, err
	}
	rec, err := openJournal(dir.Layout, onHost)
	if err != nil {
		_ = dir.Release()
		return nil, err
	}
	// Nothing of a previous helper runs any more (recovery has ended what
	// was left): its scratch directories go, as their settlement would
	// have removed them.
	removeScratch(filepath.Join(dir.Root, statedir.ScratchDir))
	rec.dir = dir
	return rec, nil
}

// reclaimBudget bounds the time one open spends killing leftovers, all
// of its lost executions together: a process stuck in the kernel must not
// hold the open for long.
const reclaimBudget = 3 * time.Second

// reclaimLater bounds the background killing of what outlived the budget.
const reclaimLater = time.Minute

// ReclaimBudgetVar is a test hook: a duration that replaces reclaimBudget,
// so a test can make an open give up at once and see the leftovers
// killed from the background as a loaded machine would.
const ReclaimBudgetVar = "MEVEDEL_EXEC_TEST_RECLAIM_BUDGET"

func reclaimBudgetNow() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(ReclaimBudgetVar)); err == nil {
		return d
	}
	return reclaimBudget
}

// remoteKill reclaims a lost execution's leftovers on an SSH host; see
// Manager.reclaimRemote.
type remoteKill func(cwd string, l *transcript.Leader, tag string, deadline time.Time) string

// openJournal opens the session's journal and marks every execution that
// a previous helper left without a settlement as lost, killing its
// leftover processes first where they are provably the ones it started.
// It also returns every execution whose delivery the journal shows
// pending (the helper died before its durable ack): the session makes
// those deliveries again (see redeliver); and the owner of every execution,
// so an owner keeps reading its own earlier logs.
func openJournal(l statedir.Layout, onHost remoteKill) (*recovery, error) {
	j, err := transcript.Open(l.Root)
	if err != nil {
		return nil, fault.New(fault.IO, "opening the journal in %s: %w", l.Root, err)
	}
	rec := &recovery{journal: j, recovered: []Facts{}, owners: map[string]string{}}
	logs := spool.NewDir(l.Root)
	deadline := time.Now().Add(reclaimBudgetNow())
	var settled []Facts
	var foreign []string // ids that are not execution ids: never used for a path or a tag
	for _, r := range j.Latest() {
		if !validExecutionID(r.ExecutionID) {
			foreign = append(foreign, r.ExecutionID)
			continue
		}
		if r.Owner != "" {
			rec.owners[r.ExecutionID] = r.Owner
		}
		if r.Type == transcript.TypeSettled {
			var f Facts
			if json.Unmarshal(r.Facts, &f) == nil {
				f.ExecutionID = r.ExecutionID
				settled = append(settled, f)
			}
		}
		if r.Type == transcript.TypeSettled && r.Attrs["delivery"] == "pending" {
			var f Facts
			if json.Unmarshal(r.Facts, &f) == nil {
				f.ExecutionID = r.ExecutionID
				id, _ := r.Attrs["deliveryId"].(string)
				rec.owed = append(rec.owed, pendingDelivery{facts: f, id: id})
			}
			continue
		}
		if r.Type != transcript.TypeRow && r.Type != transcript.TypeSpawn {
			continue
		}
		var f Facts
		if err := json.Unmarshal(r.Facts, &f); err != nil {
			f = Facts{Owner: r.Owner, ToolUseID: r.ToolUseID}
		}
		// The record's id, checked above, is the one paths and tags are
		// made from, whatever the facts say.
		f.ExecutionID = r.ExecutionID
		reason := "the helper that ran it ended without recording its end"
		// A host found in another boot is the reason itself, as when a
		// live connection comes back to one.
		reclaimed := func() {
			if did := reclaim(f.ExecutionID, f.Cwd, r.Leader, deadline, onHost); did == ReasonTargetReplaced {
				reason = did
			} else {
				reason += "; " + did
			}
		}
		switch {
		case r.Type == transcript.TypeSpawn:
			// Durable before the spawn: its processes, if any started, carry
			// its tag.
			reason = "the helper that ran it ended while starting it"
			if r.Leader != nil {
				reclaimed()
			}
		case r.Leader != nil:
			reclaimed()
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
		f.OutputBytes, f.OutputLines = spoolSize(logs, f.ExecutionID)
		f.UnreadBytes = 0
		f.Version++
		j.Append(factsRecord(transcript.TypeLost, f))
		if f.Yielded && f.MonitorID == "" {
			j.Append(breadcrumb(f))
		}
		rec.recovered = append(rec.recovered, f)
	}
	if len(foreign) > 0 {
		logf("journal in %s: ignored %d record(s) whose execution id is not one (first %q)", l.Root, len(foreign), foreign[0])
	}
	acked := map[string]bool{}
	for since := uint64(0); ; {
		recs, next, err := j.Records(since, 1000)
		if err != nil || len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if r.Type == transcript.TypeAcknowledged && validExecutionID(r.ExecutionID) {
				acked[r.ExecutionID] = true
			}
		}
		since = next
	}
	rec.unknown = unknownFrom(settled, acked)
	// Each open starts from a compact journal: the latest facts of every
	// execution and every breadcrumb and notice, so it grows with the
	// executions, not with their updates.
	if err := j.Compact(); err != nil {
		logf("compacting the journal in %s: %v", l.Root, err)
	}
	return rec, nil
}

// validExecutionID reports whether id is an execution id as this helper
// makes them (exec-<prefix>-<number>): only such an id may name a log or a
// tag. A journal is data on disk, and "../.." is not an id.
func validExecutionID(id string) bool {
	rest, ok := strings.CutPrefix(id, "exec-")
	if !ok {
		return false
	}
	prefix, n, ok := strings.Cut(rest, "-")
	if !ok || prefix == "" || n == "" || len(prefix) > 32 || len(n) > 20 {
		return false
	}
	for _, c := range prefix {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// recoveryReadMax bounds how much of one lost execution's log recovery
// reads to count its lines: a planted huge file costs at most this.
const recoveryReadMax = 256 << 20

// spoolSize counts the bytes and lines of a lost execution's log, as the
// spool itself counts them (a non-empty unterminated last line is a line).
// The log is opened beneath the state directory the way every reader opens
// one: no symbolic link followed, never blocking on a FIFO, only a regular
// file with one link. Anything else counts as no output, and is logged.
// Lines are counted over at most recoveryReadMax bytes.
func spoolSize(logs *spool.Dir, id string) (bytes, lines int64) {
	v, err := logs.Open(statedir.LogName(id))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && fault.KindOf(err) != fault.NotFound {
			logf("recovery: not counting the output of %s: %v", id, err)
		}
		return 0, 0
	}
	defer v.Close()
	bytes = v.Size()
	r := io.LimitReader(v.Reader(), recoveryReadMax)
	buf := make([]byte, 256<<10)
	last := byte('\n')
	for {
		n, err := r.Read(buf)
		if n > 0 {
			for _, b := range buf[:n] {
				if b == '\n' {
					lines++
				}
			}
			last = buf[n-1]
		}
		if err != nil {
			if err != io.EOF {
				logf("recovery: reading the output of %s: %v", id, err)
			}
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
	tag := statedir.Tag(id)
	if (l.Pid <= 0 && tag == "") || (l.StartTime == 0 && (l.Target == "" || l.Target == "local")) {
		return "no process identity was recorded"
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
	// What one sweep killed and what refused to be signalled (another
	// user's process): the open's own, and the background's after it.
	type record struct{ killed, refused map[int]bool }
	left := func(r record) []process.Info {
		var out []process.Info
		for _, p := range process.Members(proven(), tag, l.StartTime) {
			if !r.refused[p.Pid] {
				out = append(out, p)
			}
		}
		return out
	}
	// sweep kills ps until none is left or end passes, and returns what
	// is left.
	sweep := func(r record, ps []process.Info, end time.Time) []process.Info {
		for ; len(ps) > 0 && time.Now().Before(end); ps = left(r) {
			if pgid := proven(); pgid > 0 {
				// The leader is alive, so the group is still the one it leads.
				_ = unix.Kill(-pgid, unix.SIGKILL)
			}
			for _, p := range ps {
				switch err := unix.Kill(p.Pid, unix.SIGKILL); err {
				case nil, unix.ESRCH:
					r.killed[p.Pid] = true
				default:
					r.refused[p.Pid] = true
				}
			}
			// Nothing tells us when a signalled process is gone: we are
			// not its parent. Look again shortly, within the bound.
			time.Sleep(probeMax)
		}
		return ps
	}
	open := record{killed: map[int]bool{}, refused: map[int]bool{}}
	remaining := sweep(open, left(open), deadline)
	if len(remaining) > 0 {
		// The open does not wait longer, but the leftovers are not left:
		// on a machine too loaded to see them die within the budget,
		// they are killed from the background until they are gone.
		later := record{killed: map[int]bool{}, refused: maps.Clone(open.refused)}
		go sweep(later, remaining, time.Now().Add(reclaimLater))
	}
	killed, refused := open.killed, open.refused
	var parts []string
	if n := len(killed); n > 0 {
		parts = append(parts, fmt.Sprintf("its %d leftover processes were killed", n))
	}
	if n := len(remaining); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of them were still alive when the session opened and are killed in the background", n))
	}
	if n := len(refused); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of its processes could not be killed", n))
	}
	if stranger {
		parts = append(parts, fmt.Sprintf("pid %d now belongs to another process and was not signalled", l.Pid))
	}
	if len(parts) == 0 {
		return "none of its processes was left"
	}
	return strings.Join(parts, "; ")
}

// redeliver makes again the deliveries a previous helper left pending.
// The unread range the result had at settlement is read from its spool;
// once durable, the journal says so. It keeps its journaled id and owes no
// attention: recovery never wakes.
func (s *Session) redeliver(owed []pendingDelivery) {
	for _, r := range owed {
		f := r.facts
		o, err := spool.RenderFile(s.stateDir.LogPath(f.ExecutionID),
			f.OutputBytes-f.UnreadBytes, f.OutputBytes, 0)
		if err != nil {
			logf("session %s: reading the output of %s for its delivery: %v", s.id, f.ExecutionID, err)
		}
		f.OmittedBytes += o.Omitted
		f.UnreadBytes = 0
		f.Version++
		obs := Observation{Output: o.Text, Facts: f, Final: true}
		// The same id as before the crash, so a client that had already
		// made it durable recognises it; and no wake: the person may have
		// retired that attention, and the agent's turn is long gone.
		d := Delivery{Owner: f.Owner, DeliveryID: r.id, Kind: KindExecution, Attrs: executionAttrs(f), Observation: &obs}
		s.mail.post(d, func(d Delivery) {
			s.journal.Append(settledRecord(f, "done"))
			s.m.events.Delivered(d)
		}, nil)
	}
}

// Package transcript keeps a session's durable journal: one JSON record a
// line in <stateDir>/transcript.jsonl, for execution rows, settlements,
// completion breadcrumbs, notices and lost markers. It is what Emacs
// replays to rebuild its rows after a redraw, a reload or a compaction, and
// what the next open reads to find executions a crash left unsettled. It is
// not a process registry and knows nothing of processes.
//
// Append is called on the request path, so it only encodes the record and
// queues it; one writer goroutine per journal owns the file, writes what is
// queued, and fsyncs at Checkpoint, at Sync, at Close and at most
// SyncInterval after an unsynced write. Sync is the durable path: callers
// that wait at once share one write and one fsync (group commit).
//
// A record is kept in memory only until it is durable; Records, Latest and
// Compact read the file for everything older. When a write or an fsync
// fails (a full disk), the journal is degraded: the records stay queued,
// the writer retries with backoff, logs the failure and the recovery once
// per episode, and catches up when the disk takes them again. Health says
// which.
package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// FileName is the journal's name inside the state directory.
const FileName = "transcript.jsonl"

// DefaultLimit is the page size of Records when it is given limit <= 0.
const DefaultLimit = 1000

// SyncInterval bounds how long written records may stay unsynced when
// nobody asks for a checkpoint. Open reads it once, so a test may shorten
// it before opening.
var SyncInterval = 2 * time.Second

// Backoff of a degraded journal's retries: the first wait, doubled after
// each failed attempt up to the longest. Open reads them once.
var (
	RetryFirst = 50 * time.Millisecond
	RetryMax   = 500 * time.Millisecond
)

// indexEvery is how many records apart the in-memory index marks a file
// offset, so Records starts reading near since instead of at the top.
const indexEvery = 64

// ErrClosed is the error of Checkpoint, Sync, Compact and Records after
// Close, and the error Err reports once an Append after Close dropped a
// record.
var ErrClosed error = &fault.Error{Kind: fault.Unavailable, Msg: "transcript: journal closed"}

// Journal states, as Health reports them.
const (
	StateOK       = "ok"       // everything appended reaches the file
	StateDegraded = "degraded" // writes fail; records wait in memory and are retried
)

// Health is the journal's state, as session/open and transcript/checkpoint
// report it.
type Health struct {
	State string `json:"state"` // StateOK or StateDegraded
	// Error is the last failure of a degraded journal.
	Error string `json:"error,omitempty"`
	// Since is when the degraded episode began (RFC 3339 UTC, ms).
	Since string `json:"since,omitempty"`
	// Pending counts the records of a degraded journal waiting in memory.
	Pending int `json:"pending,omitempty"`
}

// Journal is the durable journal of one session.
type Journal struct {
	path     string        // immutable
	dir      string        // immutable
	interval time.Duration // immutable; SyncInterval at Open
	first    time.Duration // immutable; RetryFirst at Open
	longest  time.Duration // immutable; RetryMax at Open

	kick  chan struct{} // buffered 1: Append's nudge to the writer
	nudge chan struct{} // buffered 1: Retry's nudge to a degraded writer
	reqs  chan request  // Sync, Checkpoint and Compact, served by the writer in order
	stop  chan struct{} // closed once, by Close
	done  chan struct{} // closed once, when the writer has exited

	// rmu lets readers read the file while the writer appends to it; the
	// writer takes it to cut the file back, to swap it at compaction and
	// to close it. Never taken while holding mu.
	rmu sync.RWMutex
	f   *os.File // written by the writer under rmu; nil once closed

	mu       sync.Mutex
	pending  []entry       // guarded by mu; every record not yet durable, in seq order
	seq      uint64        // guarded by mu; the last seq assigned
	durable  uint64        // guarded by mu; every record up to it is fsynced
	fileEnd  int64         // guarded by mu; the file holds whole records up to this offset
	fileLast uint64        // guarded by mu; the seq of the last record in the file
	index    []mark        // guarded by mu; every indexEvery-th record of the file
	counted  int           // guarded by mu; records written since the last mark
	changed  chan struct{} // guarded by mu; closed and replaced at each fsync and each failure
	down     *episode      // guarded by mu; the degraded episode, nil when healthy
	fsyncs   uint64        // guarded by mu; good fsyncs of records, for tests
	encErr   error         // guarded by mu; the first record that could not be encoded
	dropErr  error         // guarded by mu; set when an Append after Close dropped a record
	closed   bool          // guarded by mu

	// Owned by the writer goroutine once it runs (by Open before).
	syncedEnd int64 // fileEnd at the last good fsync
	unsynced  bool  // written but not yet fsynced
	repair    bool  // a failed write or fsync left the file's tail unknown
	newline   bool  // that tail could not be cut off: start the next write on a fresh line
	backoff   time.Duration

	// afterSnapshot, when set (tests only, before the writer starts), runs
	// on the writer in Compact once it has taken its snapshot.
	afterSnapshot func()
}

// entry is one queued record: its seq and its encoded line.
type entry struct {
	seq  uint64 // immutable
	line []byte // immutable; without the newline
}

// mark says that the record with seq starts at off in the file.
type mark struct {
	seq uint64
	off int64
}

// episode is one stretch of failing writes.
type episode struct {
	err      error
	since    time.Time
	failures int
}

type request struct {
	compact bool
	upTo    uint64      // Sync: the seq that must be durable
	reply   chan result // buffered 1, so the writer never waits for a caller that gave up
}

type result struct {
	seq uint64
	err error
}

// Open opens (creating it 0600 when missing) the journal in dir, which must
// exist and belong to the caller. A torn last line, left by a crash in the
// middle of a write, is dropped and cut off the file; an unreadable line
// elsewhere is skipped. Both are logged to stderr, neither is fatal.
func Open(dir string) (*Journal, error) {
	j, err := newJournal(dir)
	if err != nil {
		return nil, err
	}
	go j.run()
	return j, nil
}

// newJournal opens and reads the file; the caller starts the writer.
func newJournal(dir string) (*Journal, error) {
	path := filepath.Join(dir, FileName)
	removeStaleTemps(dir)
	// O_NOFOLLOW: never write through a planted symlink.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, ioErr("open", path, err)
	}
	j, err := load(dir, path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// load reads the open file into a journal whose writer is not started yet.
// Only the index of the file stays in memory.
func load(dir, path string, f *os.File) (*Journal, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, ioErr("stat", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fault.New(fault.IO, "transcript: %s is not a regular file", path)
	}
	// Records hold commands and their facts: private whatever the umask
	// or an earlier mode said.
	if err := f.Chmod(0o600); err != nil {
		return nil, ioErr("chmod", path, err)
	}
	l, err := index(f)
	if err != nil {
		return nil, ioErr("read", path, err)
	}
	if len(l.bad) > 0 {
		log.Printf("transcript: %s: skipped %d unreadable line(s), first at line %d", path, len(l.bad), l.bad[0])
	}
	if l.end < l.size {
		log.Printf("transcript: %s: dropped a torn last line (%d bytes at line %d), left by an interrupted write", path, l.size-l.end, l.tornLine)
		if err := f.Truncate(l.end); err != nil {
			return nil, ioErr("truncate", path, err)
		}
	}
	// What an earlier run wrote may still be only in the page cache, and a
	// new file's name only in its directory's: make both durable before
	// reporting any of it as such.
	if err := f.Sync(); err != nil {
		return nil, ioErr("sync", path, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	j := &Journal{
		path:      path,
		dir:       dir,
		interval:  SyncInterval,
		first:     RetryFirst,
		longest:   RetryMax,
		kick:      make(chan struct{}, 1),
		nudge:     make(chan struct{}, 1),
		reqs:      make(chan request),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		f:         f,
		seq:       l.last,
		durable:   l.last,
		fileEnd:   l.end,
		fileLast:  l.last,
		index:     l.marks,
		counted:   l.count % indexEvery,
		changed:   make(chan struct{}),
		syncedEnd: l.end,
	}
	if j.interval <= 0 {
		j.interval = 2 * time.Second
	}
	if j.first <= 0 {
		j.first = 50 * time.Millisecond
	}
	j.longest = max(j.longest, j.first)
	return j, nil
}

// Path returns the journal file's path.
func (j *Journal) Path() string { return j.path }

// Append adds r to the journal and returns its seq. It sets Seq (one more
// than the last record's, across reopens) and At when empty; the record is
// encoded at once, so nothing r refers to is kept. It never waits for the
// disk: the record is queued for the writer and visible to Records at
// once. After Close the record is dropped, 0 is returned and Err reports
// it.
func (j *Journal) Append(r Record) uint64 {
	if r.At == "" {
		r.At = stamp(now())
	}
	j.mu.Lock()
	if j.closed {
		if j.dropErr == nil {
			j.dropErr = fault.New(fault.Unavailable, "transcript: record dropped: %w", ErrClosed)
		}
		j.mu.Unlock()
		return 0
	}
	j.seq++
	r.Seq = j.seq
	line, err := json.Marshal(r)
	if err != nil {
		// Only a caller's malformed facts or attrs get here. The record
		// cannot be written or read back; keep the journal going and say
		// so.
		if j.encErr == nil {
			j.encErr = fault.New(fault.IO, "transcript: encode record %d: %w", r.Seq, err)
		}
		j.mu.Unlock()
		return r.Seq
	}
	j.pending = append(j.pending, entry{seq: r.Seq, line: line})
	j.mu.Unlock()
	select {
	case j.kick <- struct{}{}:
	default: // already nudged; the writer takes the whole queue
	}
	return r.Seq
}

// AppendDurable appends r and returns once it is written and fsynced. It
// fails, with the record still queued, when the journal cannot make it
// durable now (see Health), is closed, or ctx ends first. Concurrent
// callers share one fsync.
func (j *Journal) AppendDurable(ctx context.Context, r Record) (uint64, error) {
	seq := j.Append(r)
	if seq == 0 {
		return 0, ErrClosed
	}
	_, err := j.call(ctx, request{upTo: seq})
	return seq, err
}

// Records returns the records with a seq above since (0: from the start),
// at most limit of them (DefaultLimit when limit <= 0), in seq order,
// including ones not yet written. next is the seq of the last one returned,
// or since when none is: pass it as since to continue; no records means
// caught up. Records compacted away leave gaps in the seqs. Durable
// records are read from the file.
func (j *Journal) Records(since uint64, limit int) (recs []Record, next uint64, err error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	err = j.read(since, func(r Record) bool {
		recs = append(recs, r)
		return len(recs) < limit
	})
	if err != nil {
		return nil, since, err
	}
	if len(recs) == 0 {
		return nil, since, nil
	}
	return recs, recs[len(recs)-1].Seq, nil
}

// read calls fn with every record above since, in seq order, until fn
// returns false: those in the file, then those only queued.
func (j *Journal) read(since uint64, fn func(Record) bool) error {
	j.rmu.RLock()
	defer j.rmu.RUnlock()
	if j.f == nil {
		return ErrClosed
	}
	j.mu.Lock()
	end, last := j.fileEnd, j.fileLast
	var off int64
	if i := sort.Search(len(j.index), func(i int) bool { return j.index[i].seq > since }); i > 0 {
		off = j.index[i-1].off
	}
	var queued []entry
	for _, e := range j.pending {
		if e.seq > last && e.seq > since {
			queued = append(queued, e)
		}
	}
	j.mu.Unlock()
	more := true
	if since < last {
		err := scan(j.f, off, end, since, func(r Record, _ []byte) bool {
			more = fn(r)
			return more
		})
		if err != nil {
			return ioErr("read", j.path, err)
		}
	}
	for _, e := range queued {
		if !more {
			break
		}
		var r Record
		if json.Unmarshal(e.line, &r) == nil {
			more = fn(r)
		}
	}
	return nil
}

// Latest returns, in the order executions first appear, the latest
// record carrying each execution's facts (spawn, row, settled or lost):
// where every execution stands.
func (j *Journal) Latest() []Record {
	at := make(map[string]int) // execution → index in out
	var out []Record
	err := j.read(0, func(r Record) bool {
		id := r.ExecutionID
		if id == "" || !hasFacts(r.Type) {
			return true
		}
		if i, ok := at[id]; ok {
			out[i] = r
			return true
		}
		at[id] = len(out)
		out = append(out, r)
		return true
	})
	if err != nil {
		log.Printf("transcript: %v", err)
	}
	return out
}

// Unsettled returns the latest spawn or row of each execution that has
// neither a settled nor a lost record after it: what a crash left running.
func (j *Journal) Unsettled() []Record {
	var out []Record
	for _, r := range j.Latest() {
		if r.Type == TypeRow || r.Type == TypeSpawn {
			out = append(out, r)
		}
	}
	return out
}

// Checkpoint returns once everything appended before the call is written
// and fsynced, with the seq up to which the file is durable. It fails when
// the journal cannot write (see Health), when a record could not be
// encoded (see Err), when it is closed, or when ctx ends first.
func (j *Journal) Checkpoint(ctx context.Context) (uint64, error) {
	j.mu.Lock()
	upTo, encErr := j.seq, j.encErr
	j.mu.Unlock()
	seq, err := j.call(ctx, request{upTo: upTo})
	if err == nil {
		err = encErr
	}
	return seq, err
}

// Retry asks a degraded journal to try writing now rather than at its next
// backoff step; it does not wait.
func (j *Journal) Retry() {
	select {
	case j.nudge <- struct{}{}:
	default:
	}
}

// Health reports whether the journal writes, and if not since when and why.
func (j *Journal) Health() Health {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.down == nil {
		return Health{State: StateOK}
	}
	return Health{State: StateDegraded, Error: j.down.err.Error(), Since: stamp(j.down.since), Pending: len(j.pending)}
}

// Compact rewrites the file keeping, per execution, only its latest
// spawn, row, settled or lost record, and every other record
// (breadcrumbs, notices). Seqs are kept, so the kept records leave gaps,
// and the next seq does not change. The new file replaces the old one
// atomically, and Appends made meanwhile are queued and land in the new
// file.
func (j *Journal) Compact() error {
	_, err := j.call(context.Background(), request{compact: true})
	return err
}

// call hands a request to the writer and waits for its answer.
func (j *Journal) call(ctx context.Context, req request) (uint64, error) {
	j.mu.Lock()
	closed, durable := j.closed, j.durable
	j.mu.Unlock()
	if closed {
		return durable, ErrClosed
	}
	req.reply = make(chan result, 1)
	select {
	case j.reqs <- req:
	case <-j.done:
		return durable, ErrClosed
	case <-ctx.Done():
		return durable, context.Cause(ctx)
	}
	select {
	case res := <-req.reply:
		return res.seq, res.err
	case <-ctx.Done():
		return durable, context.Cause(ctx)
	}
}

// Err returns what keeps the journal from holding every record appended:
// a record that could not be encoded, a record dropped after Close
// (ErrClosed), or the failure of a degraded journal (kind io).
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.encErr != nil:
		return j.encErr
	case j.dropErr != nil:
		return j.dropErr
	case j.down != nil:
		return j.down.err
	}
	return nil
}

// Close writes and fsyncs what is queued, stops the writer and closes the
// file. It returns Err; records a degraded journal still could not write
// are lost, and logged. Closing twice is harmless.
func (j *Journal) Close() error {
	j.mu.Lock()
	if !j.closed {
		j.closed = true
		close(j.stop)
	}
	j.mu.Unlock()
	<-j.done
	return j.Err()
}

// run is the writer goroutine: the only user of the file after Open.
func (j *Journal) run() {
	defer close(j.done)
	tick := time.NewTicker(j.interval)
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	armed := false
	for {
		select {
		case <-j.kick:
			// While degraded, records wait for the next retry: a flood of
			// appends must not become a flood of failing writes.
			if !j.degraded() {
				_ = j.flush(false)
			}
		case <-tick.C:
			if !j.degraded() {
				_ = j.flush(true)
			}
		case <-retry.C:
			armed = false
			_ = j.flush(true)
		case <-j.nudge:
			if j.degraded() {
				_ = j.flush(true)
			}
		case req := <-j.reqs:
			var res result
			if req.compact {
				res.err = j.compact()
			} else {
				j.mu.Lock()
				ok := j.durable >= req.upTo && j.down == nil
				j.mu.Unlock()
				if !ok {
					res.err = j.flush(true)
				}
			}
			j.mu.Lock()
			res.seq = j.durable
			j.mu.Unlock()
			req.reply <- res
		case <-j.stop:
			// Close set closed before closing stop, so nothing more is queued.
			if err := j.flush(true); err != nil {
				j.mu.Lock()
				n := len(j.pending)
				j.mu.Unlock()
				log.Printf("transcript: %s: closed with %d record(s) that could not be written: %v", j.path, n, err)
			}
			j.rmu.Lock()
			if err := j.f.Close(); err != nil {
				j.failed(ioErr("close", j.path, err))
			}
			j.f = nil
			j.rmu.Unlock()
			return
		}
		// Back off while degraded; a healthy writer needs no timer.
		switch {
		case j.degraded() && !armed:
			if j.backoff == 0 {
				j.backoff = j.first
			} else {
				j.backoff = min(2*j.backoff, j.longest)
			}
			retry.Reset(j.backoff)
			armed = true
		case !j.degraded():
			j.backoff = 0
			if armed {
				retry.Stop()
				armed = false
			}
		}
	}
}

func (j *Journal) degraded() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.down != nil
}

// flush writes every queued record and, with sync (or while degraded,
// where only a durable write ends the episode), fsyncs. A failure starts or
// continues a degraded episode; a success ends one.
func (j *Journal) flush(sync bool) error {
	err := j.write()
	if err == nil && (sync || j.degraded()) {
		err = j.sync()
	}
	if err != nil {
		j.failed(err)
		return err
	}
	j.recovered()
	return nil
}

// write appends every queued record that is not in the file yet, in one
// write.
func (j *Journal) write() error {
	if j.repair {
		if err := j.cutTail(); err != nil {
			return err
		}
	}
	j.mu.Lock()
	i := sort.Search(len(j.pending), func(i int) bool { return j.pending[i].seq > j.fileLast })
	// Appends only add past len, and only this goroutine trims: the
	// batch's entries do not change under it.
	batch := j.pending[i:]
	start, counted := j.fileEnd, j.counted
	j.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	size := 0
	for _, e := range batch {
		size += len(e.line) + 1
	}
	buf := make([]byte, 0, size+1)
	if j.newline {
		buf = append(buf, '\n')
	}
	var marks []mark
	for _, e := range batch {
		if counted == 0 {
			marks = append(marks, mark{e.seq, start + int64(len(buf))})
		}
		counted = (counted + 1) % indexEvery
		buf = append(buf, e.line...)
		buf = append(buf, '\n')
	}
	// One write of whole lines: a killed helper then loses nothing the
	// kernel has, and the fsync only decides about a machine crash.
	if _, err := j.f.Write(buf); err != nil {
		// Part of it may have landed: cut it off before the next attempt.
		j.repair = true
		return ioErr("write", j.path, err)
	}
	j.newline = false
	j.unsynced = true
	j.mu.Lock()
	j.fileEnd = start + int64(len(buf))
	j.fileLast = batch[len(batch)-1].seq
	j.index = append(j.index, marks...)
	j.counted = counted
	j.mu.Unlock()
	return nil
}

// sync fsyncs written records, if any, publishes the durable seq and lets
// go of the records it covers.
func (j *Journal) sync() error {
	if !j.unsynced {
		return nil
	}
	if err := j.f.Sync(); err != nil {
		// After a failed fsync the kernel may have dropped the dirty
		// pages: write everything since the last good one again.
		j.mu.Lock()
		j.fileEnd, j.fileLast = j.syncedEnd, j.durable
		j.index = trimIndex(j.index, j.syncedEnd)
		j.counted = 0 // the next written record gets a mark
		j.mu.Unlock()
		j.unsynced = false
		j.repair = true
		return ioErr("sync", j.path, err)
	}
	j.unsynced = false
	j.mu.Lock()
	j.syncedEnd = j.fileEnd
	j.durable = j.fileLast
	j.fsyncs++
	k := sort.Search(len(j.pending), func(i int) bool { return j.pending[i].seq > j.durable })
	// A fresh slice, so the queue's backing array (grown while the disk
	// was slow or full) does not outlive the records.
	j.pending = append([]entry(nil), j.pending[k:]...)
	j.broadcast()
	j.mu.Unlock()
	return nil
}

// cutTail cuts the file back to its last whole record after a failed
// write or fsync. When even that fails, the tail stays as an unreadable
// line that readers skip, and the next write starts on a fresh line.
func (j *Journal) cutTail() error {
	j.rmu.Lock()
	defer j.rmu.Unlock()
	j.mu.Lock()
	end := j.fileEnd
	j.mu.Unlock()
	if err := j.f.Truncate(end); err == nil {
		j.repair = false
		return nil
	}
	st, err := j.f.Stat()
	if err != nil {
		return ioErr("stat", j.path, err)
	}
	if st.Size() > end {
		j.newline = true
		j.mu.Lock()
		j.fileEnd = st.Size()
		j.mu.Unlock()
	}
	j.repair = false
	return nil
}

// failed starts a degraded episode, or counts one more failure of the
// current one; only the start is logged.
func (j *Journal) failed(err error) {
	j.mu.Lock()
	first := j.down == nil
	if first {
		j.down = &episode{since: now()}
	}
	j.down.err = err
	j.down.failures++
	n := len(j.pending)
	j.broadcast()
	j.mu.Unlock()
	if first {
		log.Printf("%v; the journal is degraded: %d record(s) wait in memory and writes are retried until they succeed", err, n)
	}
}

// recovered ends a degraded episode: everything that waited is durable.
func (j *Journal) recovered() {
	j.mu.Lock()
	ep := j.down
	if ep != nil {
		j.down = nil
		j.broadcast()
	}
	j.mu.Unlock()
	if ep != nil {
		log.Printf("transcript: %s: writes recovered after %v and %d failed attempt(s); every waiting record is written", j.path, now().Sub(ep.since).Round(time.Millisecond), ep.failures)
	}
}

// broadcast wakes whoever waits for the durable seq or the health to
// change. Called with mu held.
func (j *Journal) broadcast() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// trimIndex drops the marks at or past end.
func trimIndex(ix []mark, end int64) []mark {
	k := sort.Search(len(ix), func(i int) bool { return ix[i].off >= end })
	return ix[:k]
}

// removeStaleTemps removes compaction temp files a crash left behind.
func removeStaleTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return ioErr("open", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return ioErr("sync", dir, err)
	}
	return nil
}

func ioErr(op, path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fault.New(fault.IO, "transcript: %s %s: %w", op, path, err)
}

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
	syncedEnd int64  // fileEnd at the last good fsync
	unsynced  bool   // written but not yet fsynced
	wbuf      []byte // the last write's buffer, for the next
	repair    bool   // a failed write or fsync left the file's tail unknown
	newline   bool   // that tail could not be cut off: start the next write on a fresh line
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

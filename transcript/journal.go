// Package transcript keeps a session's durable journal: one JSON record a
// line in <stateDir>/transcript.jsonl, for execution rows, settlements,
// completion breadcrumbs, notices and lost markers. It is what Emacs
// replays to rebuild its rows after a redraw, a reload or a compaction, and
// what the next open reads to find executions a crash left unsettled. It is
// not a process registry and knows nothing of processes.
//
// Append is called on the request path, so it only encodes the record and
// queues it; one writer goroutine per journal owns the file, writes what is
// queued, and fsyncs at Checkpoint, at Close and at most SyncInterval after
// an unsynced write.
//
// Every record is also kept in memory, so Records, Unsettled and Compact
// never read the file. That is cheap because a session has a few records per
// execution; Compact keeps it that way over long sessions.
package transcript

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
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

// ErrClosed is the error of Checkpoint and Compact after Close, and the
// error Err reports once an Append after Close dropped a record.
var ErrClosed error = &fault.Error{Kind: fault.Unavailable, Msg: "transcript: journal closed"}

// Journal is the durable journal of one session.
type Journal struct {
	path     string        // immutable
	dir      string        // immutable
	interval time.Duration // immutable; SyncInterval at Open

	kick chan struct{} // buffered 1: Append's nudge to the writer
	reqs chan request  // Checkpoint and Compact, served by the writer in order
	stop chan struct{} // closed once, by Close
	done chan struct{} // closed once, when the writer has exited

	mu      sync.Mutex
	recs    []entry       // guarded by mu; every record in seq order, written or not
	pending []entry       // guarded by mu; appended, not yet taken by the writer
	seq     uint64        // guarded by mu; the last seq assigned
	durable uint64        // guarded by mu; every record up to it is fsynced
	synced  chan struct{} // guarded by mu; closed and replaced at each fsync, so tests can wait for one
	err     error         // guarded by mu; the first failure
	closed  bool          // guarded by mu

	// Owned by the writer goroutine once it runs (by Open before).
	f        *os.File
	bw       *bufio.Writer
	written  uint64 // the last seq handed to the file
	unsynced bool   // written but not yet fsynced
	failed   bool   // a write failed: the file's end is unknown, so write nothing more

	// afterSnapshot, when set (tests only, before the writer starts), runs
	// on the writer in Compact once it has taken its snapshot.
	afterSnapshot func()
}

// entry is one record with its encoded line.
type entry struct {
	rec  Record // immutable; handed out only as clones
	line []byte // immutable; without the newline; nil when it could not be encoded
}

type request struct {
	compact bool
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
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, ioErr("read", path, err)
	}
	l := parse(data)
	if len(l.bad) > 0 {
		log.Printf("transcript: %s: skipped %d unreadable line(s), first at line %d", path, len(l.bad), l.bad[0])
	}
	if l.end < len(data) {
		log.Printf("transcript: %s: dropped a torn last line (%d bytes at line %d), left by an interrupted write", path, len(data)-l.end, l.tornLine)
		if err := f.Truncate(int64(l.end)); err != nil {
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
		path:     path,
		dir:      dir,
		interval: SyncInterval,
		kick:     make(chan struct{}, 1),
		reqs:     make(chan request),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		recs:     l.ents,
		synced:   make(chan struct{}),
		f:        f,
		bw:       bufio.NewWriter(f),
	}
	if n := len(l.ents); n > 0 {
		j.seq = l.ents[n-1].rec.Seq
	}
	j.durable, j.written = j.seq, j.seq
	if j.interval <= 0 {
		j.interval = 2 * time.Second
	}
	return j, nil
}

// Path returns the journal file's path.
func (j *Journal) Path() string { return j.path }

// Append adds r to the journal and returns its seq. It sets Seq (one more
// than the last record's, across reopens) and At when empty, and copies
// everything r refers to. It never waits for the disk: the record is queued
// for the writer and visible to Records at once. After Close the record is
// dropped, 0 is returned and Err reports it.
func (j *Journal) Append(r Record) uint64 {
	r = r.clone()
	if r.At == "" {
		r.At = stamp(now())
	}
	j.mu.Lock()
	if j.closed {
		if j.err == nil {
			j.err = fault.New(fault.Unavailable, "transcript: record dropped: %w", ErrClosed)
		}
		j.mu.Unlock()
		return 0
	}
	j.seq++
	r.Seq = j.seq
	line, err := json.Marshal(r)
	if err != nil {
		// Only a caller's malformed facts or attrs get here. Keep the
		// record visible and the journal going, and say it is not durable.
		line = nil
		if j.err == nil {
			j.err = fault.New(fault.IO, "transcript: encode record %d: %w", r.Seq, err)
		}
	}
	e := entry{rec: r, line: line}
	j.recs = append(j.recs, e)
	j.pending = append(j.pending, e)
	j.mu.Unlock()
	select {
	case j.kick <- struct{}{}:
	default: // already nudged; the writer takes the whole queue
	}
	return r.Seq
}

// Records returns the records with a seq above since (0: from the start),
// at most limit of them (DefaultLimit when limit <= 0), in seq order,
// including ones not yet written. next is the seq of the last one returned,
// or since when none is: pass it as since to continue; no records means
// caught up. Records compacted away leave gaps in the seqs.
func (j *Journal) Records(since uint64, limit int) (recs []Record, next uint64, err error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	i := sort.Search(len(j.recs), func(i int) bool { return j.recs[i].rec.Seq > since })
	n := min(len(j.recs)-i, limit)
	if n == 0 {
		return nil, since, nil
	}
	recs = make([]Record, n)
	for k := range recs {
		recs[k] = j.recs[i+k].rec.clone()
	}
	return recs, recs[n-1].Seq, nil
}

// Latest returns, in the order executions first appear, the latest
// record carrying each execution's facts (row, settled or lost): where
// every execution stands.
func (j *Journal) Latest() []Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	at := make(map[string]int) // execution → index in out
	var out []Record
	for _, e := range j.recs {
		id := e.rec.ExecutionID
		if id == "" || !hasFacts(e.rec.Type) {
			continue
		}
		if i, ok := at[id]; ok {
			out[i] = e.rec.clone()
			continue
		}
		at[id] = len(out)
		out = append(out, e.rec.clone())
	}
	return out
}

// Unsettled returns the latest row of each execution that has neither a
// settled nor a lost record after it: what a crash left running.
func (j *Journal) Unsettled() []Record {
	var out []Record
	for _, r := range j.Latest() {
		if r.Type == TypeRow {
			out = append(out, r)
		}
	}
	return out
}

// Checkpoint returns once everything appended before the call is written
// and fsynced, with the seq up to which the file is durable. It fails when
// the journal has failed (see Err), is closed, or ctx ends first.
func (j *Journal) Checkpoint(ctx context.Context) (uint64, error) {
	return j.call(ctx, false)
}

// Compact rewrites the file keeping, per execution, only its latest row,
// settled or lost record, and every other record (breadcrumbs, notices).
// Seqs are kept, so the kept records leave gaps, and the next seq does not
// change. The new file replaces the old one atomically, and Appends made
// meanwhile are queued and land in the new file.
func (j *Journal) Compact() error {
	_, err := j.call(context.Background(), true)
	return err
}

// call hands a request to the writer and waits for its answer.
func (j *Journal) call(ctx context.Context, compact bool) (uint64, error) {
	j.mu.Lock()
	closed, durable := j.closed, j.durable
	j.mu.Unlock()
	if closed {
		return durable, ErrClosed
	}
	req := request{compact: compact, reply: make(chan result, 1)}
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

// Err returns the journal's first failure: a write, fsync or encoding
// error (kind io), or a record dropped after Close (ErrClosed). A failed
// write stops all later writes, since the end of the file is then unknown;
// records keep being served from memory.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Close writes and fsyncs what is queued, stops the writer and closes the
// file. It returns Err. Closing twice is harmless.
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
	for {
		select {
		case <-j.kick:
			j.drain()
		case <-tick.C:
			j.sync()
		case req := <-j.reqs:
			var res result
			if req.compact {
				res.err = j.compact()
			} else {
				j.drain()
				j.sync()
				j.mu.Lock()
				res = result{seq: j.durable, err: j.err}
				j.mu.Unlock()
			}
			req.reply <- res
		case <-j.stop:
			// Close set closed before closing stop, so nothing more is queued.
			j.drain()
			j.sync()
			if err := j.f.Close(); err != nil && !j.failed {
				j.fail("close", err)
			}
			return
		}
	}
}

// drain writes every queued record, in one write when they fit the buffer.
func (j *Journal) drain() {
	j.mu.Lock()
	batch := j.pending
	j.pending = nil
	j.mu.Unlock()
	if j.failed || len(batch) == 0 {
		return
	}
	last := j.written
	for _, e := range batch {
		if e.line == nil {
			continue
		}
		j.bw.Write(e.line)
		j.bw.WriteByte('\n')
		last = e.rec.Seq
	}
	// Flush every batch: a killed helper then loses nothing the kernel has,
	// and the fsync only decides about a machine crash.
	if err := j.bw.Flush(); err != nil {
		j.fail("write", err)
		return
	}
	if last != j.written {
		j.written = last
		j.unsynced = true
	}
}

// sync fsyncs written records, if any, and publishes the durable seq.
func (j *Journal) sync() {
	if j.failed || !j.unsynced {
		return
	}
	if err := j.f.Sync(); err != nil {
		// After a failed fsync the kernel may have dropped the dirty pages:
		// nothing written since the last good one can be trusted.
		j.fail("sync", err)
		return
	}
	j.unsynced = false
	j.publish(j.written)
}

// publish records that everything up to seq is durable.
func (j *Journal) publish(seq uint64) {
	j.mu.Lock()
	if seq > j.durable {
		j.durable = seq
	}
	close(j.synced)
	j.synced = make(chan struct{})
	j.mu.Unlock()
}

func (j *Journal) fail(op string, err error) {
	j.failed = true
	j.mu.Lock()
	if j.err == nil {
		j.err = ioErr(op, j.path, err)
	}
	j.mu.Unlock()
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

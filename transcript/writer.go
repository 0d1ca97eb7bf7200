package transcript

import (
	"log"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// The journal's one writer goroutine: queued records written in one write
// of whole lines, fsynced every SyncInterval and for durable appends and
// checkpoints (sharing one fsync), and the degraded episode of a disk that
// refuses (backoff, repair of a torn tail, recovery).

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
	// The writer's buffer is kept between writes, unless a backlog made
	// it large.
	buf := j.wbuf[:0]
	if cap(buf) < size+1 {
		buf = make([]byte, 0, size+1)
	}
	if cap(buf) <= maxKeptWriteBuf {
		j.wbuf = buf
	}
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

// maxKeptWriteBuf is the largest write buffer the writer keeps.
const maxKeptWriteBuf = 64 << 10

// sync fsyncs written records, if any, publishes the durable seq and lets
// go of the records it covers.
func (j *Journal) sync() error {
	if !j.unsynced {
		return nil
	}
	// fdatasync: the journal only grows, and the size it flushes is the
	// only metadata a reader needs; the inode's times can wait.
	if err := fdatasync(j.f); err != nil {
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

// fdatasync flushes f's data and size, retrying when interrupted.
func fdatasync(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

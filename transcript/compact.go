package transcript

import (
	"bufio"
	"context"
	"os"

	"golang.org/x/sys/unix"
)

// tempPrefix names compaction's temporary files; Open removes leftovers.
const tempPrefix = "." + FileName + ".compact-"

// compact runs on the writer goroutine, which is what makes it safe next to
// Append: the writer takes nothing from the queue while it works, so
// records appended meanwhile wait there and are written to the new file
// afterwards. It makes everything queued durable first, so the file alone
// is what it rewrites; it reads it twice (what to keep, then the copy)
// rather than holding it in memory.
func (j *Journal) compact() error {
	if err := j.flush(true); err != nil {
		return err
	}
	j.mu.Lock()
	end, last := j.fileEnd, j.fileLast
	j.mu.Unlock()
	if last == 0 {
		return nil
	}
	if j.afterSnapshot != nil {
		j.afterSnapshot()
	}
	// The writer is the only one that changes the file, so reading it
	// needs no lock here.
	latest := make(map[string]uint64) // execution → seq of its latest facts record
	if err := scan(j.f, 0, end, 0, func(r Record, _ []byte) bool {
		if hasFacts(r.Type) && r.ExecutionID != "" {
			latest[r.ExecutionID] = r.Seq
		}
		return true
	}); err != nil {
		return ioErr("read", j.path, err)
	}
	f, w, err := writeTemp(j.dir, func(put func(Record, []byte) error) error {
		var perr error
		err := scan(j.f, 0, end, 0, func(r Record, line []byte) bool {
			if keep(r, latest) {
				perr = put(r, line)
			}
			return perr == nil
		})
		if perr != nil {
			return perr
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := os.Rename(f.Name(), j.path); err != nil {
		f.Close()
		os.Remove(f.Name())
		return ioErr("rename", f.Name(), err)
	}
	// The path names the new file now, so switch to it whatever the
	// directory sync says: writing on into the old, unlinked file would
	// lose every later record.
	dirErr := syncDir(j.dir)
	j.rmu.Lock()
	j.f.Close()
	j.f = f
	j.mu.Lock()
	j.fileEnd, j.index, j.counted = w.size, w.marks, w.count%indexEvery
	j.mu.Unlock()
	j.rmu.Unlock()
	j.syncedEnd = w.size
	j.unsynced = false
	return dirErr
}

// keep selects what compaction keeps: per execution, the latest record
// bearing its facts (spawn, row, settled or lost: a settled record
// replaces the row, whose leader only mattered while the execution could
// be running), and every other record. The latest record of all is always
// kept, so the seq counter carries on after a reopen.
func keep(r Record, latest map[string]uint64) bool {
	return !hasFacts(r.Type) || r.ExecutionID == "" || latest[r.ExecutionID] == r.Seq
}

// written is what writeTemp put in the new file.
type written struct {
	size  int64
	count int
	marks []mark
}

// writeTemp writes the lines fill puts to a new private file in dir and
// fsyncs it; the file is returned open, positioned at its end, with its
// index.
func writeTemp(dir string, fill func(put func(Record, []byte) error) error) (*os.File, written, error) {
	var w written
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return nil, w, ioErr("create", dir, err)
	}
	fail := func(op string, err error) (*os.File, written, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, w, ioErr(op, f.Name(), err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail("chmod", err)
	}
	bw := bufio.NewWriter(f)
	err = fill(func(r Record, line []byte) error {
		if w.count%indexEvery == 0 {
			w.marks = append(w.marks, mark{r.Seq, w.size})
		}
		w.count++
		w.size += int64(len(line)) + 1
		bw.Write(line)
		return bw.WriteByte('\n')
	})
	if err != nil {
		return fail("write", err)
	}
	if err := bw.Flush(); err != nil {
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	// CreateTemp's file is not in append mode, and the writer relies on
	// it: after cutting a failed write off, the next one must land at
	// the new end.
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl|unix.O_APPEND)
	}
	if err != nil {
		return fail("fcntl", err)
	}
	return f, w, nil
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

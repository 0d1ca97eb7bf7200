package transcript

import (
	"bufio"
	"os"
)

// tempPrefix names compaction's temporary files; Open removes leftovers.
const tempPrefix = "." + FileName + ".compact-"

// compact runs on the writer goroutine, which is what makes it safe next to
// Append: the writer takes nothing from the queue while it works, so
// records appended meanwhile wait there and are written to the new file
// afterwards.
func (j *Journal) compact() error {
	if j.failed {
		return j.Err()
	}
	j.mu.Lock()
	snap := append([]entry(nil), j.recs...)
	j.mu.Unlock()
	if len(snap) == 0 {
		return nil
	}
	last := snap[len(snap)-1].rec.Seq
	if j.afterSnapshot != nil {
		j.afterSnapshot()
	}
	kept := keep(snap)

	f, err := writeTemp(j.dir, kept)
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
	j.f.Close()
	j.f = f
	j.bw.Reset(f) // empty: every drain flushes
	j.unsynced = false
	j.written = last

	j.mu.Lock()
	// Only the writer replaces recs, so recs[:len(snap)] is still snap.
	rest := j.recs[len(snap):]
	j.recs = append(kept, rest...)
	// Queued records up to last are in the new file or compacted away.
	var pending []entry
	for _, e := range j.pending {
		if e.rec.Seq > last {
			pending = append(pending, e)
		}
	}
	j.pending = pending
	j.mu.Unlock()
	if dirErr == nil {
		j.publish(last)
	}
	return dirErr
}

// keep selects what compaction keeps: per execution, the latest record
// bearing its facts (row, settled or lost: a settled record replaces the
// row, whose leader only mattered while the execution could be running),
// and every other record. The latest record of all is always kept, so the
// seq counter carries on after a reopen.
func keep(ents []entry) []entry {
	latest := make(map[string]uint64) // execution → seq of its latest facts record
	for _, e := range ents {
		if e.line != nil && hasFacts(e.rec.Type) && e.rec.ExecutionID != "" {
			latest[e.rec.ExecutionID] = e.rec.Seq
		}
	}
	var kept []entry
	for _, e := range ents {
		if e.line == nil {
			continue // never written: it could not be encoded
		}
		if hasFacts(e.rec.Type) && e.rec.ExecutionID != "" && latest[e.rec.ExecutionID] != e.rec.Seq {
			continue
		}
		kept = append(kept, e)
	}
	return kept
}

// writeTemp writes ents to a new private file in dir and fsyncs it; the
// file is returned open, positioned at its end.
func writeTemp(dir string, ents []entry) (*os.File, error) {
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return nil, ioErr("create", dir, err)
	}
	fail := func(op string, err error) (*os.File, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, ioErr(op, f.Name(), err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail("chmod", err)
	}
	bw := bufio.NewWriter(f)
	for _, e := range ents {
		bw.Write(e.line)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	return f, nil
}

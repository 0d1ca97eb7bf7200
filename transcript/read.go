package transcript

import (
	"encoding/json"
	"log"
	"sort"
)

// Reading the journal back: durable records from the file through the
// sparse index, then those still queued; nothing is kept in memory once
// durable.

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

package transcript

import (
	"bytes"
	"encoding/json"
)

// loaded is what parse makes of the file's bytes.
type loaded struct {
	ents     []entry
	end      int   // the file ends after its last good line here; a torn tail starts here
	tornLine int   // 1-based line number of the torn tail, when end < len(data)
	bad      []int // 1-based line numbers of skipped lines before the end
}

// parse parses the journal's lines. The writer only ever writes whole lines
// ending in '\n', so a last line without one, or one that is not a record,
// is what a crash in the middle of a write leaves: it ends the good part.
// A bad line with good lines after it cannot be that, so it is skipped
// and the lines after it are kept. Seqs must increase; a line that breaks
// the order is skipped too, since Records pages by seq.
func parse(data []byte) loaded {
	var l loaded
	var last uint64
	line := 0
	for off := 0; off < len(data); {
		line++
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			l.tornLine = line
			break
		}
		text, next := data[off:off+i], off+i+1
		if len(bytes.TrimSpace(text)) > 0 {
			var r Record
			if err := json.Unmarshal(text, &r); err != nil {
				if next == len(data) {
					l.tornLine = line
					break
				}
				l.bad = append(l.bad, line)
			} else if r.Seq <= last {
				l.bad = append(l.bad, line)
			} else {
				last = r.Seq
				l.ents = append(l.ents, entry{rec: r, line: bytes.Clone(text)})
			}
		}
		off, l.end = next, next
	}
	return l
}

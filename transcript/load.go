package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
)

// loaded is what index makes of the file.
type loaded struct {
	size     int64  // the file's size
	end      int64  // the file ends after its last good line here; a torn tail starts here
	tornLine int    // 1-based line number of the torn tail, when end < size
	bad      []int  // 1-based line numbers of skipped lines before the end
	last     uint64 // seq of the last good line
	count    int    // good lines
	marks    []mark // every indexEvery-th good line
}

// index reads the journal's lines once, keeping only where its records
// are. The writer only ever writes whole lines ending in '\n', so a last
// line without one, or one that is not a record, is what a crash in the
// middle of a write leaves: it ends the good part. A bad line with good
// lines after it cannot be that, so it is skipped and the lines after it
// are kept. Seqs must increase; a line that breaks the order is skipped
// too, since Records pages by seq.
func index(f *os.File) (loaded, error) {
	var l loaded
	br := bufio.NewReaderSize(f, 64<<10)
	var off int64
	line := 0
	badLine, badEnd := 0, int64(0) // an unreadable line, until a line after it shows it was not the last
	for {
		text, err := readLine(br)
		if len(text) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return l, err
		}
		line++
		start := off
		off += int64(len(text))
		l.size = off
		if badLine != 0 {
			l.bad = append(l.bad, badLine)
			l.end, badLine = badEnd, 0
		}
		if err == io.EOF { // no newline: torn
			l.tornLine = line
			break
		}
		body := text[:len(text)-1]
		if len(bytes.TrimSpace(body)) == 0 {
			l.end = off
			continue
		}
		var r struct {
			Seq uint64 `json:"seq"`
		}
		if json.Unmarshal(body, &r) != nil {
			badLine, badEnd = line, off
			continue
		}
		l.end = off
		if r.Seq <= l.last {
			l.bad = append(l.bad, line)
			continue
		}
		if l.count%indexEvery == 0 {
			l.marks = append(l.marks, mark{r.Seq, start})
		}
		l.count++
		l.last = r.Seq
	}
	if badLine != 0 {
		l.tornLine = badLine // the last line, unreadable: torn
	}
	return l, nil
}

// readLine returns the next line with its '\n', however long; at the end
// of the input, what is left (without one) and io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	text, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return text, err
	}
	long := bytes.Clone(text)
	for err == bufio.ErrBufferFull {
		text, err = br.ReadSlice('\n')
		long = append(long, text...)
	}
	return long, err
}

// scan reads the records of f between off and end with a seq above since,
// in order, and calls fn with each and its line until fn returns false.
// Lines that are not records, or that break the seq order, are skipped, as
// index skipped them; a last line without a newline is ignored.
func scan(f *os.File, off, end int64, since uint64, fn func(Record, []byte) bool) error {
	if end <= off {
		return nil
	}
	br := bufio.NewReaderSize(io.NewSectionReader(f, off, end-off), 64<<10)
	last := since
	for {
		text, err := readLine(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		body := text[:len(text)-1]
		if seq, ok := leadingSeq(body); ok && seq <= last {
			continue // cheap skip of what the caller already has
		}
		var r Record
		if json.Unmarshal(body, &r) != nil || r.Seq <= last {
			continue
		}
		last = r.Seq
		if !fn(r, body) {
			return nil
		}
	}
}

// leadingSeq reads the seq of a line as the writer writes it,
// {"seq":N,..., without decoding the rest.
func leadingSeq(b []byte) (uint64, bool) {
	const prefix = `{"seq":`
	if !bytes.HasPrefix(b, []byte(prefix)) {
		return 0, false
	}
	var n uint64
	i := len(prefix)
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if n > (1<<64-1)/10-1 {
			return 0, false
		}
		n = n*10 + uint64(b[i]-'0')
	}
	if i == len(prefix) || i >= len(b) || b[i] != ',' {
		return 0, false
	}
	return n, true
}

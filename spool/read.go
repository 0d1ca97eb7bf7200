package spool

import (
	"errors"
	"io"
	"math"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// MaxReadBytes bounds one read of a log.
const MaxReadBytes = 1 << 20

// ReadResult answers spool/read.
type ReadResult struct {
	Text       string `json:"text"`
	Offset     int64  `json:"offset"`
	Length     int64  `json:"length"`
	TotalBytes int64  `json:"totalBytes"`
	EOF        bool   `json:"eof,omitempty"`
	// Cut is set when a line read ends inside its first line, which with
	// its newline is longer than MaxReadBytes: Text is the line's head,
	// cut after a whole UTF-8 character, and the rest starts at
	// Offset+Length.
	Cut bool `json:"cut,omitempty"`
}

// Read reads a byte range of a log (length ≤ MaxReadBytes; 0 means the
// most). A range that would end inside a UTF-8 character ends before it;
// Length says how many bytes the text covers, so offset+length is where to
// go on.
func (d *Dir) Read(name string, offset, length int64) (ReadResult, error) {
	v, err := d.Open(name)
	if err != nil {
		return ReadResult{}, err
	}
	defer v.Close()
	size := v.Size()
	if length == 0 || length > MaxReadBytes {
		length = MaxReadBytes
	}
	if offset >= size {
		return ReadResult{Offset: offset, TotalBytes: size, EOF: true}, nil
	}
	buf := make([]byte, min(length, size-offset))
	n, err := v.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return ReadResult{}, fault.New(fault.IO, "reading %s: %w", name, err)
	}
	buf = buf[:n]
	if offset+int64(n) < size {
		buf = buf[:completePrefix(buf)]
	}
	return ReadResult{Text: string(buf), Offset: offset, Length: int64(len(buf)), TotalBytes: size, EOF: offset+int64(len(buf)) >= size}, nil
}

// ReadLines reads count lines of a log from line first (1-based; count 0:
// to the end): whole lines, at most MaxReadBytes in all, or when the first
// line alone is longer, its head (see ReadResult.Cut). Offset+Length is
// always where the next read should start.
func (d *Dir) ReadLines(name string, first, count int64) (ReadResult, error) {
	v, err := d.Open(name)
	if err != nil {
		return ReadResult{}, err
	}
	defer v.Close()
	return readLines(v, first, count)
}

// completePrefix returns the length of b without a UTF-8 character cut at
// its end.
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

func readLines(v *View, first, count int64) (ReadResult, error) {
	last := int64(math.MaxInt64) // the last line wanted
	if count > 0 && first <= math.MaxInt64-count {
		last = first + count - 1
	}
	r := newLineReader(v.Reader())
	var out []byte
	offset := int64(-1)
	whole := 0 // len(out) after the last whole line
	cut := false
	for {
		p, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ReadResult{}, fault.New(fault.IO, "reading %s: %w", v.Name(), err)
		}
		if p.no > last {
			break
		}
		if p.no < first {
			continue
		}
		if offset < 0 {
			offset = p.off
		}
		out = append(out, p.text...)
		if p.nl {
			out = append(out, '\n')
		}
		if len(out) > MaxReadBytes {
			if whole > 0 {
				out = out[:whole]
			} else {
				out, cut = out[:completePrefix(out[:MaxReadBytes])], true
			}
			break
		}
		if p.end {
			whole = len(out)
		}
	}
	size := v.Size()
	if offset < 0 { // no line at or after first
		offset, out = size, nil
	}
	length := int64(len(out))
	return ReadResult{Text: string(out), Offset: offset, Length: length, TotalBytes: size, EOF: offset+length >= size, Cut: cut}, nil
}

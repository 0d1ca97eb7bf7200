package spool

import (
	"bytes"
	"errors"
	"io"
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
// to the end), at most MaxReadBytes in all.
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
	if count == 0 {
		count = 1 << 62
	}
	var out bytes.Buffer
	pos, offset, prev := int64(0), int64(-1), int64(0)
	open := false // the last line written still lacks its newline
	// Lines hands a line longer than MaxLineBytes over in pieces
	// with one number: a newline is counted when the number changes.
	err := v.Lines(func(no int64, text []byte) bool {
		if prev != 0 && no != prev {
			pos++
			if open {
				out.WriteByte('\n')
				open = false
			}
		}
		prev = no
		if no < first {
			pos += int64(len(text))
			return true
		}
		if no >= first+count || out.Len()+len(text) > MaxReadBytes {
			return false
		}
		if offset < 0 {
			offset = pos
		}
		out.Write(text)
		open = true
		pos += int64(len(text))
		return true
	})
	if err != nil {
		return ReadResult{}, fault.New(fault.IO, "reading %s: %w", v.Name(), err)
	}
	size := v.Size()
	if offset < 0 { // no line at or after first
		offset = size
		out.Reset()
	}
	if open && offset+int64(out.Len()) < size {
		out.WriteByte('\n') // the newline that ends the last line read
	}
	length := int64(out.Len())
	return ReadResult{Text: out.String(), Offset: offset, Length: length, TotalBytes: size, EOF: offset+length >= size}, nil
}

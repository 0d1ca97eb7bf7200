package spool

import (
	"bufio"
	"io"
)

// linePiece is a line of a log, or a piece of one longer than
// MaxLineBytes: the pieces of a line come one after another, each cut
// after a whole UTF-8 character, so none splits one.
type linePiece struct {
	no    int64  // the line's number, from 1
	off   int64  // where text starts in the log
	text  []byte // without the '\n'; valid until the next call
	first bool   // text starts its line
	end   bool   // text ends its line: a '\n' follows (nl) or the log ends
	nl    bool
}

// lineReader splits a stream into lines, holding at most about
// MaxLineBytes of a line at a time.
type lineReader struct {
	br    *bufio.Reader
	buf   []byte // the current line's bytes read and not yet handed over
	drop  int    // bytes at the start of buf handed over by the last call
	ended bool   // buf runs to the end of its line: a '\n' (nl) or the end
	nl    bool
	cont  bool  // the last piece did not end its line
	no    int64 // number of the current line
	off   int64 // offset of buf[drop] in the log
	err   error // br's error once it failed; io.EOF at the end
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), no: 1}
}

// next returns the next piece, or io.EOF after the last line. A last line
// without a '\n' counts; an empty log has no lines.
func (r *lineReader) next() (linePiece, error) {
	r.buf = r.buf[:copy(r.buf, r.buf[r.drop:])]
	r.drop = 0
	for !r.ended && len(r.buf) <= MaxLineBytes && r.err == nil {
		b, err := r.br.ReadSlice('\n')
		switch err {
		case nil:
			r.buf = append(r.buf, b[:len(b)-1]...)
			r.ended, r.nl = true, true
		case bufio.ErrBufferFull:
			r.buf = append(r.buf, b...)
		default:
			r.buf = append(r.buf, b...)
			r.err = err
		}
	}
	if r.err != nil && r.err != io.EOF {
		return linePiece{}, r.err
	}
	if r.err == io.EOF && !r.ended {
		if len(r.buf) == 0 && !r.cont {
			return linePiece{}, io.EOF
		}
		r.ended = true
	}
	p := linePiece{no: r.no, off: r.off, first: !r.cont}
	n := len(r.buf)
	if n > MaxLineBytes {
		n = completePrefix(r.buf[:MaxLineBytes])
	}
	p.text = r.buf[:n]
	r.drop = n
	r.off += int64(n)
	if n < len(r.buf) || !r.ended {
		r.cont = true
		return p, nil
	}
	p.end, p.nl = true, r.nl
	if r.nl {
		r.off++
	}
	r.no++
	r.ended, r.nl, r.cont = false, false, false
	return p, nil
}

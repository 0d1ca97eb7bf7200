package spool

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"regexp"
	"unicode/utf8"
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

// continueLine returns a lineReader for line no, which starts at off with
// head (copied) and goes on in br.
func continueLine(br *bufio.Reader, head []byte, no, off int64) *lineReader {
	buf := append(make([]byte, 0, len(head)+64<<10), head...)
	return &lineReader{br: br, buf: buf, no: no, off: off}
}

// next returns the next piece, or io.EOF after the last line. A last line
// without a '\n' counts; an empty log has no lines.
func (r *lineReader) next() (linePiece, error) {
	r.buf = r.buf[:copy(r.buf, r.buf[r.drop:])]
	r.drop = 0
	if len(r.buf) == 0 && !r.cont && r.err == nil {
		// Most lines fit in br's buffer: hand them over from there.
		b, err := r.br.ReadSlice('\n')
		if err == nil {
			p := linePiece{no: r.no, off: r.off, text: b[:len(b)-1], first: true, end: true, nl: true}
			r.no++
			r.off += int64(len(b))
			return p, nil
		}
		r.buf = append(r.buf, b...)
		if err != bufio.ErrBufferFull {
			r.err = err
		}
	}
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

// matchLong matches re against the whole of a line too long to hold,
// which starts at start in v and whose first piece p came from lr; it
// reads lr to the end of the line and returns the line's length. Without
// required literals the regexp reads the line rune by rune as it streams
// by. With some (every match holds one of lits), the line is first
// searched for them, as fast as bytes.Index goes, and only a line that
// holds one is read again from v for the regexp. A cancelled ctx ends the
// line early, and is returned.
func matchLong(ctx context.Context, v *View, re *regexp.Regexp, lits [][]byte, lr *lineReader, p linePiece, start int64) (bool, int64, error) {
	rr := &pieceRunes{ctx: ctx, lr: lr, p: p, length: int64(len(p.text))}
	hit := false
	if len(lits) == 0 {
		hit = re.MatchReader(rr)
	}
	scan := litScan{lits: lits}
	for rr.err == nil {
		scan.feed(rr.p.text)
		if rr.p.end {
			break
		}
		rr.advance()
	}
	if rr.err != nil {
		return false, 0, rr.err
	}
	if scan.found {
		r := bufio.NewReaderSize(ctxReader{ctx, v.section(start, rr.length)}, 64<<10)
		hit = re.MatchReader(r)
		if err := ctx.Err(); err != nil {
			return false, 0, context.Cause(ctx)
		}
	}
	return hit, rr.length, nil
}

// litScan looks for any of lits in a line fed to it in pieces, a match
// across two pieces included.
type litScan struct {
	lits  [][]byte
	tail  []byte // the last bytes fed, one short of the longest literal
	found bool
}

func (s *litScan) feed(b []byte) {
	if s.found || len(s.lits) == 0 {
		return
	}
	keep := 0
	for _, lit := range s.lits {
		keep = max(keep, len(lit)-1)
	}
	join := append(s.tail, b[:min(len(b), keep)]...)
	for _, lit := range s.lits {
		if bytes.Contains(join, lit) || bytes.Contains(b, lit) {
			s.found = true
			return
		}
	}
	if len(b) >= keep {
		s.tail = append(s.tail[:0], b[len(b)-keep:]...)
	} else {
		s.tail = append(s.tail[:0], join[max(0, len(join)-keep):]...)
	}
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// pieceRunes reads the runes of one line from its pieces. Pieces end after
// whole characters, so decoding each on its own decodes the line.
type pieceRunes struct {
	ctx    context.Context
	lr     *lineReader
	p      linePiece
	i      int   // next byte of p.text
	length int64 // bytes of the line in the pieces taken so far
	err    error
}

func (r *pieceRunes) ReadRune() (rune, int, error) {
	for r.i == len(r.p.text) {
		if r.p.end || r.err != nil {
			return 0, 0, io.EOF
		}
		r.advance()
	}
	c, n := utf8.DecodeRune(r.p.text[r.i:])
	r.i += n
	return c, n, nil
}

func (r *pieceRunes) advance() {
	if err := r.ctx.Err(); err != nil {
		r.err = context.Cause(r.ctx)
		return
	}
	p, err := r.lr.next()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // a line's pieces always end with one that ends it
	}
	if err != nil {
		r.err = err
		return
	}
	r.p, r.i = p, 0
	r.length += int64(len(p.text))
}

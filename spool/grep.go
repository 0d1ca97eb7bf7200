package spool

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"regexp"
	"regexp/syntax"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Grep searches logs line by line with an RE2 pattern, whatever their
// physical form; the caller decides which logs it may search. Each line
// is matched whole, however long, and gives one match at most.

const (
	// MaxGrepMatches caps GrepOptions.MaxMatches: a larger value
	// saturates to it, and Truncated says when more matches exist.
	MaxGrepMatches = 1000
	// MaxMatchTextBytes bounds the text of each match or context line: a
	// longer line gives its head, cut after a whole UTF-8 character, with
	// Cut set and LineBytes its length.
	MaxMatchTextBytes = 4096
	// MaxGrepTextBytes bounds the text of one answer, matches and context
	// lines together; an answer that reaches it stops there, Truncated.
	MaxGrepTextBytes = 4 << 20
	// MaxPatternBytes bounds a grep pattern; a longer one is
	// fault.InvalidParams before it is compiled.
	MaxPatternBytes = 4096
)

// Match is one line of a grep answer. Context lines around a match carry
// Context true.
type Match struct {
	Address string `json:"address"`
	Line    int64  `json:"line"`
	Text    string `json:"text"`
	Context bool   `json:"context,omitempty"`
	// Cut is set when Text is only the head of a line longer than
	// MaxMatchTextBytes; LineBytes is then the line's length.
	Cut       bool  `json:"cut,omitempty"`
	LineBytes int64 `json:"lineBytes,omitempty"`
}

// newMatch makes the match of a line of length bytes that starts with
// line (all of it, or at least MaxMatchTextBytes of it).
func newMatch(addr string, no int64, line []byte, length int64, context bool) Match {
	m := Match{Address: addr, Line: no, Context: context}
	if length <= MaxMatchTextBytes {
		m.Text = string(line)
		return m
	}
	m.Text = string(line[:completePrefix(line[:MaxMatchTextBytes])])
	m.Cut, m.LineBytes = true, length
	return m
}

// GrepResult answers spool/grep.
type GrepResult struct {
	Matches   []Match `json:"matches"`
	Truncated bool    `json:"truncated,omitempty"`
}

// GrepOptions bound one search.
type GrepOptions struct {
	// MaxMatches is how many matches to return at most, saturating at
	// MaxGrepMatches; more sets Truncated.
	MaxMatches int
	Context    int // lines before and after each match
	// Address names a log in a match, from its logical name.
	Address func(name string) string
}

// CompilePattern compiles a grep pattern, refusing one longer than
// MaxPatternBytes (fault.InvalidParams) before any work on it.
func CompilePattern(pattern string) (*regexp.Regexp, error) {
	if err := checkPattern(pattern); err != nil {
		return nil, err
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fault.New(fault.InvalidParams, "pattern: %w", err)
	}
	return re, nil
}

func checkPattern(pattern string) error {
	if len(pattern) > MaxPatternBytes {
		return fault.New(fault.InvalidParams, "pattern: %d bytes, the most is %d", len(pattern), MaxPatternBytes)
	}
	return nil
}

// Grep searches the logs names, in order, two at a time. Each log is read
// through a view held only while it is searched; a cancelled ctx stops the
// search and releases them. A log removed meanwhile has no matches. The
// answer holds at most MaxMatches matches and MaxGrepTextBytes of text.
func (d *Dir) Grep(ctx context.Context, names []string, re *regexp.Regexp, o GrepOptions) (GrepResult, error) {
	pattern := re.String()
	if err := checkPattern(pattern); err != nil {
		return GrepResult{}, err
	}
	maxMatches := min(max(o.MaxMatches, 0), MaxGrepMatches)
	lit := requiredLiteral(pattern)
	lits := requiredLiterals(pattern)
	// For finding candidates in a whole block: every line that matches re
	// also matches here, and each candidate is checked on its own line.
	block, err := regexp.Compile("(?m:" + pattern + ")")
	if err != nil {
		block = nil
	}
	address := o.Address
	if address == nil {
		address = func(name string) string { return name }
	}

	// Files are searched by two workers; results are kept per file and
	// joined in order, so the answer does not depend on timing. Each file
	// keeps one match and one text byte past the bounds, so that the join
	// knows when to say Truncated.
	b := bounds{matches: maxMatches + 1, text: MaxGrepTextBytes + 1}
	results := make([][]Match, len(names))
	errs := make([]error, len(names))
	var mu sync.Mutex
	var found bounds // guarded by mu: matches and text so far in files searched
	next := 0        // guarded by mu: next file to search
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				full := found.matches >= b.matches || found.text >= b.text
				mu.Unlock()
				if i >= len(names) || full {
					return
				}
				addr := address(names[i])
				var got bounds
				if o.Context == 0 && block != nil {
					results[i], got, errs[i] = d.grepBlocks(ctx, names[i], addr, re, block, lits, b)
				} else {
					results[i], got, errs[i] = d.grepOne(ctx, names[i], addr, re, lit, o.Context, b)
				}
				mu.Lock()
				found.matches += got.matches
				found.text += got.text
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return GrepResult{}, fault.New(fault.Refused, "the grep was cancelled: %w", context.Cause(ctx))
	}
	res := GrepResult{Matches: []Match{}}
	n, text := 0, 0
	for i := range names {
		if errs[i] != nil {
			return GrepResult{}, errs[i]
		}
		for _, m := range results[i] {
			if (!m.Context && n == maxMatches) || text+len(m.Text) > MaxGrepTextBytes {
				res.Truncated = true
				return res, nil
			}
			if !m.Context {
				n++
			}
			text += len(m.Text)
			res.Matches = append(res.Matches, m)
		}
	}
	return res, nil
}

// bounds counts matches and bytes of text, found or allowed.
type bounds struct{ matches, text int }

// add counts m and reports whether b is reached.
func (c *bounds) add(m Match, b bounds) bool {
	if !m.Context {
		c.matches++
	}
	c.text += len(m.Text)
	return c.matches >= b.matches || c.text >= b.text
}

// grepOne searches one log line by line, returning its matches with their
// context until b is reached.
func (d *Dir) grepOne(ctx context.Context, name, addr string, re *regexp.Regexp, lit []byte, around int, b bounds) ([]Match, bounds, error) {
	v, err := d.Open(name)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil, bounds{}, nil // removed meanwhile
		}
		return nil, bounds{}, err
	}
	defer v.Close()
	var out []Match
	var got bounds
	var before []Match // the last lines, for context
	after := 0         // context lines still to add after a match
	last := int64(0)   // last line number added
	checked := 0
	var head []byte // a long line's head, kept while the rest is read
	lr := newLineReader(v.Reader())
	for {
		p, err := lr.next()
		if err == io.EOF {
			break
		}
		if err == nil && checked&1023 == 0 && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		checked++
		var hit bool
		line, length := p.text, int64(len(p.text))
		if err == nil {
			if p.first && p.end {
				hit = (lit == nil || bytes.Contains(line, lit)) && re.Match(line)
			} else {
				head = append(head[:0], line[:min(len(line), MaxMatchTextBytes)]...)
				line = head
				hit, length, err = matchLong(ctx, v, re, litSet(lit), lr, p, p.off)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, bounds{}, context.Cause(ctx)
			}
			return nil, bounds{}, fault.New(fault.IO, "reading %s: %w", name, err)
		}
		var add []Match
		switch {
		case hit:
			for _, h := range before {
				if h.Line > last {
					add = append(add, h)
				}
			}
			before = before[:0]
			add = append(add, newMatch(addr, p.no, line, length, false))
			after = around
		case after > 0:
			add = append(add, newMatch(addr, p.no, line, length, true))
			after--
		case around > 0:
			if len(before) == around {
				before = append(before[:0], before[1:]...)
			}
			before = append(before, newMatch(addr, p.no, line, length, true))
		}
		for _, m := range add {
			out = append(out, m)
			last = m.Line
			if got.add(m, b) {
				return out, got, nil
			}
		}
	}
	return out, got, nil
}

// grepChunk is how much of a log grepBlocks searches at once.
const grepChunk = 1 << 20

// grepBuffers keeps block buffers between logs and greps: a fresh 1 MiB
// per log cost a fifth of a grep's time in page faults and clearing.
var grepBuffers = sync.Pool{New: func() any {
	b := make([]byte, grepChunk+64<<10)
	return &b
}}

// grepBlocks is grep without context lines: it searches whole blocks of
// the log for candidates (the required literal with bytes.Index, else the
// multi-line form of the pattern) and runs the pattern only on the lines
// that hold one, counting lines with bytes.Count in between. Most of a log
// is never split into lines at all. A line longer than a block is matched
// as a stream, as grepOne does.
func (d *Dir) grepBlocks(ctx context.Context, name, addr string, re, block *regexp.Regexp, lits [][]byte, b bounds) ([]Match, bounds, error) {
	v, err := d.Open(name)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil, bounds{}, nil // removed meanwhile
		}
		return nil, bounds{}, err
	}
	defer v.Close()
	// Big reads pass the buffer by; it serves the long-line reader.
	r := bufio.NewReaderSize(v.Reader(), 64<<10)
	bp := grepBuffers.Get().(*[]byte)
	defer grepBuffers.Put(bp)
	buf := *bp
	if d.blockBytes > 0 {
		buf = buf[:min(len(buf), d.blockBytes)]
	}
	finder := literalFinder{lits: lits, next: make([]int, len(lits))}
	var out []Match
	var got bounds
	lineNo := int64(1) // the number of the line that starts the block
	offset := int64(0) // where the block starts in the log
	carry := 0
	for {
		if ctx.Err() != nil {
			return nil, bounds{}, context.Cause(ctx)
		}
		n, rerr := io.ReadFull(r, buf[carry:])
		data := buf[:carry+n]
		eof := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !eof {
			return nil, bounds{}, fault.New(fault.IO, "reading %s: %w", name, rerr)
		}
		end := len(data)
		if !eof {
			i := bytes.LastIndexByte(data, '\n')
			if i < 0 {
				// The block is all one line, which goes on.
				m, hit, length, err := longLine(ctx, v, r, data, lineNo, offset, re, lits, addr)
				if err != nil {
					if ctx.Err() != nil {
						return nil, bounds{}, context.Cause(ctx)
					}
					return nil, bounds{}, fault.New(fault.IO, "reading %s: %w", name, err)
				}
				if hit {
					out = append(out, m)
					if got.add(m, b) {
						return out, got, nil
					}
				}
				lineNo++
				offset += length + 1
				carry = 0
				continue
			}
			end = i + 1
		}
		chunk := data[:end]
		counted, pos := 0, 0
		finder.reset()
		for pos < len(chunk) {
			at := -1
			if len(lits) > 0 {
				at = finder.find(chunk, pos)
			} else if loc := block.FindIndex(chunk[pos:]); loc != nil {
				at = pos + loc[0]
			}
			// Past the last newline there is no line (an empty match of
			// "$" or "^$" can land there).
			if at < 0 || (at == len(chunk) && at > 0 && chunk[at-1] == '\n') {
				break
			}
			ls := bytes.LastIndexByte(chunk[:at], '\n') + 1
			le := len(chunk)
			if i := bytes.IndexByte(chunk[at:], '\n'); i >= 0 {
				le = at + i
			}
			lineNo += int64(bytes.Count(chunk[counted:ls], []byte{'\n'}))
			counted = ls
			if line := chunk[ls:le]; re.Match(line) {
				m := newMatch(addr, lineNo, line, int64(len(line)), false)
				out = append(out, m)
				if got.add(m, b) {
					return out, got, nil
				}
			}
			pos = le + 1
		}
		lineNo += int64(bytes.Count(chunk[counted:], []byte{'\n'}))
		offset += int64(end)
		if eof {
			return out, got, nil
		}
		carry = copy(buf, data[end:])
	}
}

// longLine matches re against line no of v, which starts at off with
// head and goes on in r, reading r to the end of the line. It returns the
// line's match, whether it is one, and the line's length.
func longLine(ctx context.Context, v *View, r *bufio.Reader, head []byte, no, off int64, re *regexp.Regexp, lits [][]byte, addr string) (Match, bool, int64, error) {
	lr := continueLine(r, head, no, off)
	p, err := lr.next()
	if err != nil {
		return Match{}, false, 0, err
	}
	text := append([]byte(nil), p.text[:min(len(p.text), MaxMatchTextBytes)]...)
	hit, length := false, int64(len(p.text))
	if p.end { // head was all of it but its newline
		hit = re.Match(p.text)
	} else if hit, length, err = matchLong(ctx, v, re, lits, lr, p, off); err != nil {
		return Match{}, false, 0, err
	}
	return newMatch(addr, no, text, length, false), hit, length, nil
}

// litSet is the one required literal lit as a set, empty when nil.
func litSet(lit []byte) [][]byte {
	if lit == nil {
		return nil
	}
	return [][]byte{lit}
}

// requiredLiteral returns a byte string every match must contain, when the
// pattern has one that is cheap to find (a case-sensitive literal run at
// the top of the pattern), else nil. bytes.Contains skips most lines of a
// build log far faster than the regexp would.
func requiredLiteral(pattern string) []byte {
	if set := requiredLiterals(pattern); len(set) == 1 {
		return set[0]
	}
	return nil
}

// requiredLiterals returns byte strings of which every match contains at
// least one: the required literal of a pattern, or one per branch of a
// top-level alternation. nil when some branch has none.
func requiredLiterals(pattern string) [][]byte {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	re = re.Simplify()
	branches := []*syntax.Regexp{re}
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	}
	var out [][]byte
	for _, b := range branches {
		lit := literalOf(b)
		if lit == nil {
			return nil
		}
		out = append(out, lit)
	}
	return out
}

// literalOf returns the longest case-sensitive literal of at least two
// characters that every match of re contains, looking at re itself and its
// top-level concatenation.
func literalOf(re *syntax.Regexp) []byte {
	var best []rune
	consider := func(r *syntax.Regexp) {
		if r.Op == syntax.OpLiteral && r.Flags&syntax.FoldCase == 0 && len(r.Rune) > len(best) {
			best = r.Rune
		}
	}
	switch re.Op {
	case syntax.OpLiteral:
		consider(re)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			consider(sub)
		}
	}
	if len(best) < 2 {
		return nil
	}
	return []byte(string(best))
}

// literalFinder finds the next position where any of a set of literals
// starts, remembering each literal's next hit so a block is scanned once
// per literal.
type literalFinder struct {
	lits [][]byte
	next []int // per literal: its next hit, -1 none left, -2 not searched
}

func (f *literalFinder) reset() {
	for i := range f.next {
		f.next[i] = -2
	}
}

func (f *literalFinder) find(chunk []byte, pos int) int {
	at := -1
	for i, lit := range f.lits {
		if f.next[i] == -1 {
			continue
		}
		if f.next[i] < pos {
			if j := bytes.Index(chunk[pos:], lit); j >= 0 {
				f.next[i] = pos + j
			} else {
				f.next[i] = -1
				continue
			}
		}
		if at < 0 || f.next[i] < at {
			at = f.next[i]
		}
	}
	return at
}

package spool

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"regexp/syntax"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Grep searches logs line by line with an RE2 pattern, whatever their
// physical form; the caller decides which logs it may search.

// Match is one line of a grep answer. Context lines around a match carry
// Context true.
type Match struct {
	Address string `json:"address"`
	Line    int64  `json:"line"`
	Text    string `json:"text"`
	Context bool   `json:"context,omitempty"`
}

// GrepResult answers spool/grep.
type GrepResult struct {
	Matches   []Match `json:"matches"`
	Truncated bool    `json:"truncated,omitempty"`
}

// GrepOptions bound one search.
type GrepOptions struct {
	MaxMatches int // matches to return at most (more sets Truncated)
	Context    int // lines before and after each match
	// Address names a log in a match, from its logical name.
	Address func(name string) string
}

// Grep searches the logs names, in order, two at a time. Each log is read
// through a view held only while it is searched; a cancelled ctx stops the
// search and releases them. A log removed meanwhile has no matches.
func (d *Dir) Grep(ctx context.Context, names []string, re *regexp.Regexp, o GrepOptions) (GrepResult, error) {
	pattern := re.String()
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
	// joined in order, so the answer does not depend on timing.
	results := make([][]Match, len(names))
	counts := make([]int, len(names))
	errs := make([]error, len(names))
	var mu sync.Mutex
	found := 0 // guarded by mu: matches so far in files searched
	next := 0  // guarded by mu: next file to search
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				full := found >= o.MaxMatches
				mu.Unlock()
				if i >= len(names) || full {
					return
				}
				addr := address(names[i])
				if o.Context == 0 && block != nil {
					results[i], counts[i], errs[i] = d.grepBlocks(ctx, names[i], addr, re, block, lits, o.MaxMatches+1)
				} else {
					results[i], counts[i], errs[i] = d.grepOne(ctx, names[i], addr, re, lit, o.Context, o.MaxMatches+1)
				}
				mu.Lock()
				found += counts[i]
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return GrepResult{}, fault.New(fault.Refused, "the grep was cancelled: %w", context.Cause(ctx))
	}
	res := GrepResult{Matches: []Match{}}
	n := 0
	for i := range names {
		if errs[i] != nil {
			return GrepResult{}, errs[i]
		}
		for _, m := range results[i] {
			if !m.Context {
				if n == o.MaxMatches {
					res.Truncated = true
					return res, nil
				}
				n++
			}
			res.Matches = append(res.Matches, m)
		}
	}
	return res, nil
}

// grepOne searches one log, returning at most limit matches with their
// context.
func (d *Dir) grepOne(ctx context.Context, name, addr string, re *regexp.Regexp, lit []byte, context, limit int) ([]Match, int, error) {
	v, err := d.Open(name)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil, 0, nil // removed meanwhile
		}
		return nil, 0, err
	}
	defer v.Close()
	var out []Match
	type held struct {
		no   int64
		text string
	}
	var before []held // the last lines, for context
	after := 0        // context lines still to add after a match
	last := int64(0)  // last line number added
	count := 0
	checked := 0
	err = v.Lines(func(no int64, text []byte) bool {
		if checked++; checked&1023 == 0 && ctx.Err() != nil {
			return false
		}
		hit := (lit == nil || bytes.Contains(text, lit)) && re.Match(text)
		switch {
		case hit:
			for _, h := range before {
				if h.no > last {
					out = append(out, Match{Address: addr, Line: h.no, Text: h.text, Context: true})
				}
			}
			before = before[:0]
			out = append(out, Match{Address: addr, Line: no, Text: string(text)})
			last, after = no, context
			count++
			if count >= limit {
				return false
			}
		case after > 0:
			out = append(out, Match{Address: addr, Line: no, Text: string(text), Context: true})
			last = no
			after--
		case context > 0:
			if len(before) == context {
				before = append(before[:0], before[1:]...)
			}
			before = append(before, held{no, string(text)})
		}
		return true
	})
	if err != nil {
		return nil, 0, fault.New(fault.IO, "reading %s: %w", name, err)
	}
	return out, count, nil
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
// is never split into lines at all.
func (d *Dir) grepBlocks(ctx context.Context, name, addr string, re, block *regexp.Regexp, lits [][]byte, limit int) ([]Match, int, error) {
	v, err := d.Open(name)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil, 0, nil // removed meanwhile
		}
		return nil, 0, err
	}
	defer v.Close()
	r := v.Reader()
	bp := grepBuffers.Get().(*[]byte)
	defer grepBuffers.Put(bp)
	buf := *bp
	finder := literalFinder{lits: lits, next: make([]int, len(lits))}
	var out []Match
	lineNo := int64(1) // the number of the line that starts the block
	carry := 0
	for {
		if ctx.Err() != nil {
			return nil, 0, context.Cause(ctx)
		}
		n, rerr := io.ReadFull(r, buf[carry:])
		data := buf[:carry+n]
		eof := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !eof {
			return nil, 0, fault.New(fault.IO, "reading %s: %w", name, rerr)
		}
		end := len(data)
		if !eof {
			if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
				end = i + 1
			} // else a line longer than the buffer: searched in pieces
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
				out = append(out, Match{Address: addr, Line: lineNo, Text: string(line)})
				if len(out) >= limit {
					return out, len(out), nil
				}
			}
			pos = le + 1
		}
		lineNo += int64(bytes.Count(chunk[counted:], []byte{'\n'}))
		if eof {
			return out, len(out), nil
		}
		carry = copy(buf, data[end:])
	}
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

package execution

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/spool"
)

// Logs are read through the spool package's logical views, whatever their
// physical form; this file adds authority (an owner reads only its own
// executions' logs) and the read and grep views the protocol offers.

const (
	// MaxReadBytes bounds one spool/read.
	MaxReadBytes = 1 << 20
	// DefaultMaxMatches bounds one spool/grep unless the caller says.
	DefaultMaxMatches = 200
	maxGrepContext    = 50
)

// logID returns the execution id of a logical name (executions/<id>.log).
func logID(name string) string {
	return strings.TrimSuffix(strings.TrimPrefix(name, "executions/"), ".log")
}

// visible reports whether c may read the log with logical name. A log of
// an execution started before this open of the session has no known owner
// and is visible to the user only.
func (s *Session) visible(c Caller, name string) bool {
	if c.User {
		return true
	}
	s.mu.Lock()
	owner, ok := s.owners[logID(name)]
	s.mu.Unlock()
	return ok && owner == c.owner()
}

// logName parses an address and checks that c may read it; anything else
// is "not found", like an execution of another owner.
func (s *Session) logName(c Caller, address string) (string, error) {
	name, err := s.dir.ParseAddress(address)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return "", fault.New(fault.NotFound, "no log %q", address)
		}
		return "", err
	}
	if !s.visible(c, name) {
		return "", fault.New(fault.NotFound, "no log %q", address)
	}
	return name, nil
}

// Address is the full address of a logical name.
func Address(name string) string { return "artifact://" + name }

// LogStat answers spool/stat.
type LogStat struct {
	Address       string `json:"address"`
	LogicalBytes  int64  `json:"logicalBytes"`
	Physical      string `json:"physical"`
	PhysicalBytes int64  `json:"physicalBytes"`
	Retired       bool   `json:"retired,omitempty"`
}

// StatLog describes one log.
func (s *Session) StatLog(c Caller, address string) (LogStat, error) {
	name, err := s.logName(c, address)
	if err != nil {
		return LogStat{}, err
	}
	st, err := s.dir.Stat(name)
	if err != nil {
		return LogStat{}, err
	}
	return LogStat{Address: Address(name), LogicalBytes: st.Size, Physical: string(st.Form), PhysicalBytes: st.PhysicalBytes, Retired: st.Retired}, nil
}

// GlobLogs lists the addresses of the logs matching pattern (a logical
// glob, default executions/*.log) that c may read, sorted.
func (s *Session) GlobLogs(c Caller, pattern string) ([]string, error) {
	if pattern == "" {
		pattern = "executions/*.log"
	}
	names, err := s.dir.Glob(strings.TrimPrefix(pattern, "artifact://"))
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, n := range names {
		if s.visible(c, n) {
			out = append(out, Address(n))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ReadResult answers spool/read.
type ReadResult struct {
	Text       string `json:"text"`
	Offset     int64  `json:"offset"`
	Length     int64  `json:"length"`
	TotalBytes int64  `json:"totalBytes"`
	EOF        bool   `json:"eof,omitempty"`
}

// ReadLog reads a byte range (offset, length ≤ 1 MiB) or, when line > 0, a
// range of lines (line is 1-based; lines at most 1 MiB in all). A byte
// range that would end inside a UTF-8 character ends before it; Length says
// how many bytes the text covers, so offset+length is where to go on.
func (s *Session) ReadLog(c Caller, address string, offset, length, line, lines int64) (ReadResult, error) {
	name, err := s.logName(c, address)
	if err != nil {
		return ReadResult{}, err
	}
	if offset < 0 || length < 0 || line < 0 || lines < 0 {
		return ReadResult{}, fault.New(fault.InvalidParams, "offset, length, line and lines must not be negative")
	}
	v, err := s.dir.Open(name)
	if err != nil {
		return ReadResult{}, err
	}
	defer v.Close()
	size := v.Size()
	if line > 0 {
		return readLines(v, line, lines)
	}
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

func readLines(v *spool.View, first, count int64) (ReadResult, error) {
	if count == 0 {
		count = 1 << 62
	}
	var out bytes.Buffer
	pos, offset, prev := int64(0), int64(-1), int64(0)
	open := false // the last line written still lacks its newline
	// Lines hands a line longer than spool.MaxLineBytes over in pieces
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

// GrepParams select what spool/grep searches.
type GrepParams struct {
	Pattern    string   // RE2
	Glob       string   // logical glob; default executions/*.log
	Addresses  []string // instead of Glob
	MaxMatches int      // default 200
	Context    int      // lines before and after each match
}

// GrepLogs searches logs line by line with an RE2 pattern, in file order,
// two files at a time. Each file is read through a view held only while
// it is searched; a cancelled ctx stops the search and releases them.
func (s *Session) GrepLogs(ctx context.Context, c Caller, p GrepParams) (GrepResult, error) {
	re, err := regexp.Compile(p.Pattern)
	if err != nil {
		return GrepResult{}, fault.New(fault.InvalidParams, "pattern: %v", err)
	}
	if p.MaxMatches <= 0 {
		p.MaxMatches = DefaultMaxMatches
	}
	if p.Context < 0 || p.Context > maxGrepContext {
		return GrepResult{}, fault.New(fault.InvalidParams, "context must be between 0 and %d", maxGrepContext)
	}
	var names []string
	if len(p.Addresses) > 0 {
		for _, a := range p.Addresses {
			n, err := s.logName(c, a)
			if err != nil {
				return GrepResult{}, err
			}
			names = append(names, n)
		}
	} else {
		addrs, err := s.GlobLogs(c, p.Glob)
		if err != nil {
			return GrepResult{}, err
		}
		for _, a := range addrs {
			names = append(names, strings.TrimPrefix(a, "artifact://"))
		}
	}
	lit := requiredLiteral(p.Pattern)
	lits := requiredLiterals(p.Pattern)
	// For finding candidates in a whole block: every line that matches re
	// also matches here, and each candidate is checked on its own line.
	block, err := regexp.Compile("(?m:" + p.Pattern + ")")
	if err != nil {
		block = nil
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
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				full := found >= p.MaxMatches
				mu.Unlock()
				if i >= len(names) || full {
					return
				}
				if p.Context == 0 && block != nil {
					results[i], counts[i], errs[i] = s.grepBlocks(ctx, names[i], re, block, lits, p.MaxMatches+1)
				} else {
					results[i], counts[i], errs[i] = s.grepOne(ctx, names[i], re, lit, p.Context, p.MaxMatches+1)
				}
				mu.Lock()
				found += counts[i]
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return GrepResult{}, fault.New(fault.Refused, "the grep was cancelled")
	}
	res := GrepResult{Matches: []Match{}}
	n := 0
	for i := range names {
		if errs[i] != nil {
			return GrepResult{}, errs[i]
		}
		for _, m := range results[i] {
			if !m.Context {
				if n == p.MaxMatches {
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
func (s *Session) grepOne(ctx context.Context, name string, re *regexp.Regexp, lit []byte, context, limit int) ([]Match, int, error) {
	v, err := s.dir.Open(name)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil, 0, nil // removed meanwhile
		}
		return nil, 0, err
	}
	defer v.Close()
	addr := Address(name)
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
func (s *Session) grepBlocks(ctx context.Context, name string, re, block *regexp.Regexp, lits [][]byte, limit int) ([]Match, int, error) {
	v, err := s.dir.Open(name)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil, 0, nil // removed meanwhile
		}
		return nil, 0, err
	}
	defer v.Close()
	addr := Address(name)
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
			return nil, 0, ctx.Err()
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

// retireLater compresses an execution's log once nobody can poll its
// final observation any more, after the session's retireAfterMs.
func (s *Session) retireLater(e *Execution, settledAt time.Time) {
	wait := time.Until(settledAt.Add(time.Duration(s.limits.RetireAfterMs) * time.Millisecond))
	s.Go(func() {
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.closed:
				return
			}
		}
		select {
		case s.retireQ <- "executions/" + e.id + ".log":
		case <-s.closed:
		}
	})
}

// retirer is the session's one background compressor. It and the
// goroutines it compresses with run at lower CPU priority than requests.
func (s *Session) retirer() {
	spool.LowerThreadPriority()
	for {
		select {
		case name := <-s.retireQ:
			res, err := s.dir.Retire(name, spool.RetireOptions{Background: true})
			switch {
			case err != nil:
				logf("execution: retiring %s: %v (the raw log stays)", name, err)
			case res.Retired:
				logf("execution: retired %s: %d → %d bytes", name, res.RawBytes, res.GzipBytes)
			}
		case <-s.closed:
			return
		}
	}
}

package spool

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"golang.org/x/sys/unix"
)

// Rendering a range of the spool as a bounded head/tail observation that
// never splits a UTF-8 character, and the unread cursor's observations.

// Observation is one bounded view of a byte range of the spool.
type Observation struct {
	// Text is the raw bytes shown, as a string. Invalid UTF-8 in the output
	// is passed through untouched; only characters are never split.
	Text     string
	From, To int64 // the byte range covered
	Omitted  int64 // bytes of [From,To) not in Text
}

// Render returns a view of [from,to) of at most maxChars characters (an
// invalid byte counts as one). maxChars <= 0 means DefaultMaxChars; smaller
// values than 200 are raised to 200. The range is clamped to [0,Bytes()].
//
// A range that does not fit is shown as a head, one marker line
// "[... N bytes omitted ...]" and a tail, each end preferring a line
// boundary when that keeps at least half of its share. Only about
// 4*maxChars bytes are read from each end, whatever the range's size.
func (s *Spool) Render(from, to int64, maxChars int) (Observation, error) {
	if from < 0 || to < from {
		return Observation{}, fault.New(fault.InvalidParams, "spool: bad range [%d,%d)", from, to)
	}
	maxChars = normMaxChars(maxChars)
	if b := s.Bytes(); to > b {
		to = b
		from = min(from, to)
	}
	if from == to {
		return Observation{From: from, To: to}, nil
	}
	f, err := s.open()
	if err != nil {
		return Observation{}, err
	}
	defer f.Close()

	n := to - from
	if n <= 4*int64(maxChars)+8 {
		buf, err := s.readAt(f, from, n)
		if err != nil {
			return Observation{}, err
		}
		to = from + int64(len(buf)) // shorter only if the limit cut raced us
		if utf8.RuneCount(buf) <= maxChars {
			return Observation{Text: string(buf), From: from, To: to}, nil
		}
		return split(buf, buf, true, from, to, maxChars), nil
	}

	// More than 4*maxChars bytes are always more than maxChars characters,
	// so the range will be split: read just enough of each end.
	hb, tb := budgets(n, maxChars)
	head, err := s.readAt(f, from, chunkLen(hb))
	if err != nil {
		return Observation{}, err
	}
	tailFrom := to - chunkLen(tb)
	tail, err := s.readAt(f, tailFrom, chunkLen(tb))
	if err != nil {
		return Observation{}, err
	}
	to = tailFrom + int64(len(tail))
	return split(head, tail, false, from, to, maxChars), nil
}

// ObserveUnread renders [Cursor(), end) and moves the cursor to end. Unless
// final, end stops before an incomplete UTF-8 sequence at the end of the
// spool, since the writer may be in the middle of a character; those bytes
// come with the next observation. With final (the writer is done), end is
// Bytes().
func (s *Spool) ObserveUnread(maxChars int, final bool) (Observation, error) {
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	s.mu.Lock()
	from, end := s.cursor, s.bytes
	if !final {
		end -= int64(s.partial)
	}
	s.mu.Unlock()
	end = max(end, from)
	obs, err := s.Render(from, end, maxChars)
	if err != nil {
		return Observation{}, err
	}
	s.mu.Lock()
	s.cursor = min(obs.To, s.bytes)
	s.mu.Unlock()
	return obs, nil
}

// PeekUnread renders [Cursor(), Bytes()) without moving the cursor: a
// pending delivery shows the final output while only its acknowledgement
// may consume it.
func (s *Spool) PeekUnread(maxChars int) (Observation, error) {
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	s.mu.Lock()
	from, end := s.cursor, s.bytes
	s.mu.Unlock()
	return s.Render(from, max(end, from), maxChars)
}

// ConsumeTo moves the cursor forward to to (never backward, never past
// Bytes()).
func (s *Spool) ConsumeTo(to int64) {
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	s.mu.Lock()
	s.cursor = max(s.cursor, min(to, s.bytes))
	s.mu.Unlock()
}

// Tail returns the last maxChars characters of the spool (maxChars <= 0
// means DefaultMaxChars), starting after a '\n' when that keeps at least half
// of them. An incomplete character at the very end is left out, as the
// writer may still be completing it. The cursor does not move.
func (s *Spool) Tail(maxChars int) (string, error) {
	if maxChars <= 0 {
		maxChars = DefaultMaxChars
	}
	maxChars = min(maxChars, maxMaxChars)
	s.mu.Lock()
	end := s.bytes - int64(s.partial)
	s.mu.Unlock()
	if end <= 0 {
		return "", nil
	}
	start := max(0, end-chunkLen(maxChars))
	f, err := s.open()
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf, err := s.readAt(f, start, end-start)
	if err != nil {
		return "", err
	}
	i := cutTail(buf, maxChars, start > 0)
	return string(buf[i:]), nil
}

// split builds the head + marker + tail view of [from,to). head holds the
// first bytes of the range and tail the last ones; same says both are the
// whole range.
func split(head, tail []byte, same bool, from, to int64, maxChars int) Observation {
	hb, tb := budgets(to-from, maxChars)
	h := cutHead(head, hb)
	t := cutTail(tail, tb, true)
	if same {
		t = max(t, h) // cannot happen for more than maxChars characters; never show a byte twice
	}
	headPart, tailPart := head[:h], tail[t:]
	omitted := to - from - int64(len(headPart)) - int64(len(tailPart))

	var b []byte
	b = append(b, headPart...)
	if len(headPart) > 0 && headPart[len(headPart)-1] != '\n' {
		b = append(b, '\n')
	}
	b = append(b, "[... "...)
	b = strconv.AppendInt(b, omitted, 10)
	b = append(b, " bytes omitted ...]\n"...)
	b = append(b, tailPart...)
	return Observation{Text: string(b), From: from, To: to, Omitted: omitted}
}

// budgets splits maxChars, less room for the marker line, between head and
// tail. The marker's number is at most n, so its width is known up front.
func budgets(n int64, maxChars int) (head, tail int) {
	marker := len("\n[... ") + len(strconv.FormatInt(n, 10)) + len(" bytes omitted ...]\n")
	rest := maxChars - marker
	head = rest / 2
	return head, rest - head
}

// chunkLen is how many bytes are certain to hold chars characters (and a
// few spare so a decoder never runs into the end of a partial read).
func chunkLen(chars int) int64 { return 4*int64(chars) + 4 }

// cutHead returns the length of the head of b: at most budget characters,
// ending after the last '\n' in it when that keeps at least half the budget.
func cutHead(b []byte, budget int) int {
	i := 0
	for c := 0; c < budget && i < len(b); c++ {
		_, w := utf8.DecodeRune(b[i:])
		i += w
	}
	if j := bytes.LastIndexByte(b[:i], '\n'); j >= 0 && 2*utf8.RuneCount(b[:j+1]) >= budget {
		i = j + 1
	}
	return i
}

// cutTail returns where the tail of b starts: at most budget characters from
// the end, starting after the first '\n' in it when that keeps at least half
// the budget. Unless cutting (b is known to be only the end of something
// longer), a b that fits whole is returned whole.
func cutTail(b []byte, budget int, cutting bool) int {
	i := len(b)
	for c := 0; c < budget && i > 0; c++ {
		_, w := utf8.DecodeLastRune(b[:i])
		i -= w
	}
	if i == 0 && !cutting {
		return 0
	}
	if j := bytes.IndexByte(b[i:], '\n'); j >= 0 {
		if k := i + j + 1; 2*utf8.RuneCount(b[k:]) >= budget {
			i = k
		}
	}
	return i
}

func normMaxChars(n int) int {
	switch {
	case n <= 0:
		return DefaultMaxChars
	case n < minMaxChars:
		return minMaxChars
	case n > maxMaxChars:
		return maxMaxChars
	}
	return n
}

// RenderFile renders [from,to) of a spool file that no Spool of this
// process holds (one a previous helper wrote), as Render does. The file's
// identity is taken from a descriptor opened beneath its directory, which
// is itself opened without following a link, and Render reads only a file
// with that identity; a file with more than one link is refused.
func RenderFile(path string, from, to int64, maxChars int) (Observation, error) {
	dfd, err := openNoInterrupt(func() (int, error) {
		return unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return Observation{}, ioErr("open", filepath.Dir(path), err)
	}
	dir := &execDir{f: os.NewFile(uintptr(dfd), filepath.Dir(path)), fd: dfd, path: filepath.Dir(path)}
	defer dir.Close()
	f, _, err := dir.open(filepath.Base(path), path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Observation{}, ioErr("open", path, err)
		}
		return Observation{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Observation{}, ioErr("stat", path, err)
	}
	s := &Spool{path: path, ident: st, bytes: st.Size()}
	return s.Render(from, to, maxChars)
}

// Package spool keeps a command's output on disk instead of in memory.
//
// A Spool is one file that a single writer goroutine appends to (the copier
// draining the child's stdout/stderr) while any number of other goroutines
// observe it. It is capped: bytes past the limit are counted and discarded,
// and the file is cut back so it never ends inside a UTF-8 character. It
// keeps an unread cursor, so the owner can ask for "what is new since I last
// looked", and every view it hands out is bounded in size (a head, a marker
// line and a tail) and is computed by reading only the two ends of a range,
// so observing a huge output costs as little as observing a small one.
package spool

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"golang.org/x/sys/unix"
)

const (
	// DefaultLimit is the cap used when Create is given a limit <= 0.
	DefaultLimit = 64 << 20
	// DefaultMaxChars is the view size used when a maxChars <= 0 is given.
	DefaultMaxChars = 2000
	// minMaxChars keeps room for the marker line next to a useful head and tail.
	minMaxChars = 200
	// maxMaxChars only keeps the byte arithmetic (4 bytes per character) far
	// from overflow; no real view comes close.
	maxMaxChars = 1 << 40
)

// ErrLimit is returned by Write once output has gone past the spool's limit.
var ErrLimit = errors.New("spool: output limit reached")

// Spool is a capped on-disk output buffer with one writer and many observers.
//
// The locks keep the writer and the observers out of each other's way: wmu
// serializes Write and Close (so Close never pulls the file out from under a
// write) and is never taken by readers; mu guards the small published state
// and is held only for a few assignments, never across a system call; obsMu
// orders ObserveUnread calls, which read the file, without involving either.
type Spool struct {
	path  string
	limit int64
	ident os.FileInfo // the file we created; reads reopen path and must find it again

	wmu      sync.Mutex
	wf       *os.File // guarded by wmu; nil after Close
	size     int64    // guarded by wmu; the writer's own copy of the file size
	tail     tailBuf  // guarded by wmu; the last bytes of the file
	wlimited bool     // guarded by wmu
	werr     error    // guarded by wmu
	ahead    int64    // guarded by wmu; the file's blocks are allocated up to here
	noAhead  bool     // guarded by wmu; the filesystem cannot allocate ahead

	// obsMu serializes ObserveUnread so two callers never get the same bytes.
	obsMu sync.Mutex

	mu      sync.Mutex
	bytes   int64 // guarded by mu; never more than the file holds
	nl      int64 // guarded by mu; '\n' bytes in the file
	endsNL  bool  // guarded by mu; the file's last byte is '\n'
	partial int   // guarded by mu; length of an incomplete UTF-8 sequence at the end
	dropped int64 // guarded by mu
	limited bool  // guarded by mu
	failed  error // guarded by mu
	cursor  int64 // guarded by mu
}

// Create creates a new spool file at path (which must not exist; its parent
// must) with mode 0600, capped at limit bytes (limit <= 0 means DefaultLimit).
func Create(path string, limit int64) (*Spool, error) {
	// O_NOFOLLOW and O_EXCL: never write through a planted symlink or into
	// someone else's file.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, ioErr("create", path, err)
	}
	return adopt(path, f, limit, func() { os.Remove(path) })
}

// adopt makes the file just created at path a spool: exactly 0600, since
// the umask may have narrowed the mode and output can hold secrets. On
// failure it closes f and calls remove.
func adopt(path string, f *os.File, limit int64, remove func()) (*Spool, error) {
	err := f.Chmod(0o600)
	if err != nil {
		err = ioErr("chmod", path, err)
	}
	var s *Spool
	if err == nil {
		s, err = newFromFile(path, f, limit)
	}
	if err != nil {
		f.Close()
		remove()
		return nil, err
	}
	return s, nil
}

// newFromFile wraps an already-open file at offset 0; tests use it to make a
// spool whose writes fail (/dev/full).
func newFromFile(path string, f *os.File, limit int64) (*Spool, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	st, err := f.Stat()
	if err != nil {
		return nil, ioErr("stat", path, err)
	}
	return &Spool{path: path, limit: limit, ident: st, wf: f}, nil
}

// Write appends p, keeping bytes up to the limit. The write that first goes
// past the limit keeps what fits, cuts the file back to the end of the last
// complete UTF-8 character and returns ErrLimit; later writes discard their
// bytes (see Dropped) and return ErrLimit too. In both cases n is len(p), so
// a copy loop that ignores ErrLimit keeps draining the pipe without spinning.
// A failed file write returns a fault.IO error and fails the spool: later
// writes return the same error without writing.
func (s *Spool) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr != nil {
		return 0, s.werr
	}
	if s.wf == nil {
		return 0, ioErr("write", s.path, os.ErrClosed)
	}
	if s.wlimited {
		s.mu.Lock()
		s.dropped += int64(len(p))
		s.mu.Unlock()
		return len(p), ErrLimit
	}
	room := s.limit - s.size
	if int64(len(p)) <= room {
		if len(p) == 0 {
			return 0, nil
		}
		s.allocateAhead(s.size + int64(len(p)))
		n, err := s.writeFile(p)
		s.commit(p[:n])
		if err != nil {
			return n, s.fail("write", err)
		}
		return n, nil
	}
	return s.overflow(p, room)
}

// writePiece is the largest write(2) of the log. Buffered writes of 128
// KiB and more cost the kernel many times the CPU of the same bytes in 64
// KiB writes (a 6.18 kernel on ext4: 2.3 s against 0.09 s for 256 MiB in
// 256 KiB writes), which the output's reads of up to 256 KiB would pay.
const writePiece = 64 << 10

func (s *Spool) writeFile(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := s.wf.Write(p[n:min(len(p), n+writePiece)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// While output floods, the file's blocks are allocated ahead of its
// writes (fallocate, the size kept): a buffered write into allocated
// blocks skips the filesystem's per-block delayed allocation, on ext4
// about a third of the kernel's CPU for the write (0.14 against 0.22 ms
// per MiB in 64 KiB writes). Nothing is allocated past the limit, and
// what is allocated past the end is given back when the spool is closed.
// A filesystem short of space gets its blocks only as they are written,
// so the allocation never takes room another write needs.
const (
	aheadAfter = 8 << 20 // output before anything is allocated ahead
	aheadStep  = 8 << 20 // allocated at a time
	aheadSpare = 1 << 30 // free space left over after a step, at least
)

// allocateAhead makes sure the file's blocks up to end (and a step
// beyond, within the limit) are allocated, once the output is large.
// Failures only mean the writes allocate as they go.
func (s *Spool) allocateAhead(end int64) {
	if end <= s.ahead || s.size < aheadAfter || s.noAhead {
		return
	}
	from, to := max(s.ahead, s.size), min(s.limit, end+aheadStep)
	rc, err := s.wf.SyscallConn()
	if err != nil {
		s.noAhead = true
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var st unix.Statfs_t
		if unix.Fstatfs(int(fd), &st) != nil || int64(st.Bavail)*int64(st.Bsize) < aheadSpare+to-from {
			return
		}
		switch err := unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, from, to-from); {
		case err == nil:
			s.ahead = to
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.ENODEV):
			s.noAhead = true
		}
	})
}

// overflow handles the write that crosses the limit: keep p[:room], minus an
// incomplete character at the end, which may have started in an earlier
// write and so already be in the file.
func (s *Spool) overflow(p []byte, room int64) (int, error) {
	keep := p[:room]
	t := s.tail
	t.push(keep)
	cut := PartialLen(t.bytes())
	if cut <= len(keep) {
		w := keep[:len(keep)-cut]
		if len(w) > 0 {
			n, err := s.writeFile(w)
			s.commit(w[:n])
			if err != nil {
				return n, s.fail("write", err)
			}
		}
	} else {
		// Part of the character is already on disk. Publish the smaller
		// size before truncating so no reader is told about bytes that are
		// about to disappear.
		back := cut - len(keep)
		size := s.size - int64(back)
		s.tail.drop(back)
		s.mu.Lock()
		s.bytes = size
		s.endsNL, s.partial = s.tail.state()
		s.cursor = min(s.cursor, size)
		s.mu.Unlock()
		s.size = size
		if err := s.wf.Truncate(size); err != nil {
			return 0, s.fail("truncate", err)
		}
	}
	s.wlimited = true
	s.mu.Lock()
	s.limited = true
	// Everything received but not kept, including a cut-off partial
	// character, so Bytes()+Dropped() is the total output.
	s.dropped += int64(len(p)) - room + int64(cut)
	s.mu.Unlock()
	return len(p), ErrLimit
}

// commit records b as appended to the file and publishes the new state.
func (s *Spool) commit(b []byte) {
	if len(b) == 0 {
		return
	}
	s.size += int64(len(b))
	s.tail.push(b)
	nl := int64(bytes.Count(b, []byte{'\n'}))
	endsNL, partial := s.tail.state()
	s.mu.Lock()
	s.bytes = s.size
	s.nl += nl
	s.endsNL = endsNL
	s.partial = partial
	s.mu.Unlock()
}

func (s *Spool) fail(op string, err error) error {
	e := ioErr(op, s.path, err)
	s.werr = e
	s.mu.Lock()
	s.failed = e
	s.mu.Unlock()
	return e
}

// Close closes the write side. It is idempotent; reads keep working.
func (s *Spool) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wf == nil {
		return nil
	}
	s.trimAhead()
	err := s.wf.Close()
	s.wf = nil
	if err != nil {
		return ioErr("close", s.path, err)
	}
	return nil
}

// trimAhead gives back the blocks allocated past the end: truncating to
// the same size frees them.
func (s *Spool) trimAhead() {
	if s.ahead > s.size {
		_ = s.wf.Truncate(s.size)
		s.ahead = 0
	}
}

// Stats is the spool's published state at one instant: its counters agree
// with each other, as separate reads would not while output arrives.
type Stats struct {
	Bytes int64 // bytes in the file
	// Lines counts '\n' bytes, plus one for a non-empty unterminated last
	// line.
	Lines  int64
	Cursor int64 // the offset up to which the owner has observed the output
	Unread int64 // bytes past the cursor
	// Dropped counts bytes received but not kept because of the limit
	// (including a partial character cut off at the limit).
	Dropped int64
	Limited bool  // output went past the limit
	Failed  error // what failed the spool, or nil
}

// Stats returns the counters, read under one lock.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := s.nl
	if s.bytes > 0 && !s.endsNL {
		lines++
	}
	return Stats{
		Bytes: s.bytes, Lines: lines, Cursor: s.cursor, Unread: s.bytes - s.cursor,
		Dropped: s.dropped, Limited: s.limited, Failed: s.failed,
	}
}

// Bytes, Lines, Dropped, Limited, Failed, Cursor and Unread read one field
// of Stats.
func (s *Spool) Bytes() int64   { return s.Stats().Bytes }
func (s *Spool) Lines() int64   { return s.Stats().Lines }
func (s *Spool) Dropped() int64 { return s.Stats().Dropped }
func (s *Spool) Limited() bool  { return s.Stats().Limited }
func (s *Spool) Failed() error  { return s.Stats().Failed }
func (s *Spool) Cursor() int64  { return s.Stats().Cursor }
func (s *Spool) Unread() int64  { return s.Stats().Unread }

// Path returns the spool file's path.
func (s *Spool) Path() string { return s.path }

// open opens the spool file for reading. A fresh descriptor per read keeps
// reads independent of Close and leaves nothing open between calls; the
// identity check makes sure the path still names the file we created.
func (s *Spool) open() (*os.File, error) {
	f, err := os.OpenFile(s.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, ioErr("open", s.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, ioErr("stat", s.path, err)
	}
	if !os.SameFile(st, s.ident) {
		f.Close()
		return nil, fault.New(fault.IO, "spool: open %s: file was replaced", s.path)
	}
	return f, nil
}

// readAt reads up to n bytes at off. A short result is not an error: the
// limit cut can shorten the file by a few bytes after Bytes() was read.
func (s *Spool) readAt(f *os.File, off, n int64) ([]byte, error) {
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return nil, ioErr("read", s.path, err)
	}
	return buf[:got], nil
}

// ioErr wraps an I/O failure as fault.IO, dropping *PathError's own
// "op path:" prefix so the message names the path once.
func ioErr(op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fault.New(fault.IO, "spool: %s %s: %w", op, path, err)
}

// PartialLen returns the length of an incomplete UTF-8 sequence at the end
// of b: a lead byte followed by too few continuation bytes, which more
// bytes could still complete. Invalid bytes are complete characters.
func PartialLen(b []byte) int {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// tailBuf holds the last few bytes written: enough to find an incomplete
// character at the end (3 bytes) and still know the last byte after cutting
// it off, without reading the file back.
type tailBuf struct {
	b [2*utf8.UTFMax - 1]byte
	n int
}

func (t *tailBuf) push(p []byte) {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
		return
	}
	keep := min(t.n, len(t.b)-len(p))
	copy(t.b[:], t.b[t.n-keep:t.n])
	t.n = keep + copy(t.b[keep:], p)
}

func (t *tailBuf) drop(k int) { t.n -= k }

func (t *tailBuf) bytes() []byte { return t.b[:t.n] }

// state derives the published end-of-file facts from the buffer.
func (t *tailBuf) state() (endsNL bool, partial int) {
	b := t.bytes()
	return len(b) > 0 && b[len(b)-1] == '\n', PartialLen(b)
}

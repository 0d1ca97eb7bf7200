package spool

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

func newSpool(t testing.TB, limit int64) *Spool {
	t.Helper()
	s, err := Create(filepath.Join(t.TempDir(), "out"), limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustWrite(t *testing.T, s *Spool, p string) {
	t.Helper()
	n, err := s.Write([]byte(p))
	if err != nil || n != len(p) {
		t.Fatalf("Write(%q) = %d, %v", p, n, err)
	}
}

func fileBytes(t *testing.T, s *Spool) []byte {
	t.Helper()
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCreateMode(t *testing.T) {
	t.Parallel()
	// A umask that would narrow 0600 to 0400; Create must set 0600 anyway.
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	s := newSpool(t, 0)
	st, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Fatalf("mode %o, want 600", m)
	}
}

func TestCreateExclusive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(p, 0); fault.KindOf(err) != fault.IO {
		t.Fatalf("Create over existing file: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(link, 0); err == nil {
		t.Fatal("Create through a symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "target")); !os.IsNotExist(err) {
		t.Fatal("symlink target was created")
	}
}

func TestCountersAndLines(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 0)
	if s.Lines() != 0 || s.Bytes() != 0 {
		t.Fatal("empty spool not empty")
	}
	mustWrite(t, s, "a")
	if s.Lines() != 1 {
		t.Fatalf("Lines = %d, want 1", s.Lines())
	}
	mustWrite(t, s, "\n")
	if s.Lines() != 1 {
		t.Fatalf("Lines = %d, want 1", s.Lines())
	}
	mustWrite(t, s, "b\nc\n\nd")
	if s.Lines() != 5 || s.Bytes() != 8 {
		t.Fatalf("Lines, Bytes = %d, %d; want 5, 8", s.Lines(), s.Bytes())
	}
	if s.Limited() || s.Dropped() != 0 || s.Failed() != nil {
		t.Fatal("unexpected limit or failure")
	}
}

func TestLimitExact(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 10)
	mustWrite(t, s, "01234")
	mustWrite(t, s, "56789")
	if s.Limited() || s.Bytes() != 10 {
		t.Fatalf("exactly at limit: Limited=%v Bytes=%d", s.Limited(), s.Bytes())
	}
	n, err := s.Write([]byte("x"))
	if n != 1 || !errors.Is(err, ErrLimit) {
		t.Fatalf("Write past limit = %d, %v", n, err)
	}
	if got := fileBytes(t, s); string(got) != "0123456789" {
		t.Fatalf("file %q", got)
	}
	if !s.Limited() || s.Dropped() != 1 {
		t.Fatalf("Limited=%v Dropped=%d", s.Limited(), s.Dropped())
	}
	n, err = s.Write([]byte("more"))
	if n != 4 || !errors.Is(err, ErrLimit) || s.Dropped() != 5 || s.Bytes() != 10 {
		t.Fatalf("later Write = %d, %v; Dropped=%d Bytes=%d", n, err, s.Dropped(), s.Bytes())
	}
}

func TestLimitOneByteOver(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 10)
	n, err := s.Write([]byte("0123456789a"))
	if n != 11 || !errors.Is(err, ErrLimit) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	st, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 10 || s.Bytes() != 10 || s.Dropped() != 1 {
		t.Fatalf("size %d Bytes %d Dropped %d", st.Size(), s.Bytes(), s.Dropped())
	}
}

func TestLimitSplitsCharacter(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"é", "日", "😀"} {
		// k: how many bytes of c fit under the limit (1..len(c)-1).
		for k := 1; k < len(c); k++ {
			limit := int64(2 + k)
			// j: how many bytes of c go in the first write; j == 0 puts
			// the whole character in the crossing write, j == k makes the
			// first write end exactly at the limit.
			for j := 0; j <= k; j++ {
				name := fmt.Sprintf("%s/fit%d/first%d", c, k, j)
				t.Run(name, func(t *testing.T) {
					s := newSpool(t, limit)
					mustWrite(t, s, "ab"+c[:j])
					rest := c[j:] + "z"
					n, err := s.Write([]byte(rest))
					if n != len(rest) || !errors.Is(err, ErrLimit) {
						t.Fatalf("Write = %d, %v", n, err)
					}
					if got := fileBytes(t, s); string(got) != "ab" {
						t.Fatalf("file %q, want %q", got, "ab")
					}
					if s.Bytes() != 2 || s.Bytes() >= limit {
						t.Fatalf("Bytes = %d", s.Bytes())
					}
					total := int64(2 + len(c) + 1)
					if s.Dropped() != total-2 {
						t.Fatalf("Dropped = %d, want %d", s.Dropped(), total-2)
					}
					if s.Lines() != 1 {
						t.Fatalf("Lines = %d", s.Lines())
					}
					obs, err := s.ObserveUnread(0, false)
					if err != nil || obs.Text != "ab" {
						t.Fatalf("ObserveUnread = %+v, %v", obs, err)
					}
				})
			}
		}
		// The limit falls between characters: keep exactly the limit.
		t.Run(c+"/between", func(t *testing.T) {
			s := newSpool(t, int64(2+len(c)))
			n, err := s.Write([]byte("ab" + c + "\nz"))
			if n != 2+len(c)+2 || !errors.Is(err, ErrLimit) {
				t.Fatalf("Write = %d, %v", n, err)
			}
			if got := fileBytes(t, s); string(got) != "ab"+c {
				t.Fatalf("file %q", got)
			}
			if s.Dropped() != 2 {
				t.Fatalf("Dropped = %d", s.Dropped())
			}
		})
	}
}

func TestLimitCutAfterNewline(t *testing.T) {
	t.Parallel()
	// The cut leaves the file ending in '\n': Lines must follow.
	s := newSpool(t, 4)
	mustWrite(t, s, "a\n\xe6")
	if s.Lines() != 2 {
		t.Fatalf("Lines = %d", s.Lines())
	}
	if _, err := s.Write([]byte("\x97\xa5")); !errors.Is(err, ErrLimit) {
		t.Fatal(err)
	}
	if s.Bytes() != 2 || s.Lines() != 1 || string(fileBytes(t, s)) != "a\n" {
		t.Fatalf("Bytes=%d Lines=%d file=%q", s.Bytes(), s.Lines(), fileBytes(t, s))
	}
}

func TestFailedWrite(t *testing.T) {
	t.Parallel()
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newFromFile("/dev/full", f, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Write([]byte("hello"))
	if fault.KindOf(err) != fault.IO || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write = %v", err)
	}
	if s.Failed() == nil || s.Bytes() != 0 {
		t.Fatalf("Failed=%v Bytes=%d", s.Failed(), s.Bytes())
	}
	n, err2 := s.Write([]byte("again"))
	if n != 0 || err2 != s.Failed() {
		t.Fatalf("later Write = %d, %v", n, err2)
	}
}

func TestCloseThenRead(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 0)
	mustWrite(t, s, "hello\n")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Write([]byte("x")); fault.KindOf(err) != fault.IO {
		t.Fatalf("Write after Close = %v", err)
	}
	if s.Failed() != nil {
		t.Fatal("Write after Close failed the spool")
	}
	obs, err := s.ObserveUnread(0, true)
	if err != nil || obs.Text != "hello\n" {
		t.Fatalf("ObserveUnread after Close = %+v, %v", obs, err)
	}
}

// TestNoDescriptorLeak counts the process's descriptors, so it runs alone.
func TestNoDescriptorLeak(t *testing.T) {
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := count()
	s, err := Create(filepath.Join(t.TempDir(), "out"), 0)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, strings.Repeat("line\n", 10000))
	for range 50 {
		if _, err := s.Render(0, s.Bytes(), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Tail(100); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if _, err := s.Render(0, 10, 0); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before {
		t.Fatalf("descriptors: %d before, %d after", before, after)
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{0, 300001} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			s := newSpool(t, limit)
			rnd := rand.New(rand.NewSource(1))
			var data []byte
			words := []string{"a", "é", "日本", "😀", "\n", "line ", "\xff"}
			for len(data) < 400000 {
				data = append(data, words[rnd.Intn(len(words))]...)
			}

			type piece struct {
				from int64
				text string
			}
			var (
				mu     sync.Mutex
				pieces []piece
				done   = make(chan struct{})
				wg     sync.WaitGroup
			)
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						obs, err := s.ObserveUnread(1<<40, false)
						if err != nil {
							t.Error(err)
							return
						}
						if obs.Omitted != 0 {
							t.Error("omitted with a huge maxChars")
						}
						if obs.Text != "" {
							mu.Lock()
							pieces = append(pieces, piece{obs.From, obs.Text})
							mu.Unlock()
						}
						if _, err := s.Tail(50); err != nil {
							t.Error(err)
						}
						if _, err := s.Render(0, s.Bytes(), 300); err != nil {
							t.Error(err)
						}
						_ = s.Lines() + s.Dropped() + s.Unread()
					}
				}()
			}
			for rest := data; len(rest) > 0; {
				n := min(len(rest), 1+rnd.Intn(5000))
				if _, err := s.Write(rest[:n]); err != nil && !errors.Is(err, ErrLimit) {
					t.Fatal(err)
				}
				rest = rest[n:]
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			close(done)
			wg.Wait()
			obs, err := s.ObserveUnread(1<<40, true)
			if err != nil {
				t.Fatal(err)
			}
			pieces = append(pieces, piece{obs.From, obs.Text})

			sort.Slice(pieces, func(i, j int) bool { return pieces[i].from < pieces[j].from })
			var got strings.Builder
			for _, p := range pieces {
				if int64(got.Len()) != p.from {
					t.Fatalf("gap or overlap at %d", p.from)
				}
				got.WriteString(p.text)
			}
			file := fileBytes(t, s)
			if got.String() != string(file) {
				t.Fatalf("observed %d bytes, file has %d", got.Len(), len(file))
			}
			if limit == 0 && string(file) != string(data) {
				t.Fatal("file differs from written data")
			}
			if limit > 0 {
				if !s.Limited() || int64(len(file)) > limit || !bytes.HasPrefix(data, file) {
					t.Fatalf("limited=%v file %d bytes", s.Limited(), len(file))
				}
				if s.Bytes()+s.Dropped() != int64(len(data)) {
					t.Fatalf("Bytes %d + Dropped %d != %d", s.Bytes(), s.Dropped(), len(data))
				}
			}
			wantLines := int64(bytes.Count(file, []byte("\n")))
			if len(file) > 0 && file[len(file)-1] != '\n' {
				wantLines++
			}
			if s.Lines() != wantLines {
				t.Fatalf("Lines = %d, want %d", s.Lines(), wantLines)
			}
		})
	}
}

func BenchmarkWrite(b *testing.B) {
	chunk := bytes.Repeat([]byte("benchmark output line\n"), 64<<10/22+1)[:64<<10]
	b.SetBytes(int64(len(chunk)))
	dir := b.TempDir()
	var s *Spool
	written := int64(0)
	open := func() {
		if s != nil {
			s.Close()
			os.Remove(s.Path())
		}
		var err error
		s, err = Create(filepath.Join(dir, fmt.Sprint("out", written)), 1<<62)
		if err != nil {
			b.Fatal(err)
		}
	}
	open()
	for b.Loop() {
		// Keep the file at most 1 GiB so long runs don't fill the disk.
		if s.Bytes() >= 1<<30 {
			b.StopTimer()
			open()
			b.StartTimer()
		}
		if _, err := s.Write(chunk); err != nil {
			b.Fatal(err)
		}
		written += int64(len(chunk))
	}
	s.Close()
}

// BenchmarkWriteFile is the baseline: plain os.File writes, like cat > file.
func BenchmarkWriteFile(b *testing.B) {
	chunk := bytes.Repeat([]byte("benchmark output line\n"), 64<<10/22+1)[:64<<10]
	b.SetBytes(int64(len(chunk)))
	dir := b.TempDir()
	var f *os.File
	size, n := int64(0), 0
	open := func() {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
		var err error
		f, err = os.Create(filepath.Join(dir, fmt.Sprint("raw", n)))
		if err != nil {
			b.Fatal(err)
		}
		n++
		size = 0
	}
	open()
	for b.Loop() {
		if size >= 1<<30 {
			b.StopTimer()
			open()
			b.StartTimer()
		}
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
		size += int64(len(chunk))
	}
	f.Close()
}

// diskBytes is the space the file at path takes on disk.
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// writeZeros writes n zero bytes in 64 KiB writes, as a copier would.
func writeZeros(t *testing.T, s *Spool, n int) error {
	t.Helper()
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, len(buf))
		if _, err := s.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// TestLargeOutputAllocatedAheadThenTrimmed: past aheadAfter, a log's
// blocks are allocated ahead of its writes; once closed it takes no more
// space than its bytes, and holds exactly them.
func TestLargeOutputAllocatedAheadThenTrimmed(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 64<<20)
	const n = aheadAfter + 1<<20
	if err := writeZeros(t, s, n); err != nil {
		t.Fatal(err)
	}
	if got := diskBytes(t, s.Path()); got < n+aheadStep/2 {
		t.Errorf("%d bytes written take %d bytes on disk, want at least %d allocated ahead", n, got, n+aheadStep/2)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := diskBytes(t, s.Path()); got > n+64<<10 {
		t.Errorf("closed log of %d bytes takes %d bytes on disk, want what was allocated ahead given back", n, got)
	}
	if b := fileBytes(t, s); len(b) != n || bytes.IndexFunc(b, func(r rune) bool { return r != 0 }) >= 0 {
		t.Errorf("closed log holds %d bytes, want the %d zero bytes written", len(b), n)
	}
}

// TestAllocationStaysWithinLimit: nothing is allocated ahead past a
// log's limit.
func TestAllocationStaysWithinLimit(t *testing.T) {
	t.Parallel()
	const limit = aheadAfter + 2<<20
	s := newSpool(t, limit)
	if err := writeZeros(t, s, aheadAfter+1<<20); err != nil {
		t.Fatal(err)
	}
	if got := diskBytes(t, s.Path()); got > limit+64<<10 {
		t.Errorf("log with a %d byte limit takes %d bytes on disk, want nothing allocated past the limit", int64(limit), got)
	}
}

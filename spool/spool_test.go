package spool

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unicode/utf8"

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

func TestRenderSmall(t *testing.T) {
	s := newSpool(t, 0)
	mustWrite(t, s, "one\ntwo\nthree")
	obs, err := s.Render(0, s.Bytes(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Text != "one\ntwo\nthree" || obs.Omitted != 0 || obs.From != 0 || obs.To != 13 {
		t.Fatalf("%+v", obs)
	}
	obs, err = s.Render(4, 7, 0)
	if err != nil || obs.Text != "two" {
		t.Fatalf("%+v, %v", obs, err)
	}
	// 1000 four-byte characters: 4000 bytes, but fits 1000 characters.
	s2 := newSpool(t, 0)
	mustWrite(t, s2, strings.Repeat("😀", 1000))
	obs, err = s2.Render(0, s2.Bytes(), 1000)
	if err != nil || obs.Omitted != 0 || utf8.RuneCountInString(obs.Text) != 1000 {
		t.Fatalf("Omitted=%d err=%v", obs.Omitted, err)
	}
	if _, err := s.Render(5, 4, 0); fault.KindOf(err) != fault.InvalidParams {
		t.Fatalf("bad range: %v", err)
	}
	obs, err = s.Render(0, 1<<40, 0)
	if err != nil || obs.To != s.Bytes() {
		t.Fatalf("clamped range: %+v, %v", obs, err)
	}
}

var markerRE = regexp.MustCompile(`(?m)^\[\.\.\. (\d+) bytes omitted \.\.\.\]$`)

// checkSplit checks a head/marker/tail observation of data[obs.From:obs.To].
func checkSplit(t *testing.T, data []byte, obs Observation, maxChars int, lines bool) {
	t.Helper()
	rng := data[obs.From:obs.To]
	if n := utf8.RuneCountInString(obs.Text); n > maxChars {
		t.Fatalf("%d characters, max %d", n, maxChars)
	}
	if utf8.Valid(rng) && !utf8.ValidString(obs.Text) {
		t.Fatal("split a character")
	}
	if m := markerRE.FindAllString(obs.Text, -1); len(m) != 1 {
		t.Fatalf("%d marker lines", len(m))
	}
	marker := fmt.Sprintf("[... %d bytes omitted ...]\n", obs.Omitted)
	i := strings.Index(obs.Text, marker)
	if i <= 0 || obs.Text[i-1] != '\n' {
		t.Fatalf("marker %q not at a line start", marker)
	}
	head, tail := obs.Text[:i], obs.Text[i+len(marker):]
	if !lines {
		head = strings.TrimSuffix(head, "\n") // the added line break
	}
	if !bytes.HasPrefix(rng, []byte(head)) {
		t.Fatal("head is not a prefix of the range")
	}
	if !bytes.HasSuffix(rng, []byte(tail)) {
		t.Fatal("tail is not a suffix of the range")
	}
	if obs.Omitted+int64(len(head))+int64(len(tail)) != obs.To-obs.From {
		t.Fatalf("omitted %d + head %d + tail %d != %d", obs.Omitted, len(head), len(tail), obs.To-obs.From)
	}
	if lines {
		if !strings.HasSuffix(head, "\n") {
			t.Fatal("head does not end at a line boundary")
		}
		if k := len(rng) - len(tail); rng[k-1] != '\n' {
			t.Fatal("tail does not start at a line boundary")
		}
	}
	// Both ends should use a fair share of the budget.
	if utf8.RuneCountInString(head) < maxChars/5 || utf8.RuneCountInString(tail) < maxChars/5 {
		t.Fatalf("head %d / tail %d characters of %d", utf8.RuneCountInString(head), utf8.RuneCountInString(tail), maxChars)
	}
}

func TestRenderLarge(t *testing.T) {
	var numbered bytes.Buffer
	for i := 0; numbered.Len() < 1<<20; i++ {
		fmt.Fprintf(&numbered, "line %06d\n", i)
	}
	cases := []struct {
		name  string
		data  []byte
		lines bool
	}{
		{"numbered", numbered.Bytes(), true},
		{"oneline", bytes.Repeat([]byte("x"), 1<<20), false},
		{"e-acute", bytes.Repeat([]byte("é"), 1<<19), false},
		{"nihon", bytes.Repeat([]byte("日本"), 1<<17), false},
		{"emoji", bytes.Repeat([]byte("😀"), 1<<18), false},
		{"mixed", bytes.Repeat([]byte("aé日😀"), 1<<16), false},
		{"emoji-lines", bytes.Repeat([]byte("😀日本é ok\n"), 1<<15), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSpool(t, 0)
			// Odd chunk sizes split characters across writes.
			for rest := c.data; len(rest) > 0; {
				n := min(len(rest), 65537)
				if _, err := s.Write(rest[:n]); err != nil {
					t.Fatal(err)
				}
				rest = rest[n:]
			}
			for _, maxChars := range []int{0, 1, 200, 333, 5000} {
				want := normMaxChars(maxChars)
				ranges := [][2]int64{
					{0, s.Bytes()}, {0, 100000}, {int64(len(c.data)) - 200000, s.Bytes()},
					{0, 2500}, {1000, 9000}, {5, 8100}, // read whole, maybe split
				}
				for _, r := range ranges {
					obs, err := s.Render(r[0], r[1], maxChars)
					if err != nil {
						t.Fatal(err)
					}
					if obs.From != r[0] || obs.To != r[1] {
						t.Fatalf("range %d..%d, want %v", obs.From, obs.To, r)
					}
					if utf8.RuneCount(c.data[r[0]:r[1]]) <= want {
						if obs.Text != string(c.data[r[0]:r[1]]) || obs.Omitted != 0 {
							t.Fatal("range that fits was not shown whole")
						}
						continue
					}
					// Ranges may start mid-character; check only aligned ones for validity.
					checkSplit(t, c.data, obs, want, c.lines)
				}
			}
		})
	}
}

func TestRenderBoundedMemory(t *testing.T) {
	s := newSpool(t, 0)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<12) // 64 KiB
	for range 128 {                                          // 8 MiB
		if _, err := s.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	obs, err := s.Render(0, s.Bytes(), 0)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Omitted == 0 {
		t.Fatal("not split")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<10 {
		t.Fatalf("Render of 8 MiB allocated %d bytes", alloc)
	}
}

func TestObserveUnread(t *testing.T) {
	s := newSpool(t, 0)
	nihon := "日"
	mustWrite(t, s, "ab"+nihon[:1])
	obs, err := s.ObserveUnread(0, false)
	if err != nil || obs.Text != "ab" || obs.From != 0 || obs.To != 2 {
		t.Fatalf("%+v, %v", obs, err)
	}
	if s.Cursor() != 2 || s.Unread() != 1 {
		t.Fatalf("Cursor=%d Unread=%d", s.Cursor(), s.Unread())
	}
	// Still incomplete: nothing to show yet.
	mustWrite(t, s, nihon[1:2])
	obs, err = s.ObserveUnread(0, false)
	if err != nil || obs.Text != "" || s.Cursor() != 2 {
		t.Fatalf("%+v, %v, cursor %d", obs, err, s.Cursor())
	}
	mustWrite(t, s, nihon[2:])
	obs, err = s.ObserveUnread(0, false)
	if err != nil || obs.Text != nihon || obs.From != 2 || obs.To != 5 {
		t.Fatalf("%+v, %v", obs, err)
	}
	// An invalid byte is not held back; a partial emoji at the end is,
	// until final.
	emoji := "😀"
	mustWrite(t, s, "\xffx"+emoji[:2])
	obs, err = s.ObserveUnread(0, false)
	if err != nil || obs.Text != "\xffx" {
		t.Fatalf("%+v, %v", obs, err)
	}
	obs, err = s.ObserveUnread(0, true)
	if err != nil || obs.Text != emoji[:2] || s.Cursor() != s.Bytes() || s.Unread() != 0 {
		t.Fatalf("final: %+v, %v", obs, err)
	}
	obs, err = s.ObserveUnread(0, true)
	if err != nil || obs.Text != "" || obs.From != s.Bytes() {
		t.Fatalf("after final: %+v, %v", obs, err)
	}
}

func TestObserveUnreadLarge(t *testing.T) {
	s := newSpool(t, 0)
	var data bytes.Buffer
	for i := range 100000 {
		fmt.Fprintf(&data, "out %d\n", i)
	}
	mustWrite(t, s, data.String())
	obs, err := s.ObserveUnread(500, false)
	if err != nil {
		t.Fatal(err)
	}
	checkSplit(t, data.Bytes(), obs, 500, true)
	if s.Unread() != 0 {
		t.Fatalf("Unread = %d", s.Unread())
	}
}

func TestTail(t *testing.T) {
	s := newSpool(t, 0)
	if got, err := s.Tail(100); err != nil || got != "" {
		t.Fatalf("empty Tail = %q, %v", got, err)
	}
	mustWrite(t, s, "short\nout")
	if got, _ := s.Tail(100); got != "short\nout" {
		t.Fatalf("Tail = %q", got)
	}
	var data strings.Builder
	data.WriteString("short\nout")
	for i := range 1000 {
		fmt.Fprintf(&data, "\nrow %04d", i)
	}
	mustWrite(t, s, data.String()[9:])
	got, err := s.Tail(100)
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(got); n > 100 || n < 50 {
		t.Fatalf("Tail has %d characters", n)
	}
	if !strings.HasSuffix(data.String(), got) || !strings.HasPrefix(got, "row ") {
		t.Fatalf("Tail = %q", got)
	}
	if s.Cursor() != 0 {
		t.Fatal("Tail moved the cursor")
	}

	// One long line: exactly the last maxChars characters.
	s2 := newSpool(t, 0)
	mustWrite(t, s2, strings.Repeat("日本", 5000)+"😀"[:3])
	got, err = s2.Tail(101)
	if err != nil {
		t.Fatal(err)
	}
	if utf8.RuneCountInString(got) != 101 || !strings.HasPrefix(got, "本日") || !utf8.ValidString(got) {
		t.Fatalf("Tail = %q", got)
	}
}

// TestConcurrent writes text in chunks that split characters while
// observers read; the observed texts must add up to the file exactly.
func TestConcurrent(t *testing.T) {
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

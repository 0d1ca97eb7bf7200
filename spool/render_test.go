package spool

import (
	"bytes"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Bounded head/tail views of the spool: rendering, the unread cursor and
// the tail.

func TestRenderSmall(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

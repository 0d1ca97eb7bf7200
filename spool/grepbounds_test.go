package spool

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// TestGiantLineGrep: a giant line gives one match, however many of its
// pieces match, found even across a piece boundary, never by a "^" at the
// start of a piece; its text is a marked, bounded head. Both search paths
// (blocks, and line by line with context) agree.
func TestGiantLineGrep(t *testing.T) {
	t.Parallel()
	line := giantLine(3*MaxLineBytes + 5000)
	data := append(append([]byte("before\n"), line...), "\nafter €\n"...)
	withForms(t, data, func(t *testing.T, d *Dir, name string) {
		ctx := context.Background()
		for _, tc := range []struct {
			pattern string
			lines   []int64
		}{
			{"é€x", []int64{2}},
			{"needle", []int64{2}},
			{"^(é€x)+x*needle", []int64{2}},
			{`^€`, nil},
			{"€", []int64{2, 3}},
			{`x$`, []int64{2}},
			{`^(é€x|needle)+$`, nil},
		} {
			for _, around := range []int{0, 1} {
				res, err := d.Grep(ctx, []string{name}, regexp.MustCompile(tc.pattern), GrepOptions{MaxMatches: 100, Context: around})
				if err != nil {
					t.Fatal(err)
				}
				var lines []int64
				for _, m := range res.Matches {
					if m.Context {
						continue
					}
					lines = append(lines, m.Line)
					if m.Line != 2 {
						continue
					}
					if !m.Cut || m.LineBytes != int64(len(line)) || len(m.Text) > MaxMatchTextBytes || !utf8.ValidString(m.Text) || !strings.HasPrefix(string(line), m.Text) {
						t.Fatalf("%q (context %d): line 2's match: %d bytes of text, cut %v, lineBytes %d", tc.pattern, around, len(m.Text), m.Cut, m.LineBytes)
					}
				}
				if fmt.Sprint(lines) != fmt.Sprint(tc.lines) || res.Truncated {
					t.Errorf("%q (context %d): matches on lines %v (truncated %v), want %v", tc.pattern, around, lines, res.Truncated, tc.lines)
				}
			}
		}
	})
}

// TestGrepMaxMatchesSaturates: the largest maxMatches neither overflows
// nor loses matches, and values past the cap saturate to it and say so.
func TestGrepMaxMatchesSaturates(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	names := []string{
		putLog(t, d, "a", []byte("hit 1\nmiss\nhit 2\nhit 3\n")),
		putLog(t, d, "b", []byte("hit 4\nhit 5\n")),
	}
	re := regexp.MustCompile("hit")
	for _, around := range []int{0, 1} {
		res, err := d.Grep(context.Background(), names, re, GrepOptions{MaxMatches: math.MaxInt64, Context: around})
		n := 0
		for _, m := range res.Matches {
			if !m.Context {
				n++
			}
		}
		if err != nil || n != 5 || res.Truncated {
			t.Fatalf("maxMatches 2^63-1, context %d: %d matches, truncated %v, %v; want all 5", around, n, res.Truncated, err)
		}
	}

	many := putLog(t, d, "many", bytes.Repeat([]byte("hit\n"), MaxGrepMatches+10))
	for _, max := range []int{MaxGrepMatches + 1, math.MaxInt64} {
		res, err := d.Grep(context.Background(), []string{many}, re, GrepOptions{MaxMatches: max})
		if err != nil || len(res.Matches) != MaxGrepMatches || !res.Truncated {
			t.Fatalf("maxMatches %d: %d matches, truncated %v, %v; want %d and truncated", max, len(res.Matches), res.Truncated, err, MaxGrepMatches)
		}
	}
}

// TestGrepTruncatedWhenSkippedFileHasMore: a later file that the search
// skips because enough matches were found still makes the answer
// truncated when it has matches.
func TestGrepTruncatedWhenSkippedFileHasMore(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	var names []string
	for i := range 6 {
		names = append(names, putLog(t, d, fmt.Sprintf("f%d", i), []byte("hit\n")))
	}
	for _, max := range []int{1, 2, 5} {
		res, err := d.Grep(context.Background(), names, regexp.MustCompile("hit"), GrepOptions{MaxMatches: max})
		if err != nil || len(res.Matches) != max || !res.Truncated {
			t.Fatalf("maxMatches %d over 6 matches: %d matches, truncated %v, %v", max, len(res.Matches), res.Truncated, err)
		}
	}
}

// TestGrepTextBounds: long lines give marked heads, and an answer stops
// at MaxGrepTextBytes with truncated set.
func TestGrepTextBounds(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	long := strings.Repeat("é", MaxMatchTextBytes) // twice the bound in bytes
	pairs := MaxGrepTextBytes/MaxMatchTextBytes/2 + 100
	name := putLog(t, d, "long", []byte(strings.Repeat("hit "+long+"\npad "+long+"\n", pairs)))
	for _, around := range []int{0, 2} {
		res, err := d.Grep(context.Background(), []string{name}, regexp.MustCompile("hit"), GrepOptions{MaxMatches: MaxGrepMatches, Context: around})
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, m := range res.Matches {
			total += len(m.Text)
			if !m.Cut || m.LineBytes != int64(len("hit "+long)) || len(m.Text) > MaxMatchTextBytes || !utf8.ValidString(m.Text) {
				t.Fatalf("context %d: match of %d bytes, cut %v, lineBytes %d", around, len(m.Text), m.Cut, m.LineBytes)
			}
		}
		if around == 0 {
			if res.Truncated || len(res.Matches) != pairs {
				t.Fatalf("without context: %d matches, truncated %v; want all %d", len(res.Matches), res.Truncated, pairs)
			}
			continue
		}
		if !res.Truncated || total > MaxGrepTextBytes || total <= MaxGrepTextBytes-MaxMatchTextBytes {
			t.Fatalf("with context: %d bytes of text in %d lines, truncated %v; the bound is %d", total, len(res.Matches), res.Truncated, MaxGrepTextBytes)
		}
	}
}

// TestGrepPatternBound: a pattern past MaxPatternBytes is invalid params.
func TestGrepPatternBound(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", MaxPatternBytes+1)
	if _, err := CompilePattern(long); fault.KindOf(err) != fault.InvalidParams {
		t.Fatalf("CompilePattern of %d bytes: %v", len(long), err)
	}
	if _, err := CompilePattern(long[1:]); err != nil {
		t.Fatalf("CompilePattern of %d bytes: %v", MaxPatternBytes, err)
	}
	if _, err := CompilePattern("("); fault.KindOf(err) != fault.InvalidParams {
		t.Fatalf("bad pattern: %v", err)
	}
	d := newDir(t)
	_, err := d.Grep(context.Background(), nil, regexp.MustCompile(long), GrepOptions{MaxMatches: 1})
	if fault.KindOf(err) != fault.InvalidParams {
		t.Fatalf("Grep with a %d-byte pattern: %v", len(long), err)
	}
}

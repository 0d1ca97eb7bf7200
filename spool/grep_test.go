package spool

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestReadLinesCountsBytesAcrossEmptyAndLongLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "executions"), 0o700); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 3*MaxLineBytes/2) // handed over in two pieces
	content := "a\n\nb\n" + long + "\nc\nlast"
	if err := os.WriteFile(filepath.Join(dir, "executions", "x.log"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := NewDir(dir).Open("executions/x.log")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, tc := range []struct {
		first, count int64
		text         string
	}{
		{1, 2, "a\n\n"},
		{2, 1, "\n"},
		{3, 1, "b\n"},
		{5, 1, "c\n"},
		{5, 0, "c\nlast"},
		{6, 1, "last"},
		{7, 1, ""},
	} {
		r, err := readLines(v, tc.first, tc.count)
		if err != nil {
			t.Fatal(err)
		}
		if r.Text != tc.text || content[r.Offset:r.Offset+r.Length] != tc.text {
			t.Errorf("lines %d+%d: %q at %d (file has %q there)", tc.first, tc.count, r.Text, r.Offset, content[r.Offset:r.Offset+r.Length])
		}
	}
}

func TestRequiredLiteral(t *testing.T) {
	t.Parallel()
	for pattern, want := range map[string]string{
		`error: (\w+)`: "error: ",
		`^FAIL\s+\S+`:  "FAIL",
		`a|b`:          "",
		`(?i)error`:    "",
		`x`:            "",
	} {
		if got := string(requiredLiteral(pattern)); got != want {
			t.Errorf("%q: %q, want %q", pattern, got, want)
		}
	}
}

func TestGrepBlocksAgreesWithLineByLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "executions"), 0o700); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 0; i < 20000; i++ {
		switch i % 7 {
		case 0:
			b.WriteString("error: undefined reference to foo\n")
		case 3:
			b.WriteString("\n")
		case 5:
			b.WriteString("ab\ncd warning FAIL x\n")
		default:
			b.WriteString("compiling unit ok  \n")
		}
	}
	// A long line (under the piece size of both readers) that straddles a
	// block boundary, and a last line without a newline. Blocks of 128 KiB
	// put four boundaries in this log as the 1 MiB ones put one in a log
	// eight times its size.
	b.WriteString(strings.Repeat("y", 100<<10) + " error: tail\nno newline at end error: z")
	if err := os.WriteFile(filepath.Join(dir, "executions", "x.log"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	d := NewDir(dir)
	d.blockBytes = 128 << 10
	ctx := context.Background()
	for _, pattern := range []string{`error: (\w+)`, `^cd`, `b\sc`, `FAIL|warning`, `(?i)ERROR`, `z$`, `^$`, `$`, `FAIL|error: `, `cd w|unit ok`, `xx|FAIL`} {
		re := regexp.MustCompile(pattern)
		block := regexp.MustCompile("(?m:" + pattern + ")")
		lit := requiredLiteral(pattern)
		want, _, err := d.grepOne(ctx, "executions/x.log", "executions/x.log", re, lit, 0, bounds{matches: 1 << 30, text: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := d.grepBlocks(ctx, "executions/x.log", "executions/x.log", re, block, requiredLiterals(pattern), bounds{matches: 1 << 30, text: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d matches by blocks, %d by lines", pattern, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: match %d: line %d %.60q vs line %d %.60q", pattern, i, got[i].Line, got[i].Text, want[i].Line, want[i].Text)
			}
		}
	}
}

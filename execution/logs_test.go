package execution

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/spool"
)

func TestReadLinesCountsBytesAcrossEmptyAndLongLines(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "executions"), 0o700); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 3*spool.MaxLineBytes/2) // handed over in two pieces
	content := "a\n\nb\n" + long + "\nc\nlast"
	if err := os.WriteFile(filepath.Join(dir, "executions", "x.log"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := spool.NewDir(dir).Open("executions/x.log")
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

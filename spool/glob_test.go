package spool

import (
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// checkGlob compares compileGlob and glob.match with path.Match.
func checkGlob(t *testing.T, pattern string, names []string) {
	t.Helper()
	g, err := compileGlob(pattern)
	_, perr := path.Match(pattern, "")
	if (err != nil) != (perr != nil) {
		t.Fatalf("pattern %q: compileGlob error %v, path.Match error %v", pattern, err, perr)
	}
	if err != nil {
		if fault.KindOf(err) != fault.InvalidParams {
			t.Fatalf("pattern %q: %v, want invalid params", pattern, err)
		}
		return
	}
	for _, name := range names {
		want, _ := path.Match(pattern, name)
		if got := g.match(name); got != want {
			t.Fatalf("pattern %q, name %q: %v, path.Match says %v", pattern, name, got, want)
		}
	}
}

// TestGlobMatchesLikePathMatch: random patterns and names, '/' and
// multi-byte characters included, match (and fail to parse) exactly as
// with path.Match, first-fit stars included.
func TestGlobMatchesLikePathMatch(t *testing.T) {
	t.Parallel()
	checkGlob(t, "*a[a/]*b", []string{"aa/b", "a/b", "xa/b"}) // path.Match does not backtrack
	for _, p := range []string{"", "*", "executions/*.log", "executions/exec-*-00000[1-9].log", "*/*", "[]a]", "[^]", "[a-]", "a\\", "[\\", "[a-\\", "x[", "[-]", "[z-a]", "[^z-a]", "\\*", "[*]", "[é-ü]?", "[^/]*"} {
		checkGlob(t, p, []string{"", "a", "executions/exec-ab-000003.log", "executions/x.log", "é/ü", "*", "]", "-", "/", "ab/c"})
	}
	r := rand.New(rand.NewPCG(5, 9))
	runes := []rune("ab/.*?[]^-\\é")
	pick := func(n int) string {
		var b strings.Builder
		for range r.IntN(n + 1) {
			b.WriteRune(runes[r.IntN(len(runes))])
		}
		return b.String()
	}
	literal := strings.NewReplacer("*", "", "?", "", "[", "", "]", "", "\\", "")
	for range 20000 {
		var names []string
		for range 8 {
			names = append(names, literal.Replace(pick(8)))
		}
		checkGlob(t, pick(10), names)
	}
}

// TestGlobPatternBound: a pattern past MaxGlobBytes is refused as invalid
// params whatever the directory holds; one at the bound works.
func TestGlobPatternBound(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(d.execDir, strings.Repeat("x", i+1)+".log"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, pattern := range []string{strings.Repeat("*", 1<<20), "executions/" + strings.Repeat("?", MaxGlobBytes)} {
		if names, err := d.Glob(pattern); fault.KindOf(err) != fault.InvalidParams || names != nil {
			t.Fatalf("Glob of a %d-byte pattern: %d names, %v; want invalid params", len(pattern), len(names), err)
		}
	}
	at := "executions/" + strings.Repeat("*", MaxGlobBytes-len("executions/")-len("x.log")) + "x.log"
	names, err := d.Glob(at)
	if err != nil || len(names) != 100 {
		t.Fatalf("Glob of a %d-byte pattern: %d names, %v; want 100", len(at), len(names), err)
	}
}

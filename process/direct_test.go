package process

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/shwords"
)

func TestDirectCommandOnlyWhenBashWouldJustExec(t *testing.T) {
	bash, err := LookBash()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "plain"), []byte("echo hi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	direct := map[string][]string{
		"true":                    {"true"},
		"  ls -l /tmp # listing ": {"ls", "-l", "/tmp"},
		`ls 'a b' "c d" e=f`:      {"ls", "a b", "c d", "e=f"},
		"/bin/ls x;":              {"/bin/ls", "x"},
	}
	for command, want := range direct {
		path, argv, _, ok := directCommand(bash, command, env, dir)
		if !ok || !slices.Equal(argv, want) || !filepath.IsAbs(path) {
			t.Errorf("%q: %q %q %v, want %q run directly", command, path, argv, ok, want)
		}
	}
	for _, command := range []string{
		"true --version", "echo hi", "kill 1", "test -f x", "ls *.go", "ls ~", "ls a\\ b", "ls $HOME",
		`ls "$HOME"`, "ls $'x'", "ls {a,b}", "ls > out", "X=1 ls", "ls &", "! ls", "ls | cat", "ls; ls",
		"ls $(pwd)", "time ls", "if true; then ls; fi", "./plain", "no-such-program-here", "ls <(true)",
		"cd /tmp", "exec ls", `ls "a\"b"`, "bin/ls",
	} {
		if _, _, _, ok := directCommand(bash, command, env, dir); ok {
			t.Errorf("%q would run without bash", command)
		}
	}
	for _, extra := range []string{"BASH_ENV=/x", "SHELLOPTS=xtrace", "BASH_FUNC_ls%%=() { :; }", "SHLVL=abc", "SHLVL=999", "PS1=$ ", "RANDOM=1", "IFS=:"} {
		if _, _, _, ok := directCommand(bash, "ls", append(env, extra), dir); ok {
			t.Errorf("ls with %s would run without bash", extra)
		}
	}
	if _, _, _, ok := directCommand(bash, "ls", []string{"HOME=" + dir}, dir); ok {
		t.Error("ls without PATH would run without bash")
	}
	path, _, got, _ := directCommand(bash, "ls", append(env, "OLDPWD=/no/such", "_=x"), dir)
	real, _ := filepath.EvalSymlinks(dir)
	for _, want := range []string{"SHLVL=0", "PWD=" + real, "_=" + path} {
		if !slices.Contains(got, want) {
			t.Errorf("environment %q lacks %q", got, want)
		}
	}
	if slices.Contains(got, "OLDPWD=/no/such") || slices.Contains(got, "_=x") {
		t.Errorf("environment %q keeps what bash drops", got)
	}
}

// The fast split must give exactly the parser's words wherever it takes
// a command, and the common plain commands must not need the parser.
func TestPlainWordsSplitAsTheParserDoes(t *testing.T) {
	corpus := []string{
		"true", "make test", "go test ./...", "git status", "  ls\t-l  /tmp ", "ls a=b --x=1,2 @x %y +z :w",
		"x=1 ls", "a= b", "=x", "ls #c", "ls;", "ls &", "ls\n", "ls 'a'", "", "   ", "!", "ls ~", "if", "time ls",
	}
	// Half of the commands from the bytes it takes, half with the rest.
	alphabet := []byte("ab=/._-+,:@% \tif#;&|'\"$~!*?[]{}()<>\\\n")
	rnd := rand.New(rand.NewPCG(1, 2))
	for k := range 20000 {
		b := make([]byte, 1+rnd.IntN(12))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet)-k%2*21)]
		}
		corpus = append(corpus, string(b))
	}
	taken := 0
	for _, c := range corpus {
		fast, ok := shwords.Plain(c)
		if !ok {
			continue
		}
		taken++
		parsed, pok := parsedWords(c)
		if !pok || !slices.Equal(fast, parsed) {
			t.Fatalf("%q: split into %q, the parser says %q (%v)", c, fast, parsed, pok)
		}
	}
	if taken < 5000 {
		t.Fatalf("only %d of %d commands split without the parser", taken, len(corpus))
	}
	for _, c := range []string{"make test", "go test ./...", "git status", "true"} {
		if n := testing.AllocsPerRun(20, func() { literalWords(c) }); n > 2 {
			t.Errorf("%q: %v allocations to split, want the parser left out", c, n)
		}
	}
}

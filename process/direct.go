package process

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/internal/shwords"
	"golang.org/x/sys/unix"
	"mvdan.cc/sh/v3/syntax"
)

// A command that is one simple command of literal words is run without
// bash when bash would only exec it: `bash -c 'make test'` replaces
// itself with make (its one-shot exec), so the program gets the same
// pid, argv, cwd, stdio and signals either way, and the environment
// differs only where bash's start changes it (SHLVL, PWD, OLDPWD, _),
// which directCommand does in the same way. The start is then one exec
// shorter: bash's own start costs about as much as the program's.
//
// Anything bash could run differently falls back to bash: expansions,
// quoting with escapes, redirections, assignments, a builtin, keyword or
// exported function, a program not found or not executable, a file that
// bash would read as a script, an environment that changes how bash
// starts (BASH_ENV, SHELLOPTS, ...), and a bash whose start was not
// checked to match (directBash).

// directCommand returns what bash -c command would exec, with the
// environment it would give it, when command can run without bash.
func directCommand(bash, command string, env []string, dir string) (path string, argv, outEnv []string, ok bool) {
	if !directBash(bash) || len(command) > 4096 {
		return "", nil, nil, false
	}
	argv, ok = literalWords(command)
	if !ok || len(argv) == 0 {
		return "", nil, nil, false
	}
	name := argv[0]
	if bashBuiltins[name] && !((name == "true" || name == "false") && len(argv) == 1) {
		return "", nil, nil, false // an external of the same name may differ (echo, kill, test)
	}
	get := func(k string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], k+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "BASH_FUNC_") || bashVars[k] {
			return "", nil, nil, false
		}
	}
	pathVar, ok := get("PATH")
	if !ok || pathVar == "" {
		return "", nil, nil, false // bash's built-in default path
	}
	if path, ok = findProgram(name, pathVar); !ok {
		return "", nil, nil, false
	}
	shlvl, ok := oneShotShlvl(get("SHLVL"))
	if !ok {
		return "", nil, nil, false
	}
	pwd, ok := get("PWD")
	if !ok || !filepath.IsAbs(pwd) || !sameFile(pwd, dir) {
		// bash sets it to getcwd(), the physical path.
		if pwd, ok = physical(dir); !ok {
			return "", nil, nil, false
		}
	}
	outEnv = make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "SHLVL", "PWD", "_":
			continue
		case "OLDPWD":
			// bash keeps it only while it names a directory.
			if fi, err := os.Stat(v); v == "" || err != nil || !fi.IsDir() {
				continue
			}
		}
		outEnv = append(outEnv, kv)
	}
	outEnv = append(outEnv, "PWD="+pwd, "SHLVL="+shlvl, "_="+path)
	return path, argv, outEnv, true
}

// literalWords returns the words of a command that is one simple command
// of words bash takes literally: no expansion, no escape, no redirection
// or assignment, run in the foreground.
func literalWords(command string) ([]string, bool) {
	words, ok := shwords.Plain(command)
	if !ok {
		words, ok = parsedWords(command)
	}
	if !ok || shwords.Keywords[words[0]] {
		return nil, false
	}
	return words, true
}

// parsedWords is literalWords through bash's grammar.
func parsedWords(command string) ([]string, bool) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil || len(f.Stmts) != 1 {
		return nil, false
	}
	st := f.Stmts[0]
	if st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 {
		return nil, false
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil, false
	}
	words := make([]string, 0, len(call.Args))
	for _, w := range call.Args {
		var b strings.Builder
		for _, part := range w.Parts {
			switch p := part.(type) {
			case *syntax.Lit:
				// Unquoted: no escapes, globs, braces, tildes or a lone $.
				if strings.ContainsAny(p.Value, "\\*?[]{}~$") {
					return nil, false
				}
				b.WriteString(p.Value)
			case *syntax.SglQuoted:
				if p.Dollar {
					return nil, false
				}
				b.WriteString(p.Value)
			case *syntax.DblQuoted:
				if p.Dollar {
					return nil, false
				}
				for _, q := range p.Parts {
					l, ok := q.(*syntax.Lit)
					if !ok || strings.ContainsAny(l.Value, "\\$`") {
						return nil, false
					}
					b.WriteString(l.Value)
				}
			default:
				return nil, false
			}
		}
		words = append(words, b.String())
	}
	return words, true
}

// findProgram finds name as bash would and returns the path bash would
// exec (and set $_ to): an absolute name as it is, else the first
// executable regular file on PATH, its entry and the name joined as bash
// joins them. A program bash would run as a script of its own (no #! and
// not ELF), a relative name or PATH entry, or no match leave it to bash.
func findProgram(name, pathVar string) (string, bool) {
	if name == "" {
		return "", false
	}
	var candidates []string
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", false
		}
		candidates = []string{name}
	} else {
		for _, d := range strings.Split(pathVar, ":") {
			if !filepath.IsAbs(d) {
				return "", false
			}
			if !strings.HasSuffix(d, "/") {
				d += "/"
			}
			candidates = append(candidates, d+name)
		}
	}
	for _, c := range candidates {
		fi, err := os.Stat(c)
		if err != nil || fi.IsDir() {
			continue
		}
		if !fi.Mode().IsRegular() || unix.Access(c, unix.X_OK) != nil {
			return "", false // bash reports it (or runs another match): its words
		}
		return c, execable(c)
	}
	return "", false
}

// execable reports whether the kernel itself runs path: an ELF file, or a
// #! script whose interpreter is an executable file.
func execable(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if bytes.HasPrefix(head, []byte("\x7fELF")) {
		return true
	}
	line, ok := bytes.CutPrefix(head, []byte("#!"))
	if !ok {
		return false
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	} else {
		return false // longer than we read
	}
	fields := bytes.Fields(line)
	if len(fields) == 0 {
		return false
	}
	interp := string(fields[0])
	fi, err := os.Stat(interp)
	return err == nil && filepath.IsAbs(interp) && fi.Mode().IsRegular() && unix.Access(interp, unix.X_OK) == nil
}

// oneShotShlvl is SHLVL as bash leaves it for the program it execs: raised
// at its start, lowered again before the exec; 0 when unset. Values bash
// would warn about or read loosely leave the command to bash.
func oneShotShlvl(v string, set bool) (string, bool) {
	if !set || v == "" {
		return "0", true
	}
	if strings.TrimLeft(v, "0123456789") != "" || len(v) > 3 {
		return "", false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > 998 {
		return "", false
	}
	return strconv.Itoa(n), true
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// physical is what getcwd says in dir: the kernel's path of the
// directory, symbolic links resolved.
func physical(dir string) (string, bool) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil || n == len(buf) {
		return "", false
	}
	p := string(buf[:n])
	return p, filepath.IsAbs(p) && !strings.HasSuffix(p, " (deleted)")
}

// bashVars change how bash starts or finds a program, or bash gives the
// program another value or none when it was in the environment (it
// imports them as its own variables): a command in an environment with
// any of them runs under bash.
var bashVars = setOf(`BASH_ENV ENV SHELLOPTS BASHOPTS POSIXLY_CORRECT EXECIGNORE BASH_COMPAT
	BASH_XTRACEFD BASH BASHPID BASH_ARGV0 BASH_COMMAND BASH_EXECUTION_STRING BASH_SUBSHELL
	BASH_VERSINFO BASH_VERSION COMP_WORDBREAKS EPOCHREALTIME EPOCHSECONDS HISTCMD IFS LINENO
	OPTERR OPTIND PPID PS1 PS2 PS4 RANDOM SRANDOM SECONDS`)

var bashBuiltins = setOf(". : [ alias bg bind break builtin caller cd command compgen complete compopt continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait")

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// directBash reports whether bash at path is a version whose start was
// checked to leave the environment as directCommand does (5.2 and later
// 5.x), asked once per path.
func directBash(path string) bool {
	directVersions.Lock()
	defer directVersions.Unlock()
	if ok, known := directVersions.m[path]; known {
		return ok
	}
	cmd := exec.Command(path, "-c", `printf >&2 %s "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}"`)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := Run(cmd, 10*time.Second)
	ok := false
	if err == nil {
		major, minor, _ := strings.Cut(string(out), ".")
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		ok = err1 == nil && err2 == nil && ma == 5 && mi >= 2
	}
	if directVersions.m == nil {
		directVersions.m = map[string]bool{}
	}
	directVersions.m[path] = ok
	return ok
}

var directVersions struct {
	sync.Mutex
	m map[string]bool
}

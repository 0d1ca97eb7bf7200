package analyze

import (
	"path"
	"regexp"
	"strings"
)

// readOnly commands never change state, whatever their arguments.
var readOnly = set(
	"ls", "cat", "head", "tail", "grep", "egrep", "fgrep", "ag",
	"wc", "echo", "printf", "pwd", "stat", "du", "df", "which", "type",
	"whereis", "realpath", "readlink", "basename", "dirname", "true", "false",
	"test", "[", "cut", "tr", "diff", "cmp", "comm", "printenv", "uname", "id",
	"whoami", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum",
	"sha512sum", "b2sum", "cksum", "nl", "od", "hexdump", "column", "seq",
	"sleep", "jq", "tac", "rev", "fold", "fmt", "expand", "unexpand",
	"strings", "paste", "join", "nproc", "arch", "groups", "help",
)

// shellOnly builtins change only the shell running the command (its
// directory, variables or options), never files or other processes, so
// they count as read-only.
var shellOnly = set(
	":", "cd", "pushd", "popd", "dirs", "set", "shift", "unset", "export",
	"readonly", "local", "declare", "typeset", "nameref", "let", "read",
	"mapfile", "readarray", "getopts", "return", "exit", "break", "continue",
	"wait", "jobs", "shopt", "umask", "ulimit",
)

// detaching commands start processes that outlive the command, which the
// executor refuses the same way as "&".
var detaching = set("nohup", "setsid", "disown")

// shells that can run a literal script given with -c.
var shells = set("bash", "sh", "dash", "zsh", "ksh", "mksh", "ash")

// trustedDirs hold system binaries: "/usr/bin/ls" is ls, while "./ls"
// could be anything.
var trustedDirs = set("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/opt/homebrew/bin")

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// wrapper handles a command that runs another command given in its
// arguments. It returns that inner command line, or run=false when none
// is run.
type wrapper func(w *walker, name string, args []arg) (inner []arg, run bool)

var wrappers map[string]wrapper

// checker classifies an argument-sensitive command, adding findings when
// its arguments make it not read-only.
type checker func(w *walker, name string, args []arg)

var checkers map[string]checker

func init() {
	// Assigned in init because some entries refer back to simple().
	wrappers = map[string]wrapper{
		"env":     wrapEnv,
		"command": wrapCommand,
		"builtin": wrapBuiltin,
		"exec":    wrapExec,
		"sudo":    wrapSudo,
		"doas":    wrapDoas,
		"nice":    wrapSimple(optSpec{short: "n", long: []string{"adjustment"}, inOrder: true}),
		"stdbuf":  wrapSimple(optSpec{short: "ioe", long: []string{"input", "output", "error"}, inOrder: true}),
		"ionice":  wrapIonice,
		"timeout": wrapTimeout,
		"xargs":   wrapXargs,
		"time":    wrapTime,
		"chroot":  wrapChroot,
		"watch":   wrapWatch,
		"su":      wrapSu,
	}
	checkers = map[string]checker{
		"find":     checkFind,
		"sed":      checkSed,
		"awk":      checkAwk,
		"gawk":     checkAwk,
		"mawk":     checkAwk,
		"nawk":     checkAwk,
		"sort":     checkSort,
		"uniq":     checkUniq,
		"date":     checkDate,
		"hostname": checkHostname,
		"xxd":      checkXxd,
		"tree":     checkTree,
		"rg":       checkRg,
		"yq":       checkYq,
		"file":     checkFile,
		"git":      checkGit,
	}
}

// simple classifies one simple command given as words, after its
// assignments and substitutions have been dealt with.
func (w *walker) simple(args []arg) {
	appended := false // xargs adds operands that cannot be seen here
	for len(args) > 0 {
		head := args[0]
		if !head.static || (head.glob && head.text != "[") {
			w.add(Complex, "dynamic command name %q", head.display())
			return
		}
		name := head.text
		base := name
		if strings.Contains(name, "/") {
			base = path.Base(name)
		}
		if detaching[base] {
			w.add(Refused, "%q detaches a process", shorten(base))
			return
		}
		if base == "bg" {
			w.add(Refused, `"bg" resumes a job in the background`)
			return
		}
		wrap, ok := wrappers[base]
		if !ok {
			w.final(name, base, args[1:], appended)
			return
		}
		inner, run := wrap(w, name, args[1:])
		if !run {
			return
		}
		if base == "xargs" {
			appended = true
		}
		args = inner
	}
}

func (w *walker) final(name, base string, args []arg, appended bool) {
	switch {
	case base == "eval":
		w.add(Complex, `"eval" runs a string as code`)
		if s, ok := joinStatic(args); ok {
			w.a.refusalsIn(s, w.depth+1, `"eval" string`)
		}
		return
	case base == "source" || base == ".":
		w.add(Complex, "%q runs a script file that is not checked", shorten(base))
		return
	case base == "trap":
		w.add(Complex, `"trap" registers code to run later`)
		if len(args) > 0 && args[0].static {
			w.a.refusalsIn(args[0].text, w.depth+1, `"trap" action`)
		}
		return
	case shells[base]:
		w.shell(base, args)
		return
	}
	trusted := !strings.Contains(name, "/") || trustedDirs[path.Dir(name)]
	if trusted {
		if shellOnly[base] || readOnly[base] {
			return
		}
		if check := checkers[base]; check != nil {
			if appended {
				w.add(Mutating, "%q gets arguments from xargs that cannot be checked", shorten(base))
				return
			}
			check(w, base, args)
			return
		}
	}
	w.add(Mutating, "%q is not known to be read-only", shorten(name))
}

// joinStatic joins words with spaces, as eval and watch do, if all are
// static.
func joinStatic(args []arg) (string, bool) {
	parts := make([]string, len(args))
	for i, a := range args {
		if !a.static {
			return "", false
		}
		parts[i] = a.text
	}
	return strings.Join(parts, " "), true
}

// shell handles "bash -c 'script'" and friends by analysing the script.
func (w *walker) shell(name string, args []arg) {
	hasC := false
	i := 0
options:
	for ; i < len(args); i++ {
		t := args[i].text
		switch {
		case t == "--" || t == "-":
			i++
			break options
		case t == "--version" || t == "--help":
			return // only prints
		case strings.HasPrefix(t, "--"):
			if t == "--rcfile" || t == "--init-file" {
				i++
			}
		case len(t) > 1 && (t[0] == '-' || t[0] == '+'):
			for _, c := range t[1:] {
				switch c {
				case 'c':
					hasC = true
				case 'o', 'O':
					i++ // takes the option name as its value
				}
			}
		default:
			break options
		}
	}
	switch {
	case !hasC && i < len(args):
		w.add(Mutating, "%q runs a script file that is not checked", shorten(name))
	case !hasC:
		w.add(Mutating, "%q reads commands from standard input", shorten(name))
	case i >= len(args):
		// "bash -c" without a script is an error.
	case !args[i].static:
		w.add(Complex, "dynamic %q script %q", name+" -c", args[i].display())
	default:
		w.a.script(args[i].text, w.depth+1, `"`+name+` -c" script`)
	}
}

// skipAssignments drops leading NAME=value operands, as env and sudo do.
func skipAssignments(args []arg) []arg {
	for len(args) > 0 && strings.Contains(args[0].text, "=") {
		args = args[1:]
	}
	return args
}

func wrapSimple(spec optSpec) wrapper {
	return func(w *walker, name string, args []arg) ([]arg, bool) {
		_, rest := parseOpts(args, spec)
		return rest, len(rest) > 0
	}
}

func wrapEnv(w *walker, name string, args []arg) ([]arg, bool) {
	opts, rest := parseOpts(args, optSpec{short: "uCS", long: []string{"unset", "chdir", "split-string"}, inOrder: true})
	if o, ok := hasOpt(opts, "-S", "--split-string"); ok {
		if !o.value.static {
			w.add(Complex, `dynamic "env -S" string %q`, o.value.display())
			return nil, false
		}
		// The split string stands for more env arguments; its text is
		// shorter than the word it came from, so this terminates.
		var split []arg
		for _, f := range strings.Fields(o.value.text) {
			split = append(split, literal(f))
		}
		return wrapEnv(w, name, append(split, rest...))
	}
	rest = skipAssignments(rest)
	return rest, len(rest) > 0
}

func wrapCommand(w *walker, name string, args []arg) ([]arg, bool) {
	opts, rest := parseOpts(args, optSpec{inOrder: true})
	if _, ok := hasOpt(opts, "-v", "-V"); ok {
		return nil, false // only looks the name up
	}
	return rest, len(rest) > 0
}

func wrapBuiltin(w *walker, name string, args []arg) ([]arg, bool) {
	if len(args) > 0 && args[0].static && args[0].text == "--" {
		args = args[1:]
	}
	return args, len(args) > 0
}

func wrapExec(w *walker, name string, args []arg) ([]arg, bool) {
	_, rest := parseOpts(args, optSpec{short: "a", inOrder: true})
	if len(rest) == 0 {
		w.add(Complex, `"exec" without a command changes the shell itself`)
		return nil, false
	}
	return rest, true
}

func wrapSudo(w *walker, name string, args []arg) ([]arg, bool) {
	opts, rest := parseOpts(args, optSpec{
		short: "aCcDgpRrTtUu",
		long: []string{"user", "group", "close-from", "chdir", "prompt", "role", "type",
			"command-timeout", "other-user", "chroot", "host", "auth-type", "login-class"},
		inOrder: true,
	})
	if _, ok := hasOpt(opts, "-b", "--background"); ok {
		w.add(Refused, `"sudo -b" runs the command in the background`)
	}
	w.add(Mutating, "%q is not known to be read-only", shorten(name))
	rest = skipAssignments(rest)
	return rest, len(rest) > 0
}

func wrapDoas(w *walker, name string, args []arg) ([]arg, bool) {
	_, rest := parseOpts(args, optSpec{short: "uC", inOrder: true})
	w.add(Mutating, "%q is not known to be read-only", shorten(name))
	return rest, len(rest) > 0
}

func wrapIonice(w *walker, name string, args []arg) ([]arg, bool) {
	opts, rest := parseOpts(args, optSpec{short: "cnpPu", long: []string{"class", "classdata", "pid", "pgid", "uid"}, inOrder: true})
	if o, ok := hasOpt(opts, "-p", "-P", "-u", "--pid", "--pgid", "--uid"); ok {
		w.add(Mutating, `"ionice %s" changes other processes`, o.name)
		return nil, false
	}
	return rest, len(rest) > 0
}

func wrapTimeout(w *walker, name string, args []arg) ([]arg, bool) {
	_, rest := parseOpts(args, optSpec{short: "sk", long: []string{"signal", "kill-after"}, inOrder: true})
	if len(rest) < 2 {
		return nil, false
	}
	return rest[1:], true // rest[0] is the duration
}

func wrapXargs(w *walker, name string, args []arg) ([]arg, bool) {
	_, rest := parseOpts(args, optSpec{
		short:    "adEILnPs",
		optional: "eil",
		long:     []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"},
		inOrder:  true,
	})
	return rest, len(rest) > 0 // without a command xargs runs echo
}

// wrapTime handles the external time(1); the "time" keyword is a
// TimeClause in the syntax tree.
func wrapTime(w *walker, name string, args []arg) ([]arg, bool) {
	opts, rest := parseOpts(args, optSpec{short: "fo", long: []string{"format", "output"}, inOrder: true})
	if _, ok := hasOpt(opts, "-o", "--output"); ok {
		w.add(Mutating, `"time -o" writes a file`)
	}
	return rest, len(rest) > 0
}

func wrapChroot(w *walker, name string, args []arg) ([]arg, bool) {
	_, rest := parseOpts(args, optSpec{long: []string{"userspec", "groups"}, inOrder: true})
	w.add(Mutating, "%q is not known to be read-only", shorten(name))
	if len(rest) < 2 {
		return nil, false
	}
	return rest[1:], true // rest[0] is the new root
}

func wrapWatch(w *walker, name string, args []arg) ([]arg, bool) {
	opts, rest := parseOpts(args, optSpec{short: "nq", long: []string{"interval", "equexit"}, inOrder: true})
	w.add(Mutating, "%q is not known to be read-only", shorten(name))
	if len(rest) == 0 {
		return nil, false
	}
	if _, ok := hasOpt(opts, "-x", "--exec"); ok {
		return rest, true
	}
	// Without -x, watch joins its arguments and runs them with sh -c.
	if s, ok := joinStatic(rest); ok {
		w.a.script(s, w.depth+1, `"watch" command`)
		return nil, false
	}
	return rest, true
}

// wrapSu handles "su [user] -c CMD", whose command is a shell string.
func wrapSu(w *walker, name string, args []arg) ([]arg, bool) {
	opts, _ := parseOpts(args, optSpec{
		short: "cgGsw",
		long:  []string{"command", "session-command", "group", "supp-group", "shell", "whitelist-environment"},
	})
	w.add(Mutating, "%q is not known to be read-only", shorten(name))
	if o, ok := hasOpt(opts, "-c", "--command", "--session-command"); ok && o.has {
		if !o.value.static {
			w.add(Complex, "dynamic %q command %q", name+" -c", o.value.display())
		} else {
			w.a.script(o.value.text, w.depth+1, `"`+name+` -c" command`)
		}
	}
	return nil, false
}

// findActions run commands or write files.
var findActions = set("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls")

func checkFind(w *walker, name string, args []arg) {
	for i := 0; i < len(args); i++ {
		t := args[i].text
		if !findActions[t] {
			continue
		}
		w.add(Mutating, `"find %s" is not read-only`, t)
		if t == "-exec" || t == "-execdir" || t == "-ok" || t == "-okdir" {
			// The command still gets checked, to catch e.g. nohup.
			j := i + 1
			for j < len(args) && args[j].text != ";" && args[j].text != "+" {
				j++
			}
			w.simple(args[i+1 : j])
			i = j
		}
	}
}

// sedWrites is a heuristic for sed commands that write files (w, W, the
// s///w flag) or run shell commands (e, the s///e flag): the letter must
// follow something that can end an address or a previous command (line
// start, ; { } ! $ / , digit or blank), optionally after other s///
// flags, and be followed by a blank, ; } or the end. It misses "wfile"
// without a blank and may flag an odd replacement text like "/w /".
var sedWrites = regexp.MustCompile(`(?m)(^|[;{}!$/,0-9\s])[gpiImMe0-9]*[wWe]($|[\s;}])`)

func checkSed(w *walker, name string, args []arg) {
	opts, operands := parseOpts(args, optSpec{
		short:    "efl",
		optional: "i",
		long:     []string{"expression", "file", "line-length"},
	})
	var scripts []arg
	for _, o := range opts {
		switch {
		case o.is("-i", "--in-place"):
			w.add(Mutating, `"sed -i" edits files in place`)
		case o.is("-f", "--file"):
			w.add(Complex, "sed script file %q cannot be checked", o.value.display())
		case o.is("-e", "--expression") && o.has:
			scripts = append(scripts, o.value)
		}
	}
	if _, ok := hasOpt(opts, "-e", "--expression", "-f", "--file"); !ok && len(operands) > 0 {
		scripts = append(scripts, operands[0])
	}
	for _, s := range scripts {
		switch {
		case !s.static:
			w.add(Complex, "dynamic sed script %q", s.display())
		case sedWrites.MatchString(s.text):
			w.add(Mutating, "sed script %q may write files or run commands (w/W/e)", s.display())
		}
	}
}

// awkRisky are awk program fragments that can write files, run commands
// or load code. A plain substring test is deliberately crude: a ">"
// comparison or "||" also counts, which only errs towards Mutating.
var awkRisky = []string{"system", ">", "|", "getline", "@load", "@include"}

func checkAwk(w *walker, name string, args []arg) {
	opts, operands := parseOpts(args, optSpec{
		short:    "FvfiElWe",
		optional: "dDopL",
		// Only options with a required value: listing one whose value is
		// optional (--lint[=x]) would swallow the program text.
		long: []string{"field-separator", "assign", "file", "include", "load", "exec", "source"},
	})
	var programs []arg
	fromFile := false
	for _, o := range opts {
		switch {
		case o.is("-f", "-E", "--file", "--exec"):
			fromFile = true
			w.add(Complex, "%s program file %q cannot be checked", name, o.value.display())
		case o.is("-i", "-l", "--include", "--load"):
			w.add(Mutating, `"%s %s" loads code that is not checked`, name, o.name)
		case o.is("-d", "-D", "-o", "-p", "--dump-variables", "--debug", "--pretty-print", "--profile"):
			w.add(Mutating, `"%s %s" writes a file or is interactive`, name, o.name)
		case o.is("-e", "--source") && o.has:
			programs = append(programs, o.value)
		}
	}
	if len(programs) == 0 && !fromFile && len(operands) > 0 {
		programs = append(programs, operands[0])
	}
	for _, p := range programs {
		if !p.static {
			w.add(Complex, "dynamic %s program %q", name, p.display())
			continue
		}
		for _, r := range awkRisky {
			if strings.Contains(p.text, r) {
				w.add(Mutating, "%s program contains %q, which may write files or run commands", name, r)
				break
			}
		}
	}
}

func checkSort(w *walker, name string, args []arg) {
	opts, _ := parseOpts(args, optSpec{
		short: "kotST",
		long: []string{"key", "output", "field-separator", "buffer-size", "temporary-directory",
			"batch-size", "compress-program", "files0-from", "parallel", "random-source", "sort"},
	})
	if _, ok := hasOpt(opts, "-o", "--output"); ok {
		w.add(Mutating, `"sort -o" writes a file`)
	}
	if _, ok := hasOpt(opts, "--compress-program"); ok {
		w.add(Mutating, `"sort --compress-program" runs a program`)
	}
}

func checkUniq(w *walker, name string, args []arg) {
	_, operands := parseOpts(args, optSpec{short: "fsw", long: []string{"skip-fields", "skip-chars", "check-chars"}})
	if len(operands) >= 2 {
		w.add(Mutating, "%q with two operands writes the second one", shorten(name))
	}
}

func checkDate(w *walker, name string, args []arg) {
	opts, operands := parseOpts(args, optSpec{
		short:    "dfrs",
		optional: "I",
		long:     []string{"date", "file", "reference", "set", "rfc-3339"},
	})
	if _, ok := hasOpt(opts, "-s", "--set"); ok {
		w.add(Mutating, `"date -s" sets the clock`)
	}
	for _, op := range operands {
		// Only "+FORMAT" prints; any other operand sets the clock.
		if !strings.HasPrefix(op.text, "+") {
			w.add(Mutating, "%q with operand %q sets the clock", name, op.display())
		}
	}
}

func checkHostname(w *walker, name string, args []arg) {
	opts, operands := parseOpts(args, optSpec{short: "F", long: []string{"file"}})
	_, fromFile := hasOpt(opts, "-F", "--file", "-b", "--boot")
	if fromFile || len(operands) > 0 {
		w.add(Mutating, "%q with arguments sets the host name", shorten(name))
	}
}

func checkXxd(w *walker, name string, args []arg) {
	operands := 0
	for i := 0; i < len(args); i++ {
		t := args[i].text
		switch {
		case strings.HasPrefix(t, "-r"):
			w.add(Mutating, `"xxd -r" is not treated as read-only`)
		case t == "-c" || t == "-cols" || t == "-g" || t == "-groupsize" || t == "-l" || t == "-len" ||
			t == "-o" || t == "-offset" || t == "-s" || t == "-seek" || t == "-n" || t == "-name":
			i++ // the value is in the next word
		case len(t) > 1 && t[0] == '-':
		default:
			operands++
			// "xxd in out" writes out, "xxd in -" writes to stdout.
			if operands == 2 && !(args[i].static && t == "-") {
				w.add(Mutating, `"xxd" with two operands writes the second one`)
			}
		}
	}
}

func checkTree(w *walker, name string, args []arg) {
	for _, a := range args {
		if a.text == "-o" || strings.HasPrefix(a.text, "--output") {
			w.add(Mutating, `"tree -o" writes a file`)
		}
	}
}

func checkRg(w *walker, name string, args []arg) {
	opts, _ := parseOpts(args, optSpec{
		short: "ABCEefgjMmrTtd",
		long: []string{"after-context", "before-context", "context", "encoding", "regexp", "file", "glob",
			"iglob", "threads", "max-columns", "max-count", "replace", "type-not", "type", "max-depth",
			"pre", "pre-glob", "type-add", "type-clear", "sort", "sortr", "colors", "path-separator",
			"context-separator", "field-match-separator", "field-context-separator", "engine",
			"max-filesize", "dfa-size-limit", "regex-size-limit", "ignore-file", "hostname-bin"},
	})
	if o, ok := hasOpt(opts, "--pre", "--hostname-bin"); ok {
		w.add(Mutating, `"rg %s" runs a program`, o.name)
	}
}

func checkYq(w *walker, name string, args []arg) {
	opts, _ := parseOpts(args, optSpec{short: "oIps", long: []string{"output-format", "indent", "input-format", "split-exp"}})
	if o, ok := hasOpt(opts, "-i", "--inplace", "-s", "--split-exp"); ok {
		w.add(Mutating, `"yq %s" writes files`, o.name)
	}
}

func checkFile(w *walker, name string, args []arg) {
	opts, _ := parseOpts(args, optSpec{short: "efmFP", long: []string{"exclude", "files-from", "magic-file", "separator", "parameter"}})
	if _, ok := hasOpt(opts, "-C", "--compile"); ok {
		w.add(Mutating, `"file -C" writes a compiled magic file`)
	}
}

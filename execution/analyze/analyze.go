// Package analyze classifies a bash command line before it is run, using a
// real bash parser (mvdan.cc/sh/v3/syntax) rather than string matching.
//
// The classes are:
//
//   - [ReadOnly]: every simple command is on a known read-only list, with
//     arguments that keep it read-only, and no output is redirected to a
//     file. Such commands may run side by side with other read-only ones.
//   - [Mutating]: something is known, or assumed, to change state: an
//     unknown command, rm, git commit, "> file", sed -i, and so on. These
//     take an exclusive lane.
//   - [Complex]: the command cannot be judged statically, for example a
//     dynamic command name ($CMD), eval, source, a function definition or a
//     parse error. Callers should treat it at least like Mutating.
//   - [Refused]: the command uses shell-native backgrounding ("&", coproc,
//     nohup, setsid, disown), which the executor does not allow because it
//     tracks processes itself.
//
// This is a policy aid, not a security boundary. It only sees the text of
// the command: not the values of variables, aliases or functions defined
// by earlier commands, PATH, or the contents of script files. The
// heuristics below err towards the more restrictive class, but a
// determined caller can always hide behaviour from a static analysis.
package analyze

import (
	"fmt"
	"strings"

	"github.com/mevedel/mevedel-exec/internal/shwords"
	"mvdan.cc/sh/v3/syntax"
)

// Class is the verdict for a whole command line.
type Class string

const (
	// ReadOnly: only known read-only commands with read-only arguments.
	ReadOnly Class = "read-only"
	// Mutating: something is known or assumed to change state.
	Mutating Class = "mutating"
	// Complex: the command cannot be judged statically.
	Complex Class = "complex"
	// Refused: shell-native backgrounding somewhere in the command.
	Refused Class = "refused"
)

// Result is the outcome of [Command].
type Result struct {
	Class Class
	// Reasons explains the class with short human-readable phrases. It
	// only holds the findings of the chosen class, in source order and
	// without duplicates. It is empty (never nil) for ReadOnly.
	Reasons []string
}

// maxDepth bounds how deeply nested scripts (bash -c '...', eval strings,
// watch commands) are parsed, so hostile input cannot recurse forever.
const maxDepth = 5

// Command parses src as bash and classifies it. It never panics: should
// the analysis itself fail on some odd syntax tree, the result is Complex.
func Command(src string) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			res = Result{Class: Complex, Reasons: []string{fmt.Sprintf("internal error: %v", r)}}
		}
	}()
	var a analyzer
	a.script(src, 0, "")
	return a.result()
}

type finding struct {
	class  Class
	reason string
}

// analyzer accumulates findings. Every construct reports what it sees and
// the strongest class wins at the end, which keeps the walk itself free of
// precedence logic.
type analyzer struct {
	findings []finding
}

func (a *analyzer) add(c Class, format string, args ...any) {
	a.findings = append(a.findings, finding{c, fmt.Sprintf(format, args...)})
}

func rank(c Class) int {
	switch c {
	case Refused:
		return 3
	case Complex:
		return 2
	case Mutating:
		return 1
	}
	return 0
}

func (a *analyzer) result() Result {
	best := ReadOnly
	for _, f := range a.findings {
		if rank(f.class) > rank(best) {
			best = f.class
		}
	}
	reasons := []string{}
	seen := map[string]bool{}
	for _, f := range a.findings {
		if f.class == best && !seen[f.reason] {
			seen[f.reason] = true
			reasons = append(reasons, f.reason)
		}
	}
	return Result{Class: best, Reasons: reasons}
}

// script parses and walks one piece of shell source. origin names where a
// nested script came from (e.g. `bash -c`), for messages.
// maxBrackets bounds how deeply brackets may nest in text given to the
// parser: it recurses once per level, and a megabyte of "$((" would
// overflow the goroutine's stack, a fatal error no recover can catch.
const maxBrackets = 1000

// bracketDepth is the deepest nesting of (, { and [ in src, quotes
// ignored: it can only overstate the parser's depth.
func bracketDepth(src string) int {
	depth, most := 0, 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '(', '{', '[':
			depth++
			most = max(most, depth)
		case ')', '}', ']':
			depth = max(depth-1, 0)
		}
	}
	return most
}

func (a *analyzer) script(src string, depth int, origin string) {
	if depth > maxDepth {
		a.add(Complex, "shell code nested more than %d levels deep", maxDepth)
		return
	}
	if bracketDepth(src) > maxBrackets {
		a.add(Complex, "brackets nested more than %d deep", maxBrackets)
		return
	}
	if words, ok := shwords.Plain(src); ok {
		// One simple command of literal words: the parser's tree would
		// hold just these, so its walk is made on them at once.
		args := make([]arg, len(words))
		for i, word := range words {
			args[i] = literal(word)
		}
		(&walker{a: a, src: src, depth: depth}).simple(args)
		return
	}
	a.parsed(src, depth, origin)
}

// parsed is script through the parser.
func (a *analyzer) parsed(src string, depth int, origin string) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		if origin == "" {
			a.add(Complex, "parse error: %v", err)
		} else {
			a.add(Complex, "parse error in %s: %v", origin, err)
		}
	}
	if f == nil {
		return
	}
	// Even after a parse error, walk what was parsed: bash runs a script
	// statement by statement, so "sleep 1 &" before a later syntax error
	// still starts a background job and must still be refused.
	w := &walker{a: a, src: src, depth: depth}
	w.stmts(f.Stmts)
}

// refusalsIn analyses src separately and keeps only its Refused findings.
// It is used for code that is already Complex (eval, trap) where the rest
// of the inner verdict would only add noise.
func (a *analyzer) refusalsIn(src string, depth int, origin string) {
	var inner analyzer
	inner.script(src, depth, origin)
	for _, f := range inner.findings {
		if f.class == Refused {
			a.findings = append(a.findings, f)
		}
	}
}

// walker walks the syntax tree of one parsed script.
type walker struct {
	a     *analyzer
	src   string // source the positions refer to
	depth int
}

func (w *walker) add(c Class, format string, args ...any) { w.a.add(c, format, args...) }

func (w *walker) stmts(list []*syntax.Stmt) {
	for _, s := range list {
		w.stmt(s)
	}
}

func (w *walker) stmt(s *syntax.Stmt) {
	if s == nil {
		return
	}
	if s.Background {
		w.add(Refused, `background operator "&"`)
	}
	if s.Coprocess {
		w.add(Refused, `coprocess operator "|&"`)
	}
	if s.Disown {
		w.add(Refused, `background operator "&|"`)
	}
	w.command(s.Cmd)
	for _, r := range s.Redirs {
		w.redirect(r)
	}
}

func (w *walker) command(cmd syntax.Command) {
	switch c := cmd.(type) {
	case nil:
		// A statement made only of redirections, e.g. "> file".
	case *syntax.CallExpr:
		w.call(c)
	case *syntax.BinaryCmd:
		w.stmt(c.X)
		w.stmt(c.Y)
	case *syntax.Subshell:
		w.stmts(c.Stmts)
	case *syntax.Block:
		w.stmts(c.Stmts)
	case *syntax.IfClause:
		for ; c != nil; c = c.Else {
			w.stmts(c.Cond)
			w.stmts(c.Then)
		}
	case *syntax.WhileClause:
		w.stmts(c.Cond)
		w.stmts(c.Do)
	case *syntax.ForClause:
		if c.Loop != nil {
			w.expand(c.Loop)
		}
		w.stmts(c.Do)
	case *syntax.CaseClause:
		w.expandWord(c.Word)
		for _, item := range c.Items {
			if item == nil {
				continue
			}
			for _, p := range item.Patterns {
				w.expandWord(p)
			}
			w.stmts(item.Stmts)
		}
	case *syntax.FuncDecl:
		name := "anonymous"
		if c.Name != nil {
			name = c.Name.Value
		}
		w.add(Complex, "function definition %q", shorten(name))
		w.stmt(c.Body)
	case *syntax.ArithmCmd:
		// (( ... )) only changes shell variables.
		if c.X != nil {
			w.expand(c.X)
		}
	case *syntax.TestClause:
		if c.X != nil {
			w.expand(c.X)
		}
	case *syntax.DeclClause:
		// declare, local, export, readonly, typeset, nameref only change
		// the shell itself; their values may still hold substitutions.
		for _, as := range c.Args {
			if as != nil {
				w.expand(as)
			}
		}
	case *syntax.LetClause:
		for _, x := range c.Exprs {
			if x != nil {
				w.expand(x)
			}
		}
	case *syntax.TimeClause:
		w.stmt(c.Stmt)
	case *syntax.CoprocClause:
		w.add(Refused, `"coproc" runs a command in the background`)
		w.stmt(c.Stmt)
	default:
		w.add(Complex, "unsupported shell construct %T", cmd)
	}
}

// expand looks inside a word-level node for command and process
// substitutions, whose statements are walked like any others.
func (w *walker) expand(n syntax.Node) {
	syntax.Walk(n, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			w.stmts(n.Stmts)
			return false
		case *syntax.ProcSubst:
			w.stmts(n.Stmts)
			return false
		}
		return true
	})
}

func (w *walker) expandWord(word *syntax.Word) {
	if word != nil {
		w.expand(word)
	}
}

func (w *walker) call(c *syntax.CallExpr) {
	for _, as := range c.Assigns {
		if as != nil {
			w.expand(as)
		}
	}
	args := make([]arg, 0, len(c.Args))
	for _, word := range c.Args {
		if word == nil || len(word.Parts) == 0 {
			continue
		}
		w.expandWord(word)
		args = append(args, w.arg(word))
	}
	// With no arguments, the assignments only change the shell itself.
	w.simple(args)
}

// devices that may be written to without changing any state.
var harmlessTargets = map[string]bool{
	"/dev/null":   true,
	"/dev/stdout": true,
	"/dev/stderr": true,
}

func (w *walker) redirect(r *syntax.Redirect) {
	if r == nil {
		return
	}
	w.expandWord(r.Word)
	w.expandWord(r.Hdoc)
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob,
		syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob,
		syntax.RdrInOut:
		w.outputTo(r.Word)
	case syntax.DplOut:
		// ">&2" and "2>&1" duplicate descriptors and ">&-" closes one;
		// any other target is bash's old spelling of "&> file".
		if r.Word == nil || len(r.Word.Parts) == 0 {
			return
		}
		t := w.arg(r.Word)
		if t.static && isFD(t.text) {
			return
		}
		w.outputTo(r.Word)
	}
	// Input redirections and here-documents only read.
}

func (w *walker) outputTo(word *syntax.Word) {
	if word == nil || len(word.Parts) == 0 {
		return
	}
	t := w.arg(word)
	if t.static && harmlessTargets[t.text] {
		return
	}
	w.add(Mutating, "output redirection to %q", t.display())
}

// isFD reports whether s is a descriptor target of ">&": "2", "-" or "3-".
func isFD(s string) bool {
	s = strings.TrimSuffix(s, "-")
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

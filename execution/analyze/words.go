package analyze

import (
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// arg is a command-line word as far as it can be known statically.
//
// Expansions are assumed not to introduce options: option checks look at
// the static text only. The point is to classify what the agent wrote,
// not to defend against variables crafted to hide a flag.
type arg struct {
	// text is the word after quote removal when static, otherwise the
	// static prefix before the first expansion, so "--output=$f" still
	// shows its option.
	text   string
	static bool   // text is the whole value of the word
	glob   bool   // unquoted glob or brace characters: bash may rewrite the word
	src    string // the word as written, for messages
}

// display is what messages show for the word, shortened so that reasons
// stay readable and cannot grow with the square of the input size.
func (a arg) display() string {
	if a.static || a.src == "" {
		return shorten(a.text)
	}
	return shorten(a.src)
}

const maxShown = 60

func shorten(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// tail is the part of the word after its first n static bytes, e.g. the
// attached value of "-ofile".
func (a arg) tail(n int) arg {
	if n > len(a.text) {
		n = len(a.text)
	}
	return arg{text: a.text[n:], static: a.static, glob: a.glob, src: a.src}
}

// literal builds a synthetic static word, e.g. from splitting "env -S".
func literal(s string) arg { return arg{text: s, static: true, src: s} }

func (w *walker) arg(word *syntax.Word) arg {
	var b strings.Builder
	a := arg{static: true, src: w.source(word)}
	for _, part := range word.Parts {
		if !a.static {
			break
		}
		switch p := part.(type) {
		case *syntax.Lit:
			if unescapeUnquoted(&b, p.Value) {
				a.glob = true
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				// $'...' has its own escapes; not worth decoding.
				a.static = false
				break
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				// $"..." is translated at run time.
				a.static = false
				break
			}
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					a.static = false
					break
				}
				unescapeDouble(&b, lit.Value)
			}
		default:
			a.static = false
		}
	}
	a.text = b.String()
	return a
}

// source returns the original text of a node, or "" if its positions are
// unusable (e.g. recovered nodes).
func (w *walker) source(n syntax.Node) string {
	if word, ok := n.(*syntax.Word); ok && len(word.Parts) == 0 {
		return ""
	}
	start, end := n.Pos(), n.End()
	if !start.IsValid() || !end.IsValid() {
		return ""
	}
	s, e := int(start.Offset()), int(end.Offset())
	if s < 0 || e > len(w.src) || s > e {
		return ""
	}
	return w.src[s:e]
}

// unescapeUnquoted removes backslash escapes of an unquoted literal, as
// bash's quote removal does, and reports whether an unescaped glob or
// brace-expansion character was seen.
func unescapeUnquoted(b *strings.Builder, s string) (glob bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' { // backslash-newline is a line continuation
					b.WriteByte(s[i])
				}
			}
			continue
		case '*', '?', '[', '{':
			glob = true
		}
		b.WriteByte(c)
	}
	return glob
}

// unescapeDouble applies the few escapes that double quotes honour.
func unescapeDouble(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(c)
	}
}

// option is one parsed command-line option.
type option struct {
	name  string // "-x" or "--long" (as written, possibly abbreviated)
	value arg    // its value, when has is set
	has   bool
}

// is reports whether the option is one of the given names. Long names may
// be abbreviated as getopt_long allows ("--out" for "--output"); treating
// every prefix as a match errs towards finding the option.
func (o option) is(names ...string) bool {
	for _, n := range names {
		if o.name == n {
			return true
		}
		if strings.HasPrefix(n, "--") && len(o.name) > 2 && strings.HasPrefix(o.name, "--") &&
			strings.HasPrefix(n, o.name) {
			return true
		}
	}
	return false
}

// optSpec describes a getopt-style command line.
type optSpec struct {
	short    string   // short options that take a value ("-o FILE", "-oFILE")
	optional string   // short options whose value can only be attached ("-i.bak")
	long     []string // long options that take a value ("--output FILE", "--output=FILE")
	inOrder  bool     // options end at the first operand, as for commands that run a command
}

func (s optSpec) longTakesValue(name string) bool {
	for _, l := range s.long {
		if strings.HasPrefix(l, name) {
			return true
		}
	}
	return false
}

// parseOpts splits args into options and operands, GNU style: clustered
// short options, attached or separate values, "--" ending the options, and
// (unless inOrder) options mixed with operands.
func parseOpts(args []arg, spec optSpec) (opts []option, operands []arg) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		t := a.text
		switch {
		case t == "--" && a.static:
			return opts, append(operands, args[i+1:]...)
		case strings.HasPrefix(t, "--"):
			name, _, eq := strings.Cut(t[2:], "=")
			o := option{name: "--" + name}
			switch {
			case eq:
				o.value, o.has = a.tail(len(name)+3), true
			case !a.static:
				// "--opt$x": the name itself is partly dynamic.
			case spec.longTakesValue(name) && i+1 < len(args):
				i++
				o.value, o.has = args[i], true
			}
			opts = append(opts, o)
		case len(t) > 1 && t[0] == '-':
		cluster:
			for j := 1; j < len(t); j++ {
				c := t[j]
				o := option{name: "-" + string(c)}
				switch {
				case strings.IndexByte(spec.short, c) >= 0:
					if j+1 < len(t) || !a.static {
						o.value, o.has = a.tail(j+1), true
					} else if i+1 < len(args) {
						i++
						o.value, o.has = args[i], true
					}
					opts = append(opts, o)
					break cluster
				case strings.IndexByte(spec.optional, c) >= 0:
					if j+1 < len(t) || !a.static {
						o.value, o.has = a.tail(j+1), true
					}
					opts = append(opts, o)
					break cluster
				}
				opts = append(opts, o)
			}
		default:
			if spec.inOrder {
				return opts, append(operands, args[i:]...)
			}
			operands = append(operands, a)
		}
	}
	return opts, operands
}

func hasOpt(opts []option, names ...string) (option, bool) {
	for _, o := range opts {
		if o.is(names...) {
			return o, true
		}
	}
	return option{}, false
}

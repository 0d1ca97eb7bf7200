// Package shwords splits the plainest shell commands without a parser:
// words of bytes no shell treats specially, between blanks.
package shwords

import "strings"

// Plain splits a command made only of letters, digits, / . _ - + , : @
// % = and blanks (spaces, tabs) into its words, as bash's grammar would,
// without a parser: the parser costs a command's start more than the
// rest of what is decided about it. It declines (false) a command with
// any other byte, one with no word, one whose first word has = (which
// could be an assignment) and one whose first word is a keyword; those
// are left to the parser.
func Plain(command string) ([]string, bool) {
	for i := 0; i < len(command); i++ {
		if c := command[i]; !plain[c] && c != ' ' && c != '\t' {
			return nil, false
		}
	}
	words := strings.Fields(command)
	if len(words) == 0 || strings.IndexByte(words[0], '=') >= 0 || Keywords[words[0]] {
		return nil, false
	}
	return words, true
}

// plain marks the bytes Plain takes as they are.
var plain = func() (t [256]bool) {
	for _, c := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=") {
		t[c] = true
	}
	return t
}()

// Keywords are bash's reserved words (and the tokens that act as such at
// a command's start).
var Keywords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields("if then else elif fi case esac for select while until do done in function time { } ! [[ ]] coproc") {
		m[w] = true
	}
	return m
}()

package execution

import (
	"strings"
	"testing"
)

func TestPromptOfIsTheLastPartialLineWithoutEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"Name? ":                           "Name? ",
		"building\ndone\nContinue? [y/N] ": "Continue? [y/N] ",
		"line\n":                           "",
		"\x1b[1;32mPassword:\x1b[0m ":      "Password: ",
		"\x1b]0;title\x07Ask: ":            "Ask: ",
		"progress 10%\rprogress 90%\rOK? ": "OK? ",
		"tab\there\x01\x7f? ":              "tab\there? ",
		"héllo wörld? ":                    "héllo wörld? ",
	} {
		if got := promptOf(in); got != want {
			t.Errorf("promptOf(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("é", 300) + "end? "
	got := promptOf(long)
	if n := len([]rune(got)); n != promptChars || !strings.HasSuffix(got, "end? ") {
		t.Fatalf("long prompt: %d characters, %q", n, got[len(got)-10:])
	}
}

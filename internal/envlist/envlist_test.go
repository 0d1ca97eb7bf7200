package envlist

import (
	"slices"
	"testing"
)

func TestParse0DropsShellPrivateVariables(t *testing.T) {
	got := Parse0([]byte("A=1\x00SHLVL=2\x00PWD=/x\x00_=/usr/bin/env\x00MEVEDEL_EXEC_TAG=x\x00SSH_CLIENT=h 1 2\x00BASH_FUNC_f%%=() {  echo\n}\x00\x00junk"), "SSH_CLIENT", "MEVEDEL_EXEC_TAG")
	want := []string{"A=1", "BASH_FUNC_f%%=() {  echo\n}"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
	if got := Parse0([]byte("SSH_CLIENT=h 1 2\x00")); !slices.Equal(got, []string{"SSH_CLIENT=h 1 2"}) {
		t.Fatalf("kept only when not asked to drop: %q", got)
	}
}

func TestValueLastWins(t *testing.T) {
	env := []string{"HOME=/a", "X", "HOME=/b"}
	if v := Value(env, "HOME"); v != "/b" {
		t.Fatalf("%q", v)
	}
	if v := Value(env, "NONE"); v != "" {
		t.Fatalf("%q", v)
	}
}

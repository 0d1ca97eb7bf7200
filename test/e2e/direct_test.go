package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/statedir"
)

// A simple command of literal words runs without bash, since bash -c
// would only exec it: the command must see what it saw under bash.

// runEnded starts p and returns the final observation and all its output.
func (s *session) runEnded(p map[string]any) (string, obs) {
	s.h.t.Helper()
	o := s.mustStart("", p)
	if o.Final {
		return o.Output, o
	}
	out, fin := s.waitFinal(o.Facts.ExecutionID, nil)
	return o.Output + out, fin
}

// ended is how an execution ended, as a person would compare it.
func ended(o obs) string {
	code := "none"
	if o.Facts.ExitCode != nil {
		code = strconv.Itoa(*o.Facts.ExitCode)
	}
	return fmt.Sprintf("termination=%s exit=%s signal=%s", o.Facts.Termination, code, o.Facts.Signal)
}

func TestSimpleCommandSeesWhatBashWouldGiveIt(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	cwd := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(cwd, link); err != nil {
		t.Fatal(err)
	}
	// Bash reads a file without #! as a script of its own.
	plain := filepath.Join(cwd, "plain")
	if err := os.WriteFile(plain, []byte("echo plain script\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	commands := []string{
		"env",
		"/usr/bin/../bin/env",
		"cat /proc/self/cmdline",
		`/bin/echo 'a  b' "c d" e=f -- x,y`,
		"readlink /proc/self/cwd",
		"false",
		"true",
		"ls /no/such/path",
		`sh -c 'exit 3'`,
		`sh -c 'kill -TERM $$'`,
		"no-such-program-anywhere",
		"./plain",
	}
	envs := []map[string]string{
		{},
		{"SHLVL": "7", "OLDPWD": "/", "PWD": link},
		{"SHLVL": "x", "OLDPWD": "/no/such/dir", "PWD": "/"},
		{"SHLVL": "", "PWD": "relative"},
		{"PATH": "/usr/local/bin/:/usr/bin/:/bin/"},
		// Variables bash makes its own and exports changed or not at all.
		{"RANDOM": "5", "PS1": "$ ", "IFS": ":", "OPTIND": "3", "BASH_VERSION": "0"},
	}
	type run struct {
		command, cwd string
		env          map[string]string
	}
	var runs []run
	for _, env := range envs {
		for _, command := range commands {
			runs = append(runs, run{command, cwd, env})
		}
		// Started in a directory by a path through a link.
		runs = append(runs, run{"env", link, env})
	}
	for _, r := range runs {
		r.env["MEVEDEL_E2E"] = "1"
		direct, do := s.runEnded(map[string]any{"command": r.command, "cwd": r.cwd, "env": r.env})
		viaBash, bo := s.runEnded(map[string]any{"command": nil, "argv": []string{"/bin/bash", "-c", r.command}, "cwd": r.cwd, "env": r.env})
		if strings.HasSuffix(r.command, "env") {
			direct, viaBash = sortedEnv(direct), sortedEnv(viaBash)
		}
		if direct != viaBash {
			t.Errorf("%q in %s with env %v: output\n%s\nunder bash:\n%s", r.command, r.cwd, r.env, direct, viaBash)
		}
		if ended(do) != ended(bo) {
			t.Errorf("%q in %s with env %v: %s; under bash %s", r.command, r.cwd, r.env, ended(do), ended(bo))
		}
	}
}

// sortedEnv is env's output in order, without the tag (which names the
// execution).
func sortedEnv(out string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, statedir.TagVar+"=") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// pageFaults returns a function that runs a start of p (with extra's
// parameters too), which must print /proc/self/stat, and returns the
// minor page faults the process made up to then.
func pageFaults(t *testing.T, s *session, extra map[string]any) func(p map[string]any) int {
	return func(p map[string]any) int {
		t.Helper()
		for k, v := range extra {
			p[k] = v
		}
		out, o := s.runEnded(p)
		f := strings.Fields(out[strings.LastIndexByte(out, ')')+1:])
		if o.Facts.Outcome != execution.Success || len(f) < 8 {
			t.Fatalf("%v: %q, %s", p, out, ended(o))
		}
		if extra["sandbox"] != nil {
			wantBubblewrap(t, o.Facts)
		}
		n, err := strconv.Atoi(f[7]) // minflt, the 10th field
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// The process's own page faults survive exec: under bash they count
// bash's start too, and a command run without it has far fewer.
func TestSimpleCommandRunsWithoutBash(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	faults := pageFaults(t, s, nil)
	const cmd = "cat /proc/self/stat"
	wantFaultsAsAlone(t, faults, cmd, "")
	// One with an expansion is still bash's, which execs cat once it has
	// expanded the word (to nothing).
	got := faults(map[string]any{"command": cmd + " ${NOT_SET_ANYWHERE}"})
	alone := faults(map[string]any{"command": nil, "argv": []string{"cat", "/proc/self/stat"}})
	bash := faults(map[string]any{"command": nil, "argv": []string{"/bin/bash", "-c", cmd}})
	if got <= (bash+alone)/2 {
		t.Fatalf("with an expansion: %d page faults, as alone (%d), not as under bash (%d)", got, alone, bash)
	}
}

// wantFaultsAsAlone runs cmd (cat /proc/self/stat) three times each way,
// and wants its page faults those of cat alone, not of cat under bash.
func wantFaultsAsAlone(t *testing.T, faults func(map[string]any) int, cmd, how string) {
	t.Helper()
	for range 3 {
		bash := faults(map[string]any{"command": nil, "argv": []string{"/bin/bash", "-c", cmd}})
		alone := faults(map[string]any{"command": nil, "argv": []string{"cat", "/proc/self/stat"}})
		got := faults(map[string]any{"command": cmd})
		if bash <= alone {
			t.Fatalf("bash's start made no page faults to tell by: %d under bash, %d alone", bash, alone)
		}
		if got >= (bash+alone)/2 {
			t.Fatalf("%s%q made %d page faults: as under bash (%d), not as alone (%d)", how, cmd, got, bash, alone)
		}
	}
}

// In a box, a system program runs without bash too (the box shows it as
// it is on the host), and sees what it would see under bash there.
func TestConfinedSimpleCommandRunsWithoutBash(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	cwd := t.TempDir()
	box := confined(cwd)
	faults := pageFaults(t, s, map[string]any{"cwd": cwd, "sandbox": box})
	wantFaultsAsAlone(t, faults, "cat /proc/self/stat", "confined ")
	for _, command := range []string{"env", "cat /proc/self/cmdline", "readlink /proc/self/cwd", "false", "no-such-program-anywhere", "touch /etc/mevedel-direct-denied"} {
		p := map[string]any{"command": command, "cwd": cwd, "sandbox": box, "env": map[string]string{"MEVEDEL_E2E": "1"}}
		direct, do := s.runEnded(p)
		p["command"], p["argv"] = nil, []string{"/bin/bash", "-c", command}
		viaBash, bo := s.runEnded(p)
		if command == "env" {
			direct, viaBash = sortedEnv(direct), sortedEnv(viaBash)
		}
		if direct != viaBash || ended(do) != ended(bo) {
			t.Errorf("confined %q: %q, %s; under bash %q, %s", command, direct, ended(do), viaBash, ended(bo))
		}
		if !slices.Equal(do.Facts.SandboxDenials, bo.Facts.SandboxDenials) {
			t.Errorf("confined %q: denials %v; under bash %v", command, do.Facts.SandboxDenials, bo.Facts.SandboxDenials)
		}
	}
}

package remote

import (
	"context"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// waitLimit bounds every wait in these tests; nothing should come close.
const waitLimit = 20 * time.Second

func newPool(t *testing.T, s *sshd.Server) *Pool {
	t.Helper()
	p := NewPool(Config{Home: s.Home})
	t.Cleanup(func() { p.Close() })
	return p
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// target is the fixture's server by its config alias.
func target(dir string) Target { return Target{Host: sshd.Alias, Path: dir} }

// output collects a process's output in the background; it is closed
// at EOF.
type output struct{ testsupport.Buffer }

func collect(r io.Reader) *output {
	o := &output{}
	go func() {
		_, _ = io.Copy(&o.Buffer, r)
		o.Close()
	}()
	return o
}

// waitFor waits until the output contains s.
func (o *output) waitFor(t *testing.T, s string) {
	t.Helper()
	if o.Wait(waitLimit, func(got string) bool { return strings.Contains(got, s) }) {
		return
	}
	if o.Closed() {
		t.Fatalf("output ended without %q: %q", s, o.String())
	}
	t.Fatalf("no %q in the output within %v: %q", s, waitLimit, o.String())
}

// all waits for EOF and returns the whole output.
func (o *output) all(t *testing.T) string {
	t.Helper()
	if !o.Wait(waitLimit, nil) {
		t.Fatalf("output did not end within %v: %q", waitLimit, o.String())
	}
	return o.String()
}

func wait(t *testing.T, p *Process) (process.Exit, error) {
	t.Helper()
	type res struct {
		e   process.Exit
		err error
	}
	ch := make(chan res, 1)
	go func() {
		e, err := p.Wait()
		ch <- res{e, err}
	}()
	select {
	case r := <-ch:
		return r.e, r.err
	case <-time.After(waitLimit):
		t.Fatalf("Wait did not return within %v", waitLimit)
		return process.Exit{}, nil
	}
}

// liveMembers lists the live processes on this machine (the "remote"
// host of the fixture) of group pgid, carrying tag, or descending from
// either.
func liveMembers(pgid int, tag string) []int {
	var out []int
	for _, p := range process.Members(pgid, tag, 0) {
		out = append(out, p.Pid)
	}
	return out
}

// reap kills whatever is left of a test's group on this machine: no test
// leaves a process behind.
func reap(t *testing.T, pgid int, tag string) {
	t.Helper()
	t.Cleanup(func() {
		for _, pid := range liveMembers(pgid, tag) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// start starts spec on the fixture and registers the cleanup of its group.
func start(t *testing.T, p *Pool, spec process.Spec) (*Process, *output) {
	t.Helper()
	if spec.Tag == "" {
		spec.Tag = "MEVEDEL_EXEC_TAG=test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	proc, err := p.Start(testCtx(t), target(spec.Dir), spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Command, err)
	}
	reap(t, proc.Pgid(), spec.Tag)
	return proc, collect(proc.Output())
}

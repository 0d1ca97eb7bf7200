package remote

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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

// output collects a process's output in the background.
type output struct {
	mu   sync.Mutex
	buf  bytes.Buffer  // guarded by mu
	more chan struct{} // replaced on every write, guarded by mu
	eof  chan struct{} // closed once, at EOF
}

func collect(r io.Reader) *output {
	o := &output{more: make(chan struct{}), eof: make(chan struct{})}
	go func() {
		defer close(o.eof)
		b := make([]byte, 32<<10)
		for {
			n, err := r.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			if n > 0 {
				close(o.more)
				o.more = make(chan struct{})
			}
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output contains s.
func (o *output) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		o.mu.Lock()
		got, more := o.buf.String(), o.more
		o.mu.Unlock()
		if strings.Contains(got, s) {
			return
		}
		select {
		case <-more:
		case <-o.eof:
			if !strings.Contains(o.String(), s) {
				t.Fatalf("output ended without %q: %q", s, o.String())
			}
			return
		case <-deadline:
			t.Fatalf("no %q in the output within %v: %q", s, waitLimit, got)
		}
	}
}

// all waits for EOF and returns the whole output.
func (o *output) all(t *testing.T) string {
	t.Helper()
	select {
	case <-o.eof:
	case <-time.After(waitLimit):
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

// stat reads /proc/PID/stat of this machine, the "remote" host of the
// fixture: state, pgrp and start time.
func stat(pid int) (state byte, pgrp int, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+2:]))
	pgrp, _ = strconv.Atoi(f[2])
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], pgrp, start, true
}

// liveMembers lists the non-zombie processes of group pgid, or carrying
// tag, on this machine.
func liveMembers(pgid int, tag string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, pgrp, _, ok := stat(pid)
		if !ok || st == 'Z' || st == 'X' {
			continue
		}
		if pgrp == pgid {
			out = append(out, pid)
			continue
		}
		if tag != "" {
			env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
			for _, kv := range bytes.Split(env, []byte{0}) {
				if string(kv) == tag {
					out = append(out, pid)
					break
				}
			}
		}
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

// Package e2e drives the built mevedel-exec binary over its real protocol,
// with real child processes.
package e2e

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/sys/unix"
)

var helperBin string

func TestMain(m *testing.M) {
	if sock := os.Getenv(dialAsEnv); sock != "" {
		os.Exit(dialMain(sock))
	}
	dir, err := os.MkdirTemp("", "mevedel-exec-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helperBin = filepath.Join(dir, "mevedel-exec")
	// The helper is built with the race detector too: every end-to-end
	// test also checks the helper's own goroutines.
	if err := testsupport.BuildHelper(context.Background(), helperBin, true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for _, f := range afterAll.fs {
		f()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// afterAll is what TestMain runs once every test has ended: removing
// what tests shared (containers, a sudo rule).
var afterAll struct {
	mu sync.Mutex
	fs []func() // guarded by mu
}

func atEnd(f func()) {
	afterAll.mu.Lock()
	afterAll.fs = append(afterAll.fs, f)
	afterAll.mu.Unlock()
}

// waitBound bounds every wait in these tests; it is never a sleep.
const waitBound = 30 * time.Second

type note = client.Notification

// helper is one running mevedel-exec serve.
type helper struct {
	t      *testing.T
	c      *client.Client
	home   string
	stderr *testsupport.Buffer

	mu    sync.Mutex
	cond  *sync.Cond
	notes []note // guarded by mu
}

type helperOpt func(*client.Options, string)

// withProfile writes a ~/.bash_profile into the helper's private HOME.
func withProfile(text string) helperOpt {
	return func(_ *client.Options, home string) {
		if err := os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(text), 0o600); err != nil {
			panic(err)
		}
	}
}

func withEnv(kv ...string) helperOpt {
	return func(o *client.Options, _ string) { o.Env = append(o.Env, kv...) }
}

// baseEnv is the helper's environment: a private HOME, so the user's own
// profile (slow here) is never run.
func baseEnv(home string) []string {
	return []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "USER=" + os.Getenv("USER"), "LANG=C.UTF-8", testsupport.RaceExit}
}

// startHelper starts the helper with a private HOME and a protocol client
// that records every notification.
func startHelper(t *testing.T, opts ...helperOpt) *helper {
	t.Helper()
	home := t.TempDir()
	h := &helper{t: t, home: home, stderr: &testsupport.Buffer{}}
	h.cond = sync.NewCond(&h.mu)
	o := client.Options{Bin: helperBin, Env: baseEnv(home), Stderr: h.stderr}
	for _, opt := range opts {
		opt(&o, home)
	}
	c, err := client.Start(o, func(_ *client.Client, n client.Notification) {
		h.mu.Lock()
		h.notes = append(h.notes, n)
		h.cond.Broadcast()
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	t.Cleanup(func() { h.stop() })
	return h
}

// kill ends the helper with SIGKILL, as a crash would, and waits for it.
func (h *helper) kill() {
	_ = h.c.Child().Kill()
	<-h.c.Child().Exited()
}

// stop shuts the helper down, then checks that it exited and that no
// process of any of its executions survived.
func (h *helper) stop() {
	t := h.t
	if t.Failed() {
		h.logStacks()
	}
	if err := h.c.Shutdown(waitBound); err != nil {
		t.Errorf("helper did not exit after shutdown and EOF: %v", err)
	}
	if err := h.stderr.String(); strings.Contains(err, "DATA RACE") || strings.Contains(err, "panic") {
		t.Errorf("helper stderr:\n%s", err)
	} else if t.Failed() && err != "" {
		t.Logf("helper stderr (its end):\n%s", err[max(0, len(err)-16<<10):])
	}
	if left := testsupport.UnderHome(h.home, true); len(left) > 0 {
		t.Errorf("processes left behind by the helper: %v", left)
	}
}

// logStacks logs where every goroutine of a still running helper is, from
// the dump it writes on SIGUSR1: a failed test whose helper was stuck
// then says where.
func (h *helper) logStacks() {
	select {
	case <-h.c.Child().Exited():
		return
	default:
	}
	before := len(h.stderr.String())
	if err := unix.Kill(h.c.Child().Pid(), unix.SIGUSR1); err != nil {
		return
	}
	const end = "goroutine stacks end"
	if h.stderr.Wait(5*time.Second, func(s string) bool { return strings.Contains(s[min(before, len(s)):], end) }) {
		s := h.stderr.String()[before:]
		h.t.Logf("the helper's goroutines when the test failed:\n%s", s[:strings.Index(s, end)+len(end)])
	}
}

// rpcError is a JSON-RPC error answer.
func rpcError(err error) (*jsonrpc2.Error, bool) {
	var e *jsonrpc2.Error
	ok := errors.As(err, &e)
	return e, ok
}

func errKind(e *jsonrpc2.Error) string {
	if e == nil || e.Data == nil {
		return ""
	}
	var d struct{ Kind string }
	_ = json.Unmarshal(*e.Data, &d)
	return d.Kind
}

func (h *helper) call(method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	return h.c.Call(ctx, method, params, result)
}

func (h *helper) mustCall(method string, params, result any) {
	h.t.Helper()
	if err := h.call(method, params, result); err != nil {
		h.t.Fatalf("%s: %v", method, err)
	}
}

// wantError checks that a call fails with code and kind.
func (h *helper) wantError(method string, params any, code int64, kind string) *jsonrpc2.Error {
	h.t.Helper()
	err := h.call(method, params, nil)
	e, ok := rpcError(err)
	if !ok {
		h.t.Fatalf("%s: want error %d, got %v", method, code, err)
	}
	if e.Code != code || errKind(e) != kind {
		h.t.Fatalf("%s: want error %d/%s, got %d/%s: %s", method, code, kind, e.Code, errKind(e), e.Message)
	}
	return e
}

type session struct {
	h        *helper
	id       string
	stateDir string
	prefix   string
}

// open opens a session in a fresh state directory.
func (h *helper) open(limits map[string]any) *session {
	h.t.Helper()
	dir := filepath.Join(h.t.TempDir(), "state")
	return h.openAt(dir, limits)
}

func (h *helper) openAt(dir string, limits map[string]any) *session {
	h.t.Helper()
	id := fmt.Sprintf("s%d", time.Now().UnixNano())
	p := map[string]any{"sessionId": id, "stateDir": dir}
	if limits != nil {
		p["limits"] = limits
	}
	var info execution.SessionInfo
	h.mustCall("session/open", p, &info)
	return &session{h: h, id: id, stateDir: info.StateDir, prefix: info.IDPrefix}
}

type obs = execution.Observation

// start runs exec/start with extra params merged in.
func (s *session) start(command string, extra map[string]any) (obs, error) {
	p := map[string]any{"sessionId": s.id, "command": command, "cwd": s.h.home, "env": map[string]string{"MEVEDEL_E2E": "1"}}
	for k, v := range extra {
		p[k] = v
	}
	var o obs
	err := s.h.call("exec/start", p, &o)
	return o, err
}

func (s *session) mustStart(command string, extra map[string]any) obs {
	s.h.t.Helper()
	o, err := s.start(command, extra)
	if err != nil {
		s.h.t.Fatalf("exec/start %q: %v", command, err)
	}
	return o
}

func (s *session) observe(id string, extra map[string]any) (obs, error) {
	p := map[string]any{"sessionId": s.id, "executionId": id}
	for k, v := range extra {
		p[k] = v
	}
	var o obs
	err := s.h.call("exec/observe", p, &o)
	return o, err
}

func (s *session) mustObserve(id string, extra map[string]any) obs {
	s.h.t.Helper()
	o, err := s.observe(id, extra)
	if err != nil {
		s.h.t.Fatalf("exec/observe %s: %v", id, err)
	}
	return o
}

// waitFinal polls with waiting observations until the final one, and
// returns the concatenated output and the final observation.
func (s *session) waitFinal(id string, extra map[string]any) (string, obs) {
	s.h.t.Helper()
	deadline := time.Now().Add(waitBound)
	var out strings.Builder
	p := map[string]any{"waitMs": 5000}
	for k, v := range extra {
		p[k] = v
	}
	for time.Now().Before(deadline) {
		o := s.mustObserve(id, p)
		out.WriteString(o.Output)
		if o.Final {
			if o.DeliveryID != "" {
				// The result was delivered meanwhile: keep it as Emacs would,
				// so the execution can leave the registry.
				s.h.mustCall("mailbox/ack", map[string]any{"sessionId": s.id, "deliveryId": o.DeliveryID, "durable": true}, nil)
			}
			return out.String(), o
		}
	}
	s.h.t.Fatalf("execution %s did not end within %v", id, waitBound)
	return "", obs{}
}

// observeUntil polls (consuming output) until the output accumulated since
// start (its own output included) contains want, and returns it.
func (s *session) observeUntil(start obs, want string) string {
	s.h.t.Helper()
	id := start.Facts.ExecutionID
	deadline := time.Now().Add(waitBound)
	var out strings.Builder
	out.WriteString(start.Output)
	if strings.Contains(start.Output, want) {
		return out.String()
	}
	for time.Now().Before(deadline) {
		o := s.mustObserve(id, map[string]any{"waitMs": 20})
		out.WriteString(o.Output)
		if strings.Contains(out.String(), want) {
			return out.String()
		}
		if o.Final {
			s.h.t.Fatalf("execution %s ended before printing %q; output %q", id, want, out.String())
		}
	}
	s.h.t.Fatalf("execution %s did not print %q within %v; output %q", id, want, waitBound, out.String())
	return ""
}

// waitNote waits for a notification that satisfies match.
func (h *helper) waitNote(match func(note) bool) note {
	h.t.Helper()
	deadline := time.Now().Add(waitBound)
	timer := time.AfterFunc(waitBound, func() {
		h.mu.Lock()
		h.cond.Broadcast()
		h.mu.Unlock()
	})
	defer timer.Stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := 0
	for {
		for ; seen < len(h.notes); seen++ {
			if match(h.notes[seen]) {
				return h.notes[seen]
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no matching notification within %v", waitBound)
		}
		h.cond.Wait()
	}
}

// waitLive waits for an exec/changed notification after which an
// execution's facts satisfy match, and returns them: its facts as a
// consumer holds them, the last ones sent with its growth since merged.
func (h *helper) waitLive(match func(execution.Facts) bool) execution.Facts {
	h.t.Helper()
	var found execution.Facts
	table := map[string]execution.Facts{}
	h.waitNote(func(n note) bool {
		if n.Method != "exec/changed" {
			return false
		}
		var p rpc.ChangedParams
		_ = json.Unmarshal(n.Params, &p)
		for _, f := range p.Changed {
			table[f.ExecutionID] = f
			if match(f) {
				found = f
				return true
			}
		}
		for _, g := range p.Grown {
			f, ok := table[g.ExecutionID]
			if !ok {
				h.t.Errorf("exec/changed says %s grew before it named it", g.ExecutionID)
				continue
			}
			f = f.Grow(g)
			table[g.ExecutionID] = f
			if match(f) {
				found = f
				return true
			}
		}
		return false
	})
	return found
}

// waitState waits until execution id has the given state.
func (h *helper) waitState(id string, state execution.State) execution.Facts {
	h.t.Helper()
	return h.waitLive(func(f execution.Facts) bool { return f.ExecutionID == id && f.State == state })
}

// waitCommandState waits until an execution running command has the given
// state.
func (h *helper) waitCommandState(command string, state execution.State) execution.Facts {
	h.t.Helper()
	return h.waitLive(func(f execution.Facts) bool { return f.Command == command && f.State == state })
}

// fifo makes a named pipe; commands block reading it until the test
// writes, which is how tests hold a command at a known point.
func fifo(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := mkfifo(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// release opens the fifo for writing and closes it, so a reader gets EOF.
func release(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// pidsIn extracts "pid N" lines from output.
func pidsIn(out string) []int {
	var pids []int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "pid "); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// The helper under test is a strict build: an illegal move of an
// execution's state machines panics there (and the test that caused it
// fails on the panic in the helper's stderr) instead of being refused.
func TestHelperUnderTestIsStrict(t *testing.T) {
	t.Parallel()
	info, err := buildinfo.ReadFile(helperBin)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), "strict") {
			return
		}
	}
	t.Fatalf("helper built without -tags strict: %v", info.Settings)
}

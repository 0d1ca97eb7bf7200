package main

// The helper as the benchmarks drive it, through internal/client.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
)

// --- the helper ------------------------------------------------------------

// helper is one running `mevedel-exec serve` and its protocol client.
type helper struct {
	c      *client.Client
	stderr *testsupport.Buffer
}

// helperEnv is added to the environment of the helpers started (the
// remote benchmark's mode).
var helperEnv []string

// BENCH_HELPER_PROFILE=DIR builds the helper with its profiling
// (-tags benchprofile) and has each helper started write
// DIR/helper-N.cpu.pprof and DIR/helper-N.allocs.pprof (and with
// BENCH_HELPER_TRACE=1 an execution trace, DIR/helper-N.trace).
var profileDir = os.Getenv("BENCH_HELPER_PROFILE")

// profiled counts the helpers started with a profile.
var profiled int

// buildHelper builds the helper the benchmarks run to bin.
func buildHelper(ctx context.Context, bin string) error {
	if profileDir == "" {
		return testsupport.BuildHelper(ctx, bin, false)
	}
	progress("the helper writes its profiles to %s", profileDir)
	b, err := exec.CommandContext(ctx, "go", "build", "-tags", "benchprofile", "-o", bin, "github.com/mevedel/mevedel-exec/cmd/mevedel-exec").CombinedOutput()
	if err != nil {
		return fmt.Errorf("building the helper: %v\n%s", err, b)
	}
	return nil
}

func startHelper(ctx context.Context, bin, home string) (*helper, error) {
	h := &helper{stderr: &testsupport.Buffer{}}
	// Its own process group: a Ctrl-C at the terminal reaches only this
	// program, which then shuts the helper down in order. Notifications
	// (exec/changed, exec/settled, ...) are not needed here.
	env := append(minimalEnv(home), helperEnv...)
	if profileDir != "" {
		profiled++
		env = append(env, fmt.Sprintf("MEVEDEL_EXEC_PROFILE=%s/helper-%d", profileDir, profiled))
		if os.Getenv("BENCH_HELPER_TRACE") != "" {
			env = append(env, "MEVEDEL_EXEC_TRACE=1")
		}
	}
	c, err := client.Start(client.Options{Bin: bin, Env: env, Dir: home, Stderr: h.stderr, OwnGroup: true}, nil)
	if err != nil {
		return nil, err
	}
	h.c = c
	var info rpc.InitializeResult
	if err := h.call(ctx, rpc.MethodInitialize, rpc.InitializeParams{ClientName: "mevedel-bench", ProtocolVersion: rpc.ProtocolVersion}, &info); err != nil {
		_ = h.close()
		return nil, err
	}
	if info.Pid != h.pid() {
		_ = h.close()
		return nil, fmt.Errorf("initialize reports pid %d, started %d", info.Pid, h.pid())
	}
	return h, nil
}

func (h *helper) pid() int { return h.c.Child().Pid() }

func (h *helper) call(ctx context.Context, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := h.c.Call(ctx, method, params, result); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// close asks for shutdown, closes stdin and waits for the helper; one
// that does not exit is killed.
func (h *helper) close() error {
	if err := h.c.Shutdown(30 * time.Second); err != nil {
		return fmt.Errorf("after shutdown and EOF: %w", err)
	}
	return nil
}

func (h *helper) stderrTail() string {
	s := strings.TrimSpace(h.stderr.String())
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

type session struct {
	h        *helper
	id       string
	stateDir string
}

func (h *helper) open(ctx context.Context, stateDir string, limits execution.Limits) (*session, error) {
	id := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var info execution.SessionInfo
	if err := h.call(ctx, rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: id, StateDir: stateDir, Limits: limits}, &info); err != nil {
		return nil, err
	}
	return &session{h: h, id: id, stateDir: info.StateDir}, nil
}

// startWait runs command with exec/start without yieldMs, so the reply is
// the final observation, and checks that it succeeded.
func (s *session) startWait(ctx context.Context, command, cwd string) (execution.Observation, error) {
	var o execution.Observation
	err := s.h.call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{
		SessionID: s.id, Command: command, Cwd: cwd, MaxOutputChars: 200,
	}, &o)
	if err != nil {
		return o, err
	}
	f := o.Facts
	if !o.Final || f.Outcome != execution.Success {
		code := "none"
		if f.ExitCode != nil {
			code = strconv.Itoa(*f.ExitCode)
		}
		return o, fmt.Errorf("%q did not succeed: final=%v status=%s termination=%s exit=%s reason=%q",
			command, o.Final, f.Status, f.Termination, code, f.Reason)
	}
	return o, nil
}

func (s *session) spoolPath(id string) string {
	return filepath.Join(s.stateDir, "executions", id+".log")
}

package remote

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
)

var _ process.Runner = Runner{}
var _ process.Process = (*Process)(nil)

// Runner starts commands on one host through a pool: the process.Runner of
// an execution whose cwd names an SSH host.
type Runner struct {
	Pool *Pool
	// Target is the host as the cwd names it, which every pool call takes:
	// the pool applies ~/.ssh/config to it (cached). Given the resolved
	// target instead, it would look up the real host name, and an
	// IdentityFile set for the alias would be lost.
	Target Target
	Logger *log.Logger // where a missing login environment is reported; may be nil
	// Sandbox, when set, is the policy as the host applies it (Pool.Confine's
	// answer), and Resources the command's limits: with either, the command
	// runs under the host agent or not at all, never through the wrapper.
	Sandbox   *sandbox.Policy
	Resources *sandbox.Resources
}

// Start lays spec.Env over the host's login environment and starts the
// command in Target's path. Without a login environment (a profile that
// fails), it starts from the one sshd gives, as a local command would from
// the helper's own.
func (r Runner) Start(ctx context.Context, spec process.Spec) (process.Process, error) {
	if spec.Stdin != nil {
		return nil, errors.New("remote: stdin data is not supported on SSH targets")
	}
	ls := launchSpec{Spec: spec, sandbox: r.Sandbox, resources: r.Resources}
	if len(spec.Argv) > 0 {
		// The host runs every command through its wrapper's bash: an argv
		// becomes one exec of its words, quoted, so no word is a shell's.
		words := make([]string, len(spec.Argv))
		for i, w := range spec.Argv {
			words[i] = shq(w)
		}
		ls.Command = "exec " + strings.Join(words, " ")
	}
	var env []string
	var err error
	if !r.Target.Stream() {
		env, err = r.Pool.LoginEnv(ctx, r.Target)
	}
	switch {
	case r.Target.Stream():
		// The environment sudo or the engine gives the agent, the
		// request's over it: no login shell is asked.
		ls.overlay = true
	case err == nil:
		ls.Env = process.MergeEnv(env, spec.Env)
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.Is(err, ErrUnavailable):
		return nil, err
	default:
		if r.Logger != nil {
			r.Logger.Printf("%v; using the environment sshd gives", err)
		}
		ls.overlay = true
	}
	ls.Dir = r.Target.Path
	if proc, err, ok := r.Pool.startOnAgent(ctx, r.Target, ls, r.Logger); ok {
		if err != nil && ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return proc, err
	}
	if ls.confined() {
		// Granted a box or limits that only the agent gives: never run
		// without them.
		return nil, fmt.Errorf("remote: %s: the host agent that was to confine the command or apply its limits is not available, and the wrapper can do neither; nothing was run", r.Target)
	}
	// The wrapper has no gate: the start is made durable first.
	if spec.BeforeRun != nil {
		if err := spec.BeforeRun(); err != nil {
			return nil, err
		}
	}
	var proc process.Process
	if r.Target.Container() {
		proc, err = r.Pool.startEngine(ctx, r.Target, ls)
	} else {
		proc, err = r.Pool.start(ctx, r.Target, ls)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	return proc, nil
}

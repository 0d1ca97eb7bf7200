package remote

import (
	"context"
	"errors"
	"log"
	"strings"

	"github.com/mevedel/mevedel-exec/process"
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
}

// Start lays spec.Env over the host's login environment and starts the
// command in Target's path. Without a login environment (a profile that
// fails), it starts from the one sshd gives, as a local command would from
// the helper's own.
func (r Runner) Start(ctx context.Context, spec process.Spec) (process.Process, error) {
	if spec.Stdin != nil {
		return nil, errors.New("remote: stdin data is not supported on SSH targets")
	}
	ls := launchSpec{Spec: spec}
	if len(spec.Argv) > 0 {
		// The host runs every command through its wrapper's bash: an argv
		// becomes one exec of its words, quoted, so no word is a shell's.
		words := make([]string, len(spec.Argv))
		for i, w := range spec.Argv {
			words[i] = shq(w)
		}
		ls.Command = "exec " + strings.Join(words, " ")
	}
	env, err := r.Pool.LoginEnv(ctx, r.Target)
	switch {
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
	proc, err := r.Pool.start(ctx, r.Target, ls)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	return proc, nil
}

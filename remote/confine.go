package remote

import (
	"context"
	"errors"
	"fmt"

	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// Confinement on a host. The host agent resolves a start's policy against
// the host's own paths and probes bubblewrap there once per agent (per
// connection); it then starts the command inside the box and its resource
// group with the local runner's code. The wrapper cannot confine anything:
// a host whose commands go through it has no backend.

// HostConfinement is what a host can do about a start's sandbox and
// resource limits.
type HostConfinement struct {
	// Agent is true when the host agent runs the host's commands: then
	// it applies resource limits, and Facts is its answer.
	Agent bool
	// Why says why the host's commands go through the wrapper, when
	// Agent is false.
	Why string
	// Facts is the policy as the host applies it and its backend.
	Facts sandbox.Facts
}

// ErrPolicy marks a policy that cannot apply on the host (a writable root
// that does not exist there).
var ErrPolicy = errors.New("remote: sandbox policy")

type policyError struct{ msg string }

func (e policyError) Error() string        { return e.msg }
func (e policyError) Is(target error) bool { return target == ErrPolicy }

// Confine asks t's host agent how pol applies there, deploying the agent
// when none runs yet. A host that runs its commands through the wrapper
// answers with Agent false and the reason.
func (p *Pool) Confine(ctx context.Context, t Target, pol sandbox.Policy) (HostConfinement, error) {
	if p.cfg.Mode == ModeWrapper && (!t.Stream() || t.Container()) {
		return HostConfinement{Why: "the wrapper is forced"}, nil
	}
	if !agent.Deployable {
		return HostConfinement{Why: "this program cannot serve as a host agent"}, nil
	}
	r, err := p.resolve(t)
	if err != nil {
		return HostConfinement{}, err
	}
	for range 2 { // a second time when the agent was lost meanwhile
		cl, err := p.agentFor(ctx, r)
		if cl == nil {
			if ctx.Err() != nil {
				return HostConfinement{}, context.Cause(ctx)
			}
			why := "no host agent"
			if err != nil {
				why = err.Error()
			}
			return HostConfinement{Why: why}, nil
		}
		rep, err := cl.request(ctx, agent.Request{Op: agent.OpConfine, Sandbox: &pol})
		if errors.Is(err, errAgentLost) {
			continue
		}
		if err != nil {
			return HostConfinement{}, err
		}
		switch {
		case rep.Err != "":
			return HostConfinement{}, fmt.Errorf("remote: %s: %s", r.Target, rep.Err)
		case rep.Confine == nil:
			return HostConfinement{}, fmt.Errorf("remote: %s: the host agent did not answer the sandbox policy", r.Target)
		case rep.Confine.Invalid != "":
			return HostConfinement{}, policyError{rep.Confine.Invalid + " (on " + r.Target.String() + ")"}
		}
		return HostConfinement{Agent: true, Facts: rep.Confine.Facts}, nil
	}
	return HostConfinement{}, unavailablef("remote: %s: the host agent's channel ended twice while the sandbox policy was asked", r.Target)
}

// LimitHit names the resource limit that ended the command, as the host
// agent read it from the group's counters there.
func (ap *agentProcess) LimitHit() string {
	if !ap.Exited() {
		return ""
	}
	return ap.limit
}

// Release asks the host agent to remove the execution's resource group
// and the mount points its box made, now that nothing of it is alive (the
// helper's settlement), and returns the limit hit read then.
func (ap *agentProcess) Release(ctx context.Context) (string, error) {
	rep, err := ap.cl.request(ctx, agent.Request{Op: agent.OpRelease, Exec: ap.id})
	if err != nil {
		return "", err
	}
	if rep.Err != "" {
		return "", fmt.Errorf("remote: %s: %s", ap.cl.target.Target, rep.Err)
	}
	return rep.Limit, nil
}

// ResourceFacts says how the host applied the start's limits; nil when
// none were asked.
func (ap *agentProcess) ResourceFacts() *sandbox.ResourceFacts { return ap.resFacts }

// SandboxDenials asks the host which of the errors in output a confined
// command met because of applied: the paths are the host's, so the host
// resolves and checks them.
func (ap *agentProcess) SandboxDenials(ctx context.Context, output string, applied sandbox.Policy) ([]sandbox.Denial, error) {
	rep, err := ap.cl.request(ctx, agent.Request{Op: agent.OpDenials, Sandbox: &applied, Dir: ap.dir, Data: []byte(output)})
	if err != nil {
		return nil, err
	}
	if rep.Err != "" {
		return nil, fmt.Errorf("remote: %s: %s", ap.cl.target.Target, rep.Err)
	}
	return rep.Denials, nil
}

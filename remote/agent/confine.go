package agent

import (
	"fmt"
	"os"
	"strconv"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// The host's side of confinement: the policy resolved against this host,
// bubblewrap probed once per agent, and a start's box and group.

// release removes the execution's resource group and the mount points its
// box made on this host, once; a second caller waits for the first. Never
// while a member may live: a mount point removed here would vanish inside
// a running box too. After the exit it reads the limit hit again, as the
// local runner does once the whole tree is gone.
func (e *hostExec) release() {
	e.relOnce.Do(func() {
		e.mu.Lock()
		ex, waited := e.exit, e.waited
		e.mu.Unlock()
		if waited {
			e.limit = e.group.LimitHit(ex.Code, ex.Signaled, ex.Signal, e.box != nil)
		}
		if err := e.group.Close(); err != nil {
			logger.Print(err)
		}
		e.box.Release()
	})
}

// probeBackend runs the bubblewrap probe once per agent (per connection),
// on the agent's own PATH.
func (h *host) probeBackend() sandbox.Probe {
	h.probeOnce.Do(func() {
		h.probe = process.ProbeSandbox()
	})
	return h.probe
}

// confinement resolves a policy against this host: its home, the .git of
// a repository holding a writable root, the agents' own directory.
func (h *host) confinement(p *sandbox.Policy) Confinement {
	if p == nil {
		p = &sandbox.Policy{}
	}
	// The agents' directory, and where a daemon of the host's own user
	// keeps its socket: a box on the host reaches no helper either.
	applied, err := p.Resolve(sandbox.Where{Home: h.home, StateDir: h.own, Control: h.control()})
	if err != nil {
		return Confinement{Invalid: err.Error()}
	}
	if applied.Mode == sandbox.Off {
		return Confinement{Facts: sandbox.Facts{Backend: sandbox.BackendNone, Reason: "sandbox mode is off"}}
	}
	pr := h.probeBackend()
	if pr.Path == "" {
		return Confinement{Facts: sandbox.Facts{Backend: sandbox.BackendNone, Reason: pr.Reason + " on the host", Policy: &applied}}
	}
	return Confinement{Facts: sandbox.Facts{Backend: sandbox.BackendBubblewrap, Network: applied.Network, Policy: &applied}}
}

// confine builds a start's box and group into spec and e. A start that
// asked for a box and cannot have one does not run at all.
func (h *host) confine(id uint32, s StartSpec, spec *process.Spec, e *hostExec) error {
	if s.Sandbox != nil {
		if err := s.Sandbox.Check(); err != nil {
			return err
		}
		pr := h.probeBackend()
		if pr.Path == "" {
			return fmt.Errorf("the command must run confined, but no sandbox backend works on the host (%s); nothing was run", pr.Reason)
		}
		box, err := sandbox.NewBox(pr, *s.Sandbox, "", h.exeDir, sandbox.Locked(*s.Sandbox, h.control()))
		if err != nil {
			return err
		}
		e.box, spec.Sandbox = box, box
	}
	if s.Resources != nil && !s.Resources.Zero() {
		if err := s.Resources.Check(); err != nil {
			e.release()
			return err
		}
		e.group = sandbox.NewGroup(sandbox.GroupName(strconv.FormatUint(uint64(id), 10)), *s.Resources)
		spec.Resources = e.group
	}
	return nil
}

// control is the host's control plane a box hides and locks: where a
// daemon of the host's user keeps its socket, and the agents' directory.
func (h *host) control() []string {
	out := sandbox.ControlDirs(h.home, os.Getenv("XDG_RUNTIME_DIR"))
	if h.own != "" {
		out = append(out, h.own)
	}
	return out
}

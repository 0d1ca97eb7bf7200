package execution

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/mevedel/mevedel-exec/internal/envlist"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"golang.org/x/sys/unix"
)

// SetDefaults sets the session's sandbox and resource defaults. It is
// called right after the open, before any execution; the values were
// checked by CheckDefaults.
func (s *Session) SetDefaults(box *sandbox.Policy, res *sandbox.Resources) {
	s.sandboxDef, s.resourcesDef = box, res
}

// CheckDefaults validates session/open's sandbox and resources.
func CheckDefaults(box *sandbox.Policy, res *sandbox.Resources) error {
	if box != nil {
		if err := box.Check(); err != nil {
			return fault.New(fault.InvalidParams, "%v", err)
		}
	}
	if res != nil {
		if err := res.Check(); err != nil {
			return fault.New(fault.InvalidParams, "%v", err)
		}
	}
	return nil
}

// confinement is what an execution was granted at its start; it holds for
// its whole life. Only the run goroutine touches the live parts.
type confinement struct {
	facts    *sandbox.Facts         // immutable
	resFacts *sandbox.ResourceFacts // set at the start when limits were asked; see group
	policy   sandbox.Policy         // immutable; as applied, when confined
	backend  sandbox.Probe          // immutable; Path set when confined
	res      sandbox.Resources      // immutable
	scratch  string                 // immutable once registered
	stateDir string                 // immutable

	box     *sandbox.Box     // run goroutine only
	group   *sandbox.Group   // run goroutine only
	hit     string           // run goroutine only: the limit that ended it
	denials []sandbox.Denial // run goroutine only
}

// probeBackend runs the bubblewrap probe once per session.
func (s *Session) probeBackend() sandbox.Probe {
	s.backendOnce.Do(func() { s.backend = sandbox.ProbeBubblewrap(os.Getenv("PATH"), probeRun) })
	return s.backend
}

// confinement resolves a start's sandbox and resources against the
// session's defaults: a bad policy is invalid-params, a required sandbox
// without a working backend is refused before anything runs.
func (s *Session) confinement(p StartParams) (*confinement, error) {
	pol := p.Sandbox.Over(s.sandboxDef)
	res := p.Resources.Over(s.resourcesDef)
	if err := CheckDefaults(&pol, &res); err != nil {
		return nil, err
	}
	c := &confinement{res: res, stateDir: s.stateDir.Root}
	if !res.Zero() {
		c.resFacts = &sandbox.ResourceFacts{Resources: res}
	}
	if p.remote != nil {
		const why = "confinement and resource limits on an SSH target are not supported yet"
		if pol.Mode == sandbox.Required {
			return nil, fault.New(fault.Refused, "sandbox mode is required but %s; nothing was run", why)
		}
		if pol.Mode == sandbox.BestEffort {
			c.facts = &sandbox.Facts{Backend: sandbox.BackendNone, Reason: why}
		}
		if c.resFacts != nil {
			c.resFacts.NotApplied = map[string]string{}
			for l, v := range map[string]int64{sandbox.LimitMemory: res.MemoryBytes, sandbox.LimitPids: res.Pids, sandbox.LimitCPU: res.CPUSeconds} {
				if v > 0 {
					c.resFacts.NotApplied[l] = why
				}
			}
		}
		c.res = sandbox.Resources{} // nothing to make on this machine
		return c, nil
	}
	applied, err := pol.Resolve(sandbox.Where{Home: envlist.Value(os.Environ(), "HOME"), StateDir: s.stateDir.Root})
	if err != nil {
		return nil, fault.New(fault.InvalidParams, "%v", err)
	}
	if applied.Mode == sandbox.Off {
		c.facts = &sandbox.Facts{Backend: sandbox.BackendNone, Reason: "sandbox mode is off"}
		return c, nil
	}
	probe := s.probeBackend()
	if probe.Path == "" {
		if applied.Mode == sandbox.Required {
			return nil, fault.New(fault.Refused, "sandbox mode is required but no sandbox backend works here (%s); nothing was run", probe.Reason)
		}
		c.facts = &sandbox.Facts{Backend: sandbox.BackendNone, Reason: probe.Reason, Policy: &applied}
		return c, nil
	}
	c.policy, c.backend = applied, probe
	c.facts = &sandbox.Facts{Backend: sandbox.BackendBubblewrap, Network: applied.Network, Policy: &applied}
	return c, nil
}

// open builds the mount plan and the resource group just before the
// command starts, and sets them on spec. A confined command that cannot be
// built does not run at all.
func (c *confinement) open(id string, spec *process.Spec) error {
	if c.backend.Path != "" {
		box, err := sandbox.NewBox(c.backend, c.policy, c.scratch, c.stateDir)
		if err != nil {
			return err
		}
		c.box, spec.Sandbox = box, box
	}
	if !c.res.Zero() {
		c.group = sandbox.NewGroup(sandbox.GroupName(id), c.res)
		spec.Resources = c.group
	}
	return nil
}

// limitHit names the limit that ended the command, if one did: the
// group's own count of OOM kills or refused forks, or SIGXCPU from the CPU
// rlimit (which bubblewrap reports as the exit code 128+SIGXCPU).
func (c *confinement) limitHit(exit *process.Exit) string {
	if c.group == nil || exit == nil || exit.Lost != "" {
		return ""
	}
	hit := c.group.Hit()
	if hit == sandbox.LimitMemory {
		// A process killed by the limit, whatever the shell made of it.
		return hit
	}
	if exit.Code == 0 && !exit.Signaled {
		return ""
	}
	if hit != "" {
		return hit
	}
	if c.res.CPUSeconds > 0 {
		if exit.Signaled && exit.Signal == unix.SIGXCPU {
			return sandbox.LimitCPU
		}
		if c.box != nil && !exit.Signaled && exit.Code == 128+int(syscall.SIGXCPU) {
			return sandbox.LimitCPU
		}
	}
	return ""
}

// close removes the group and the mount points the box made on the host,
// and returns the limit hit and the denials found.
func (c *confinement) close(id string) (string, []sandbox.Denial) {
	if c == nil {
		return "", nil
	}
	if c.group != nil {
		if err := c.group.Close(); err != nil {
			logf("execution %s: %v", id, err)
		}
	}
	c.box.Release()
	return c.hit, c.denials
}

// probeRun runs the sandbox backend's probe through the reaper, within
// the probe's bound.
func probeRun(cmd *exec.Cmd) ([]byte, error) { return process.Run(cmd, sandbox.ProbeTimeout) }

package execution

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/envlist"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/sandbox"
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
	locked   []string               // immutable; the control paths the box locks
	// remote: the command runs on an SSH host, whose agent builds the
	// box (policy, as the host applies it, when hostBox) and the group.
	remote  bool // immutable
	hostBox bool // immutable
	// hostHit is the limit hit the host read at the release, when
	// hostReleased; the one it read at the exit counts too.
	hostHit      string // run goroutine only
	hostReleased bool   // run goroutine only

	box     *sandbox.Box     // run goroutine only
	group   *sandbox.Group   // run goroutine only
	hit     string           // run goroutine only: the limit that ended it
	denials []sandbox.Denial // run goroutine only
}

// probeBackend runs the bubblewrap probe once per session.
func (s *Session) probeBackend() sandbox.Probe {
	s.backendOnce.Do(func() { s.backend = process.ProbeSandbox() })
	return s.backend
}

// confinement resolves a start's sandbox and resources against the
// session's defaults: a bad policy is invalid-params, a required sandbox
// without a working backend is refused before anything runs.
func (s *Session) confinement(p StartParams) (*confinement, error) {
	if p.remote != nil {
		return s.remoteConfinement(p)
	}
	pol := p.Sandbox.Over(s.sandboxDef)
	res := p.Resources.Over(s.resourcesDef)
	if err := CheckDefaults(&pol, &res); err != nil {
		return nil, err
	}
	c := &confinement{res: res, stateDir: s.stateDir.Root}
	if !res.Zero() {
		c.resFacts = &sandbox.ResourceFacts{Resources: res}
	}
	home := envlist.Value(os.Environ(), "HOME")
	var control []string
	if pol.Mode != "" && pol.Mode != sandbox.Off {
		control = s.m.controlPaths(home)
	}
	applied, err := pol.ResolveMode(sandbox.Where{Home: home, StateDir: s.stateDir.Root, Control: control})
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
	c.locked = sandbox.Locked(applied, control)
	c.facts = &sandbox.Facts{Backend: sandbox.BackendBubblewrap, Network: applied.Network, Policy: &applied}
	return c, nil
}

// open builds the mount plan and the resource group just before the
// command starts, and sets them on spec. A confined command that cannot be
// built does not run at all.
func (c *confinement) open(id string, spec *process.Spec) error {
	if c.remote {
		return nil // the host agent builds both
	}
	if c.backend.Path != "" {
		box, err := sandbox.NewBox(c.backend, c.policy, c.scratch, c.stateDir, c.locked)
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
// group's here, or what the host agent learnt from its group there.
func (c *confinement) limitHit(exit *process.Exit, proc process.Process) string {
	if exit == nil || exit.Lost != "" {
		return ""
	}
	if c.remote {
		if c.hostReleased && c.hostHit != "" {
			return c.hostHit // read once all of it was gone
		}
		if p, ok := proc.(interface{ LimitHit() string }); ok {
			return p.LimitHit()
		}
		return ""
	}
	if c.group == nil {
		return ""
	}
	return c.group.LimitHit(exit.Code, exit.Signaled, exit.Signal, c.box != nil)
}

// releaseOnHost has the host agent remove the group and the box's mount
// points of a remote execution at its settlement, as close does here, and
// read the limit hit once all of it is gone. A lost channel leaves them to
// a later agent's sweep.
func (c *confinement) releaseOnHost(proc process.Process, exit *process.Exit) {
	if !c.remote || (!c.hostBox && c.res.Zero()) || exit.Lost != "" {
		return
	}
	p, ok := proc.(interface {
		Release(context.Context) (string, error)
	})
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), denialsTimeout)
	defer cancel()
	hit, err := p.Release(ctx)
	if err != nil {
		logf("releasing the box and group on the host: %v", err)
		return
	}
	c.hostHit, c.hostReleased = hit, true
}

// confined reports whether the command runs inside a box, here or on
// its host.
func (c *confinement) confined() bool { return c.box != nil || c.hostBox }

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

// remoteConfinement asks a remote start's host how its sandbox applies
// there, before the execution is registered: the policy's TRAMP names
// become the host's paths, and the host agent resolves them against its
// own home (~/.ssh, ~/.gnupg, the .git of a repository holding a writable
// root) and says whether bubblewrap works there. A start with the sandbox
// off and no limits asks nothing.
func (s *Session) remoteConfinement(p StartParams) (*confinement, error) {
	rx := p.remote
	pol := p.Sandbox.Over(s.sandboxDef)
	if err := rx.hostPaths(&pol); err != nil {
		return nil, err
	}
	res := p.Resources.Over(s.resourcesDef)
	if err := CheckDefaults(&pol, &res); err != nil {
		return nil, err
	}
	c := &confinement{res: res, remote: true}
	if !res.Zero() {
		c.resFacts = &sandbox.ResourceFacts{Resources: res}
	}
	if (pol.Mode == "" || pol.Mode == sandbox.Off) && res.Zero() {
		c.facts = &sandbox.Facts{Backend: sandbox.BackendNone, Reason: "sandbox mode is off"}
		return c, nil
	}
	ctx := rx.startCtx
	if ctx == nil {
		ctx = context.Background()
	}
	hc, err := rx.pool.Confine(ctx, rx.named, pol)
	switch {
	case errors.Is(err, remote.ErrPolicy):
		return nil, fault.New(fault.InvalidParams, "%v", err)
	case err != nil && ctx.Err() != nil:
		// Registered anyway, to be aborted at once like any start
		// cancelled before its yield; it never runs.
		hc = remote.HostConfinement{Why: "the start was cancelled before the host agent answered"}
	case err != nil:
		return nil, fault.New(fault.Unavailable, "%v", err)
	}
	return c.onHost(pol, rx, hc)
}

// hostPaths turns the policy's TRAMP names into paths on rx's host; a
// name of another host is invalid. Plain paths are the host's already.
func (rx *remoteExec) hostPaths(pol *sandbox.Policy) error {
	conv := func(field string, list []string) ([]string, error) {
		if list == nil {
			return nil, nil
		}
		out := make([]string, len(list))
		for i, q := range list {
			t, isRemote, err := remote.ParseTRAMP(q)
			if !isRemote {
				out[i] = q
				continue
			}
			if err != nil {
				return nil, fault.New(fault.InvalidParams, "sandbox.%s: %v", field, err)
			}
			r, err := rx.pool.Resolve(t)
			// The same host through the same hops, whatever the method.
			if err != nil || r.String() != rx.target.String() {
				return nil, fault.New(fault.InvalidParams, "sandbox.%s: %q names another host than the cwd's %s", field, q, rx.target)
			}
			switch {
			case t.Path == "" || t.Path == "~":
				out[i] = "~"
			case strings.HasPrefix(t.Path, "/") || strings.HasPrefix(t.Path, "~/"):
				out[i] = t.Path
			default: // relative to the remote home, as a cwd is
				out[i] = "~/" + t.Path
			}
		}
		return out, nil
	}
	var err error
	if pol.WritableRoots, err = conv("writableRoots", pol.WritableRoots); err != nil {
		return err
	}
	if pol.ReadOnlyPaths, err = conv("readOnlyPaths", pol.ReadOnlyPaths); err != nil {
		return err
	}
	pol.InaccessiblePaths, err = conv("inaccessiblePaths", pol.InaccessiblePaths)
	return err
}

// onHost is the confinement of a remote start, from its host's answer.
// Without a backend on the host, required is refused before anything
// runs; the host agent applies the limits, which the wrapper cannot.
func (c *confinement) onHost(pol sandbox.Policy, rx *remoteExec, hc remote.HostConfinement) (*confinement, error) {
	off := &sandbox.Facts{Backend: sandbox.BackendNone, Reason: "sandbox mode is off"}
	if !hc.Agent {
		why := fmt.Sprintf("the host %s runs commands through the wrapper (%s), which can neither confine them nor limit their resources", rx.target, hc.Why)
		if pol.Mode == sandbox.Required {
			return nil, fault.New(fault.Refused, "sandbox mode is required but %s; nothing was run", why)
		}
		c.facts = &sandbox.Facts{Backend: sandbox.BackendNone, Reason: why}
		if pol.Mode == "" || pol.Mode == sandbox.Off {
			c.facts = off
		}
		if c.resFacts != nil {
			c.resFacts.NotApplied = map[string]string{}
			for l, v := range map[string]int64{sandbox.LimitMemory: c.res.MemoryBytes, sandbox.LimitPids: c.res.Pids, sandbox.LimitCPU: c.res.CPUSeconds} {
				if v > 0 {
					c.resFacts.NotApplied[l] = why
				}
			}
		}
		c.res = sandbox.Resources{} // nothing to make anywhere
		return c, nil
	}
	f := hc.Facts
	if f.Backend != sandbox.BackendBubblewrap && pol.Mode == sandbox.Required {
		return nil, fault.New(fault.Refused, "sandbox mode is required but no sandbox backend works on %s (%s); nothing was run", rx.target, f.Reason)
	}
	if f.Backend == sandbox.BackendBubblewrap && f.Policy != nil {
		c.policy, c.hostBox = *f.Policy, true
	}
	c.facts = &f
	return c, nil
}

// hostSpec is what the host agent needs to build the box and group.
func (c *confinement) hostSpec() (*sandbox.Policy, *sandbox.Resources) {
	var pol *sandbox.Policy
	if c.hostBox {
		p := c.policy
		pol = &p
	}
	var res *sandbox.Resources
	if !c.res.Zero() {
		r := c.res
		res = &r
	}
	return pol, res
}

// remoteDenials asks the host which errors of a failed confined command's
// output its box explains; what cannot be asked is not guessed.
func remoteDenials(proc process.Process, tail string, applied sandbox.Policy) []sandbox.Denial {
	p, ok := proc.(interface {
		SandboxDenials(context.Context, string, sandbox.Policy) ([]sandbox.Denial, error)
	})
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), denialsTimeout)
	defer cancel()
	d, err := p.SandboxDenials(ctx, tail, applied)
	if err != nil {
		logf("sandbox denials from the host: %v", err)
		return nil
	}
	return d
}

// denialsTimeout bounds a question to the host at settlement.
const denialsTimeout = 10 * time.Second

package remote

import (
	"context"
	"errors"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// A new channel costs a fork in sshd, the login shell, env and the
// wrapper's bash before the command's own bash -c even starts: most of a
// command's start. A standby pays that ahead of time: a pipe-mode wrapper
// started on a connection with the last command's environment, blocked
// reading its command from stdin. Start hands it the difference between
// that environment and the command's (exports and unsets, applied by the
// wrapper itself), the directory and the command, so only the final exec
// of bash -c remains; then it leaves a new standby behind. Each command
// still has its own channel and process group.

// standby is a wrapper waiting for its command.
type standby struct {
	proc    *Process
	env     map[string]string // the wrapper's environment, less hostile variables
	overlay bool              // env is on top of sshd's
}

// startOnStandby starts spec on a standby of r's connections. ok is false
// when there is none fit for spec, or the one taken was found gone before
// its command could start: then nothing ran, and the caller starts spec
// the usual way.
func (p *Pool) startOnStandby(ctx context.Context, r resolved, spec launchSpec) (proc *Process, err error, ok bool) {
	sb, unset, export := p.takeStandby(r, spec)
	if sb == nil {
		return nil, nil, false
	}
	proc = sb.proc
	proc.grp.id = Identity{Tag: spec.Tag}
	script := commandTail(spec, unset, export) + specEnd
	if _, err := proc.ch.Write([]byte(script)); err != nil {
		proc.ch.Close()
		return nil, nil, false
	}
	_ = proc.ch.CloseWrite()
	if err := p.awaitIdentity(ctx, proc, true); err != nil {
		if errors.Is(err, errNoIdentity) {
			return nil, nil, false
		}
		return nil, err, true
	}
	proc.standbyAfter(r, spec)
	return proc, nil, true
}

// standbyDelay is how long a command may run before its connection
// prepares the next standby anyway.
const standbyDelay = 200 * time.Millisecond

// standbyAfter prepares the connection's next standby once proc has
// exited and its await has judged the end, or once it has run for
// standbyDelay: a short command and the probe of its end do not compete
// for the host's CPU with the standby's login shell, and the next command
// of a long one still finds a standby.
func (proc *Process) standbyAfter(r resolved, spec launchSpec) {
	p := proc.grp.pool
	proc.grp.mu.Lock()
	judged := proc.exited // without an await, the exit is enough
	if a := proc.grp.await; a != nil {
		judged = a.done
	}
	proc.grp.mu.Unlock()
	p.spawn(func() {
		t := time.NewTimer(standbyDelay)
		defer t.Stop()
	wait:
		for _, ended := range []<-chan struct{}{proc.exited, judged} {
			select {
			case <-ended:
			case <-t.C:
				break wait
			case <-proc.conn.dead:
				return
			}
		}
		proc.conn.prepareStandby(r, spec)
	})
}

// takeStandby takes a standby of r's connections that can run spec, with
// the variables to unset and export. A standby that cannot (another
// environment) or can no longer (its wrapper ended) is closed: the start
// that follows leaves a fitting one behind.
func (p *Pool) takeStandby(r resolved, spec launchSpec) (*standby, []string, []string) {
	p.mu.Lock()
	h := p.hosts[r.key()]
	p.mu.Unlock()
	if h == nil {
		return nil, nil, nil
	}
	h.mu.Lock()
	conns := append([]*conn(nil), h.conns...)
	h.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		sb := c.sb
		c.sb = nil
		c.mu.Unlock()
		if sb == nil {
			continue
		}
		if !c.isDead() && !sb.proc.Exited() {
			if unset, export, ok := sb.delta(spec); ok {
				return sb, unset, export
			}
		}
		sb.proc.ch.Close()
	}
	return nil, nil, nil
}

// delta is what the wrapper must unset and export so that its environment
// becomes spec's (hostile variables aside: the command's exec sets them),
// tag included. ok is false when the wrapper cannot get there: a name the
// shell cannot export, or an unset on top of sshd's environment (which
// would not bring sshd's value back).
func (sb *standby) delta(spec launchSpec) (unset, export []string, ok bool) {
	overlay := spec.Env == nil || spec.overlay
	if overlay != sb.overlay {
		return nil, nil, false
	}
	want := envMap(spec.Env)
	for k := range sb.env {
		if _, kept := want[k]; !kept {
			if overlay || !identifier(k) {
				return nil, nil, false
			}
			unset = append(unset, k)
		}
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		if hostile[k] || want[k] != v {
			continue // hostile, or overridden by a later entry
		}
		if old, had := sb.env[k]; had && old == v {
			continue
		}
		if !identifier(k) {
			return nil, nil, false
		}
		export = append(export, kv)
	}
	if spec.Tag != "" {
		export = append(export, spec.Tag)
	}
	return unset, export, true
}

// envMap is env by name, the last entry winning, without hostile
// variables.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" && !hostile[k] {
			m[k] = v
		}
	}
	return m
}

// identifier reports whether name can be exported by the shell.
func identifier(name string) bool {
	for i, c := range name {
		if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return name != ""
}

// prepareStandby starts a standby on c with spec's environment, in the
// background, unless c has one, is making one, or has no session to
// spare.
func (c *conn) prepareStandby(r resolved, spec launchSpec) {
	c.mu.Lock()
	if c.sb != nil || c.sbPending || (c.limit > 0 && c.open+1 >= c.limit) {
		c.mu.Unlock()
		return
	}
	c.sbPending = true
	c.mu.Unlock()
	var env []string
	if spec.Env != nil {
		env = make([]string, 0, len(spec.Env))
		for _, kv := range spec.Env {
			if k, _, _ := strings.Cut(kv, "="); !hostile[k] {
				env = append(env, kv)
			}
		}
	}
	overlay := spec.Env == nil || spec.overlay
	started := c.pool.spawn(func() {
		sb := c.newStandby(r, env, overlay)
		c.mu.Lock()
		c.sbPending = false
		if sb != nil && c.sb == nil && !c.isDead() {
			c.sb, sb = sb, nil
		}
		c.mu.Unlock()
		if sb != nil {
			sb.proc.ch.Close()
		}
	})
	if !started {
		c.mu.Lock()
		c.sbPending = false
		c.mu.Unlock()
	}
}

// newStandby opens the standby's channel and starts its wrapper; nil when
// the connection will not have it.
func (c *conn) newStandby(r resolved, env []string, overlay bool) *standby {
	ch, reqs, err := c.openSession()
	if err != nil {
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) {
			c.kill(err) // the transport failed under us
		}
		return nil
	}
	// A server that never answers the exec request is dead to keepalive;
	// the pool's end closes the channel too.
	stop := context.AfterFunc(c.pool.life, func() { ch.Close() })
	defer stop()
	proc, err := c.pool.launch(c, ch, reqs, r, false, "", launchCommand(env, overlay, standbyScript()))
	if err != nil {
		return nil
	}
	return &standby{proc: proc, env: envMap(env), overlay: overlay}
}

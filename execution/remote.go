package execution

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/transcript"
	"golang.org/x/sys/unix"
)

// A cwd written as a TRAMP name (/ssh:user@host#port:/path) runs the
// command on that host through package remote, with the local
// execution's machinery around it: the same spool, yield, poll, input,
// stop and settlement. What differs lives here: the connection is made
// before the execution is registered (so an unreachable host answers the
// start request with unavailable instead of leaving an execution
// behind), the environment comes from the host's login shell, a
// transport lost before an exit status arrived ends the execution as
// unknown, and a yielded execution's output is published to the host.

// RemoteModeVar, set to "wrapper" in the helper's environment, runs every
// remote command through the wrapper instead of a host agent.
const RemoteModeVar = "MEVEDEL_EXEC_REMOTE_MODE"

// DockerVar, PodmanVar and KubectlVar, when set in the helper's
// environment, name the program that /docker:, /podman: and
// /kubernetes: names run (else docker, podman and kubectl on PATH):
// podman's docker-compatible command line can serve /docker: names.
const (
	DockerVar  = "MEVEDEL_EXEC_DOCKER"
	PodmanVar  = "MEVEDEL_EXEC_PODMAN"
	KubectlVar = "MEVEDEL_EXEC_KUBECTL"
)

// remoteHosts is the helper's side of SSH: one pool for its life, made on
// first use, with the helper's own HOME (~/.ssh) and agent.
type remoteHosts struct {
	mu     sync.Mutex
	pool   *remote.Pool // guarded by mu
	closed bool         // guarded by mu
}

// remotePool returns the pool, making it on first use; nil once closed.
func (m *Manager) remotePool() *remote.Pool {
	h := &m.remote
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pool == nil && !h.closed {
		h.pool = remote.NewPool(remote.Config{Home: os.Getenv("HOME"), AgentSocket: os.Getenv("SSH_AUTH_SOCK"),
			Mode: os.Getenv(RemoteModeVar), Engines: map[string]string{
				"docker": os.Getenv(DockerVar), "podman": os.Getenv(PodmanVar), "kubernetes": os.Getenv(KubectlVar)}})
	}
	return h.pool
}

// CloseRemote closes every SSH connection; called at shutdown, once every
// session has ended (their stops may need the connections).
func (m *Manager) CloseRemote() {
	h := &m.remote
	h.mu.Lock()
	p := h.pool
	h.pool, h.closed = nil, true
	h.mu.Unlock()
	if p != nil {
		_ = p.Close()
	}
}

// CheckRemoteArtifactDir validates session/open's remoteArtifactDir.
func CheckRemoteArtifactDir(dir string) error {
	if strings.ContainsRune(dir, 0) {
		return fault.New(fault.InvalidParams, "remoteArtifactDir must not contain NUL")
	}
	return nil
}

// SetRemoteArtifactDir sets where the session's yielded remote
// executions publish their output (relative: under the remote user's
// home). It is called right after the open, before any execution.
func (s *Session) SetRemoteArtifactDir(dir string) {
	s.remoteDir = dir
}

// artifactDir is the session's remote artifact directory.
func (s *Session) artifactDir() string {
	if s.remoteDir != "" {
		return s.remoteDir
	}
	// A session id is the client's string: one path element, never "..".
	id := url.PathEscape(s.id)
	if id == "." || id == ".." {
		id = "%2E" + id[1:]
	}
	return path.Join(".cache", "mevedel-exec", id)
}

// StartAndAwait registers an execution as Start does and answers its
// start request as AwaitStart does. For a TRAMP cwd the connection comes
// first, on a session goroutine: a host that cannot be reached (or whose
// key known_hosts does not vouch for) answers unavailable with remote's
// message, and nothing is registered. A cancel while connecting registers
// the execution anyway, to be aborted at once like any start cancelled
// before its yield.
func (s *Session) StartAndAwait(ctx context.Context, c Caller, p StartParams, yield *time.Duration, maxChars int, reply func(Observation, error)) {
	t, isRemote, err := remote.ParseTRAMP(p.Cwd)
	if !isRemote {
		e, err := s.Start(c, p)
		if err != nil {
			reply(Observation{}, err)
			return
		}
		s.AwaitStart(ctx, e, yield, maxChars, func(o Observation) { reply(o, nil) })
		return
	}
	if err != nil {
		reply(Observation{}, fault.New(fault.InvalidParams, "cwd: %w", err))
		return
	}
	pool := s.m.remotePool()
	if pool == nil {
		reply(Observation{}, fault.New(fault.Unavailable, "the helper is shutting down"))
		return
	}
	rd, probed := pool.Probed(t)
	if resolved, ok := pool.Ready(t); ok && probed {
		if err := rd.Err(where(resolved)); err != nil {
			reply(Observation{}, fault.New(fault.Unavailable, "%w", err))
			return
		}
		// Connected, its agent up, probed: registered here, in arrival
		// order, as a local start is, with no goroutine to wait for first.
		cctx, cancel := context.WithCancel(ctx)
		p.remote = &remoteExec{pool: pool, named: t, target: resolved, startCtx: cctx}
		e, err := s.Start(c, p)
		if err != nil {
			cancel()
			reply(Observation{}, err)
			return
		}
		s.Go(func() {
			defer cancel()
			stop := context.AfterFunc(s.life, cancel) // the session's end
			defer stop()
			reply(e.awaitStart(ctx, yield, maxChars), nil)
		})
		return
	}
	s.Go(func() {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.life, cancel) // the session's end
		defer stop()
		resolved, err := pool.Connect(cctx, t)
		if err == nil {
			// Once per carrier: what the target lacks (the agent's
			// deployment is waited for, as the start would).
			rd, err := pool.Probe(cctx, t)
			switch {
			case ctx.Err() != nil || s.life.Err() != nil:
			case err == nil:
				if err := rd.Err(where(resolved)); err != nil {
					reply(Observation{}, fault.New(fault.Unavailable, "%w", err))
					return
				}
			case errors.Is(err, remote.ErrUnavailable):
				reply(Observation{}, fault.New(fault.Unavailable, "%w", err))
				return
			default:
				logf("%v; starting anyway", err)
			}
		}
		if err != nil {
			if ctx.Err() == nil && s.life.Err() == nil {
				reply(Observation{}, fault.New(fault.Unavailable, "%w", err))
				return
			}
			// Cancelled, or the session is closing: Start and the wait
			// below say so in their usual way.
			if resolved, err = pool.Resolve(t); err != nil {
				reply(Observation{}, fault.New(fault.Unavailable, "%w", err))
				return
			}
		}
		pool.Prepare(t) // the host agent, while the start is registered
		p.remote = &remoteExec{pool: pool, named: t, target: resolved, startCtx: cctx}
		e, err := s.Start(c, p)
		if err != nil {
			reply(Observation{}, err)
			return
		}
		reply(e.awaitStart(ctx, yield, maxChars), nil)
	})
}

// where is a resolved target's name, as the facts' target says it.
func where(t remote.Target) string {
	t.Path = ""
	return t.String()
}

// where names where p runs for the facts: target "local", or the SSH
// host ("ssh:user@host#port", after its hops) with the method as the cwd
// writes it. A TRAMP cwd must come through StartAndAwait, which connects
// first.
func (p StartParams) where(cwd string) (target, method, tier string, err error) {
	if p.remote != nil {
		return where(p.remote.target), p.remote.named.MethodName(), p.remote.named.Tier(), nil
	}
	if _, isRemote, _ := remote.ParseTRAMP(cwd); isRemote {
		return "", "", "", fault.New(fault.InvalidParams, "cwd %q names a remote host, which only exec/start supports", cwd)
	}
	return "local", "", remote.TierSupported, nil
}

// remoteExec is what an execution on an SSH host needs beyond a local one.
type remoteExec struct {
	pool *remote.Pool // immutable
	// named is the target as the cwd names it, which every pool call
	// takes: the pool applies ~/.ssh/config to it (cached). Given the
	// resolved target instead, it would look up the real host name, and
	// an IdentityFile set for the alias would be lost.
	named  remote.Target
	target remote.Target // immutable; resolved, for the facts
	// startCtx is the start request's while the execution is registered:
	// it bounds the question of how the sandbox applies on the host.
	startCtx context.Context

	pub publisher
}

// runner starts the execution's command: on its host, or here.
func (e *Execution) runner() process.Runner {
	if e.remote != nil {
		pol, res := e.box.hostSpec()
		return remote.Runner{Pool: e.remote.pool, Target: e.remote.named, Logger: logger, Sandbox: pol, Resources: res}
	}
	return e.s.runner
}

// Publication of a yielded remote execution's output to its host, at
// <artifact dir>/executions/<id>.log: each publication appends only what
// the remote copy lacks. It starts once the execution has yielded, runs
// again while the output grows, and once more before settlement, so a
// settled execution's published copy is complete.
const (
	publishCheck = 250 * time.Millisecond // how often a yielded execution is looked at
	publishEvery = time.Second            // least time between two publications of growth
	publishLast  = 10 * time.Second       // bound of the publication before settlement
	publishRetry = 30 * time.Second       // most time between attempts after failures
)

type publisher struct {
	ctx  context.Context // ends at finish
	stop context.CancelFunc
	done chan struct{} // closed when the loop has ended

	// sent is how many bytes the remote copy holds; only the loop and,
	// after it ended, finish touch it.
	sent int64
}

// start runs the publication loop of e until finish.
func (pb *publisher) start(e *Execution) {
	pb.ctx, pb.stop = context.WithCancel(context.Background())
	pb.done = make(chan struct{})
	go func() {
		defer close(pb.done)
		tick := time.NewTicker(publishCheck)
		defer tick.Stop()
		var last time.Time
		wait := time.Duration(0) // the first publication goes at once
		for {
			select {
			case <-pb.ctx.Done():
				return
			case <-tick.C:
			}
			f := e.Facts()
			if !f.Yielded || time.Since(last) < wait || (f.PublishedPath != "" && f.OutputBytes == pb.sent) {
				continue
			}
			last = time.Now()
			ctx, cancel := context.WithTimeout(pb.ctx, publishLast)
			if pb.publish(ctx, e) {
				wait = publishEvery
			} else {
				// A host without SFTP, or an unwritable directory: try
				// again ever more rarely, not four times a second.
				wait = min(max(2*wait, publishEvery), publishRetry)
			}
			cancel()
		}
	}()
}

// finish ends the loop and makes the last publication of a yielded
// execution, before its settlement.
func (pb *publisher) finish(e *Execution) {
	if pb.stop == nil {
		return // the command never started
	}
	pb.stop()
	<-pb.done
	if !e.Facts().Yielded {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishLast)
	defer cancel()
	pb.publish(ctx, e)
}

// publish sends what the remote copy lacks and records its path in the
// facts on the first success. It reports whether it succeeded.
func (pb *publisher) publish(ctx context.Context, e *Execution) bool {
	rx := e.remote
	f, err := os.Open(e.sp.Path())
	if err != nil {
		logf("execution %s: publishing: %v", e.id, err)
		return false
	}
	defer f.Close()
	size := e.sp.Stats().Bytes
	dest := path.Join(e.s.artifactDir(), statedir.LogName(e.id))
	abs, err := rx.pool.Publish(ctx, rx.named, dest, f, size)
	if err != nil {
		logf("execution %s: publishing to %s: %v", e.id, rx.target, err)
		return false
	}
	pb.sent = size
	first := false
	e.update(func(st *execState) {
		if first = st.facts.PublishedPath != abs; first {
			st.facts.PublishedPath = abs
			st.facts.Version++
		}
	})
	if first {
		e.s.changed(e) // a panel may link to it
	}
	return true
}

// beforeSettle runs once the command and its output have ended, before
// the facts are final.
func (e *Execution) beforeSettle() {
	if e.remote != nil {
		e.remote.pub.finish(e)
	}
}

// reclaimRemote kills what a lost execution left on its host, through the
// same proof as a stop: the leader's pid and start time, or the tag. It
// says what it did, for the lost record's reason.
func (m *Manager) reclaimRemote(cwd string, l *transcript.Leader, tag string, deadline time.Time) string {
	where := "on " + l.Target
	t, ok, err := remote.ParseTRAMP(cwd)
	pool := m.remotePool()
	if err != nil || !ok || pool == nil {
		return "its processes " + where + " were not checked"
	}
	g, err := pool.Group(t, remote.Identity{Pid: l.Pid, Pgid: l.Pgid, Start: l.StartTime, Tag: tag, Boot: l.Boot})
	if err != nil {
		return fmt.Sprintf("its processes %s were not checked: %v", where, err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	signalled := false
	for {
		live, err := g.Probe(ctx)
		switch {
		case g.Replaced():
			return ReasonTargetReplaced // nothing of its boot is left; nothing was signalled
		case err != nil && signalled:
			return fmt.Sprintf("its leftover processes %s were killed, but their end could not be confirmed: %v", where, err)
		case err != nil:
			return fmt.Sprintf("its processes %s could not be checked: %v", where, err)
		case live == remote.Ambiguous:
			return fmt.Sprintf("pid %d %s now belongs to another process and was not signalled", l.Pid, where)
		case live == remote.Dead && signalled:
			return "its leftover processes " + where + " were killed"
		case live == remote.Dead:
			return "none of its processes was left " + where
		}
		if !signalled {
			if err := g.Signal(ctx, unix.SIGKILL); errors.Is(err, remote.ErrAmbiguous) {
				return fmt.Sprintf("pid %d %s now belongs to another process and was not signalled", l.Pid, where)
			} else if err != nil {
				return fmt.Sprintf("its processes %s could not be killed: %v", where, err)
			}
			signalled = true
			continue
		}
		select {
		case <-ctx.Done():
			return "its processes " + where + " were killed but were still there when recovery gave up"
		case <-time.After(probeMax):
		}
	}
}

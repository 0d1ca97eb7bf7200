package remote

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/remote/agent"
)

// Stream targets: the same host agent as on an SSH host, over another
// byte stream. /sudo:user@localhost: runs `sudo -n -u USER -- <this
// executable> host` on this machine (the executable must be one the user
// can run), and /ssh:host|sudo:: the same over one more exec channel of
// the SSH host's connection, with the host's deployed build;
// /podman:user@box: and /docker:user@box: run the agent through
// the engine's own exec stream (`podman exec -i [--user U] box ...`),
// deployed into the container once per version as on an SSH host: the
// build goes through the exec's stdin, is checksummed there and renamed
// into place, under the user's ~/.cache/mevedel-exec/bin or, where that
// cannot be written, a private directory of /tmp. Nothing else differs:
// the agent's frames, starts, signals, probes, confinement and limits are
// those of an SSH host. A container the agent cannot run in (another
// system or architecture, nowhere to put it, nowhere it may run) runs its
// commands through the wrapper instead (enginewrap.go); a sudo target's
// agent is this machine's own build, and needs none.
// /kubernetes:[CONTAINER.]POD is the same over `kubectl exec -i [-c
// CONTAINER] POD`, in kubectl's current context and namespace (none of
// ours is passed).
//
// A container's incarnation is its engine id and start time (inspect),
// a pod's its uid and start time (kubectl get pod); a container gone,
// stopped or made again under its name, or a pod rescheduled, holds
// nothing of what an earlier incarnation ran.

// streamSlot is the host agent of one stream target.
type streamSlot struct {
	mu   sync.Mutex
	cl   *agentClient // guarded by mu; the running agent, if any
	call *agentCall   // guarded by mu; the start in flight, shared by callers
}

type agentCall struct {
	done chan struct{} // closed once, when cl or err is set
	cl   *agentClient
	err  error
}

// errTargetGone classifies a container that is not there to run in: no
// such container, or not running. It is unavailable for a start, and for
// a command started in an earlier incarnation it proves the end.
var errTargetGone = errors.New("remote: the container is gone")

type goneError struct{ msg string }

func (e goneError) Error() string   { return e.msg }
func (e goneError) Unwrap() []error { return []error{errTargetGone, ErrUnavailable} }

// streamTimeout bounds an engine's answer to inspect and its exec's
// start; an agent's deployment is bounded by deployTimeout.
const streamTimeout = 30 * time.Second

// program is the command line program of a stream method.
func (p *Pool) program(method string) string {
	if prog := p.cfg.Engines[method]; prog != "" {
		return prog
	}
	if method == "kubernetes" {
		return "kubectl"
	}
	return method
}

// slot returns the stream slot of key, made on first use.
func (p *Pool) slot(key string) (*streamSlot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if p.streams == nil {
		p.streams = map[string]*streamSlot{}
	}
	s := p.streams[key]
	if s == nil {
		s = &streamSlot{}
		p.streams[key] = s
	}
	return s, nil
}

// streamReady reports whether r's agent runs.
func (p *Pool) streamReady(r resolved) bool {
	s, err := p.slot(r.key())
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cl != nil && !s.cl.isDead()
}

// streamAgent returns r's host agent, starting it when none runs.
// Callers that come while it starts share its outcome; a failure is not
// remembered (a container started later is found by the next call).
func (p *Pool) streamAgent(ctx context.Context, r resolved) (*agentClient, error) {
	if !agent.Deployable {
		return nil, unavailablef("remote: %s: this program cannot serve as a host agent", r.Target)
	}
	s, err := p.slot(r.key())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if cl := s.cl; cl != nil && !cl.isDead() {
		s.mu.Unlock()
		return cl, nil
	}
	call := s.call
	if call == nil {
		call = &agentCall{done: make(chan struct{})}
		started := p.spawn(func() {
			cl, err := p.startStream(r)
			s.mu.Lock()
			s.call = nil
			if err == nil {
				s.cl = cl
			}
			s.mu.Unlock()
			if err == nil && p.life.Err() != nil {
				// Close ran while it started and found no agent in the
				// slot: its reader would keep Close waiting.
				cl.ch.Close()
			}
			call.cl, call.err = cl, err
			close(call.done)
		})
		if !started {
			s.mu.Unlock()
			return nil, errClosed
		}
		s.call = call
	}
	s.mu.Unlock()
	select {
	case <-call.done:
		return call.cl, call.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// closeStreams ends every stream agent's channel (Close).
func (p *Pool) closeStreams(streams map[string]*streamSlot) {
	for _, s := range streams {
		s.mu.Lock()
		cl := s.cl
		s.mu.Unlock()
		if cl != nil {
			cl.ch.Close()
		}
	}
}

// startStream starts r's agent: for a container, after the engine has
// said which incarnation runs, deploying this build first when the
// container lacks it.
func (p *Pool) startStream(r resolved) (*agentClient, error) {
	ctx, cancel := context.WithTimeout(p.life, deployTimeout)
	defer cancel()
	if r.jump != nil {
		return p.startSudoOverSSH(ctx, r)
	}
	if !r.Container() {
		exe, err := os.Executable()
		if err != nil {
			return nil, unavailablef("remote: %s: %v", r.Target, err)
		}
		cl, _, err := p.streamRun(ctx, r, Incarnation{}, []string{exe, "host"}, nil)
		return cl, err
	}
	inc, err := p.inspect(ctx, r)
	if err != nil {
		return nil, err
	}
	v := versionDir()
	cl, need, err := p.streamRun(ctx, r, inc, p.inContainer(r, probeScript(v)), nil)
	if cl != nil || err != nil {
		return cl, err
	}
	f := strings.Fields(need)
	if len(f) != 3 {
		return nil, unavailablef("remote: %s: the container's description %q is malformed", r.Target, need)
	}
	osName, machine, base := f[0], f[1], f[2]
	if osName != "Linux" || goarch(machine) == "" {
		return nil, noAgentf("remote: %s: the container runs %s on %s: no host agent for it", r.Target, osName, machine)
	}
	b, ok := builds()[goarch(machine)]
	if !ok {
		return nil, noAgentf("remote: %s: no build of the helper for linux/%s beside %s (make build makes it)", r.Target, goarch(machine), os.Args[0])
	}
	if base == "!" {
		return nil, noAgentf("remote: %s: the host agent cannot be run in the container: where it can be written, nothing may be executed (noexec)", r.Target)
	}
	if base == "-" {
		return nil, noAgentf("remote: %s: no directory in the container where the host agent can be put: neither the user's ~/.cache nor a private directory of /tmp can be written", r.Target)
	}
	src, err := os.Open(b.path)
	if err != nil {
		return nil, unavailablef("remote: %s: %v", r.Target, err)
	}
	defer src.Close()
	_, msg, err := p.streamRun(ctx, r, inc, p.inContainer(r, installScript(path.Join(base, v), v, b.sum)), src)
	if err != nil {
		return nil, err
	}
	if msg != "installed" {
		return nil, noAgentf("remote: %s: the host agent could not be put in the container: %s", r.Target, msg)
	}
	cl, need, err = p.streamRun(ctx, r, inc, p.inContainer(r, probeScript(v)), nil)
	switch {
	case cl == nil && err == nil && strings.HasSuffix(need, " !"):
		err = noAgentf("remote: %s: the host agent cannot be run in the container: where it can be written, nothing may be executed (noexec)", r.Target)
	case cl == nil && err == nil:
		err = unavailablef("remote: %s: the host agent did not start in the container: %q", r.Target, need)
	}
	return cl, err
}

// startSudoOverSSH starts r's agent with sudo on the SSH host before
// it: the host's own agent build, deployed for the SSH user as for any
// command there, run by `sudo -n` over one more exec channel of the
// host's pooled connection. The user sudo runs as must be able to run
// it (root can).
func (p *Pool) startSudoOverSSH(ctx context.Context, r resolved) (*agentClient, error) {
	host := *r.jump
	if _, err := p.agentFor(ctx, host); err != nil {
		return nil, unavailablef("remote: %s: sudo runs the host agent of %s, which is not there: %v", r.Target, host.Target, err)
	}
	c, err := p.anyConn(ctx, host)
	if err != nil {
		return nil, err
	}
	cmd := "unset SSH_CLIENT SSH2_CLIENT; exec sudo -n -H -u " + shq(r.User) + ` -- "$HOME/` + agentHome + "/" + versionDir() + `/mevedel-exec" host`
	cl, need, err := c.startAgent(ctx, r, cmd)
	switch {
	case err != nil && strings.Contains(err.Error(), "password"):
		return nil, unavailablef("remote: %s: sudo wants a password, and the helper cannot type one (it runs sudo -n): %v", r.Target, err)
	case err != nil:
		return nil, unavailablef("remote: %s: %v", r.Target, err)
	case cl == nil:
		return nil, unavailablef("remote: %s: the host agent did not start under sudo: %q", r.Target, need)
	}
	return cl, nil
}

// inContainer is the engine's command line that runs script in r's
// container, as r's user, its stdin kept open. Detach keys are off: the
// stream carries binary frames.
func (p *Pool) inContainer(r resolved, script string) []string {
	return p.engineExec(r, false, "/bin/sh", "-c", script)
}

// probeScript starts the installed agent when it is this build;
// otherwise it says what the container runs and where the agent can go:
// the user's ~/.cache/mevedel-exec/bin, else a private directory of /tmp
// (a read-only or foreign home), else "-"; "!" when it is there but may
// not be executed (a noexec mount).
func probeScript(v string) string {
	bs := builds()
	want := func(arch string) string {
		if b, ok := bs[arch]; ok {
			return b.sum
		}
		return "-"
	}
	return `umask 077
d="$HOME/` + agentHome + `"
if [ -z "$HOME" ] || [ "$HOME" = / ] || ! mkdir -p "$d/` + v + `" 2>/dev/null || [ ! -w "$d/` + v + `" ]; then
  t="${TMPDIR:-/tmp}/mevedel-exec-$(id -u)"
  mkdir -p "$t" 2>/dev/null
  if [ -d "$t" ] && [ ! -L "$t" ] && [ -O "$t" ] && chmod 700 "$t" && mkdir -p "$t/bin/` + v + `" 2>/dev/null; then d="$t/bin"; else d=-; fi
fi
s=$(uname -s 2>/dev/null) m=$(uname -m 2>/dev/null)
case $m in x86_64) want=` + want("amd64") + ` ;; aarch64|arm64) want=` + want("arm64") + ` ;; *) want=- ;; esac
if [ "$s" = Linux ] && [ -f "$d/` + v + `/mevedel-exec" ]; then
  sum=$(sha256sum "$d/` + v + `/mevedel-exec" 2>/dev/null)
  [ "${sum%% *}" = "$want" ] && [ -x "$d/` + v + `/mevedel-exec" ] && exec "$d/` + v + `/mevedel-exec" host
  [ "${sum%% *}" = "$want" ] && d=!
fi
printf '\0MEVEDEL-AGENT-NEED %s %s %s\n' "$s" "$m" "$d"
`
}

// installScript writes the build that comes on stdin under a temporary
// name in dir, verifies its checksum, moves it into place and prunes
// other versions; it says "installed", or what failed.
func installScript(dir, v, sum string) string {
	tmp := ".mevedel-exec.tmp-" + rand.Text()
	return `umask 077
cd ` + shq(dir) + ` || { printf '\0MEVEDEL-AGENT-ERR the directory %s cannot be entered\n' ` + shq(dir) + `; exit 1; }
cat > ` + tmp + ` || { rm -f ` + tmp + `; printf '\0MEVEDEL-AGENT-ERR the build could not be written (a full or read-only file system)\n'; exit 1; }
sum=$(sha256sum ` + tmp + ` 2>/dev/null)
if [ "${sum%% *}" != ` + sum + ` ]; then
  rm -f ` + tmp + `
  printf '\0MEVEDEL-AGENT-ERR the copied build does not have its checksum\n'
  exit 1
fi
chmod 700 ` + tmp + ` && mv -f ` + tmp + ` mevedel-exec || {
  printf '\0MEVEDEL-AGENT-ERR the copied build could not be moved into place\n'
  exit 1
}
for o in ../* ../.[!.]*; do [ "$o" = ../` + v + ` ] || [ ! -e "$o" ] || rm -rf -- "$o"; done
printf '\0MEVEDEL-AGENT-NEED installed\n'
`
}

// transportArgv is the command line that runs argv as r's user: through
// sudo for a sudo target, else argv is the engine's own.
func (p *Pool) transportArgv(r resolved, argv []string) []string {
	if r.Container() {
		return argv
	}
	return append([]string{p.program("sudo"), "-n", "-H", "-u", r.User, "--"}, argv...)
}

// streamRun starts argv through r's transport with stdin (nil: a pipe
// that becomes the agent's channel). It returns the agent's client when
// the agent said hello, or the text of the NEED line, or an error that
// says what the transport said when it ended without either.
func (p *Pool) streamRun(ctx context.Context, r resolved, inc Incarnation, argv []string, stdin *os.File) (*agentClient, string, error) {
	argv = p.transportArgv(r, argv)
	car, err := startCarrier(p, argv, stdin)
	if err != nil {
		return nil, "", unavailablef("remote: %s: starting %s: %v", r.Target, argv[0], err)
	}
	stop := context.AfterFunc(ctx, func() { car.Close() })
	defer stop()
	br := bufio.NewReaderSize(car, 256<<10)
	g := readGreeting(br)
	switch {
	case g.said == agent.Hello && g.version != agent.Version:
		car.Close()
		return nil, "", unavailablef("remote: %s: the host agent is version %q, not %q", r.Target, g.version, agent.Version)
	case g.said == agent.Hello:
		inc.Hostname, inc.BootID = g.inc.Hostname, g.inc.BootID
		cl := newAgentClient(p, car.lostWhy, r, inc, car, br)
		if !stop() || !p.spawn(cl.read) {
			car.Close()
			return nil, "", unavailablef("remote: %s: the host agent's start was cancelled", r.Target)
		}
		return cl, "", nil
	case g.said == agentNeed:
		car.Close()
		return nil, g.text, nil
	case g.said == agentErr:
		car.Close()
		return nil, "", unavailablef("remote: %s: %s", r.Target, g.text)
	}
	car.Close()
	if ctx.Err() != nil {
		return nil, "", unavailablef("remote: %s: the host agent did not start: %v", r.Target, context.Cause(ctx))
	}
	return nil, "", car.startError(r, g.junk)
}

// startErrorWait bounds how long a failed start waits for the
// transport's last words and exit status.
const startErrorWait = 5 * time.Second

// startError says why the transport ended before the agent spoke: its
// exit status and what it wrote on stderr, and for sudo that it wants a
// password when that is why.
func (c *carrier) startError(r resolved, junk []byte) error {
	// Its stderr's end says its message is whole (a loaded machine may
	// take a while to read it); the bound is for what it left holding
	// stderr open.
	bound, cancel := context.WithTimeout(context.Background(), startErrorWait)
	defer cancel()
	select {
	case <-c.errDone:
	case <-bound.Done():
	}
	status := "no exit status"
	select {
	case <-c.child.Done():
		status = exitWords(c.child.Status())
	case <-bound.Done():
	}
	msg := strings.TrimSpace(string(append(junk, c.stderr.Bytes()...)))
	if r.Method == "sudo" && strings.Contains(msg, "password") {
		return unavailablef("remote: %s: sudo wants a password, and the helper cannot type one (it runs sudo -n): %s", r.Target, msg)
	}
	return unavailablef("remote: %s: the host agent did not start (%s %s): %s", r.Target, c.argv0, status, msg)
}

// inspect asks the engine which incarnation of r's container runs: its
// id and start time. A container that does not exist or is not running
// is a goneError naming it.
func (p *Pool) inspect(ctx context.Context, r resolved) (Incarnation, error) {
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	if r.Method == "kubernetes" {
		return p.inspectPod(ctx, r)
	}
	prog := p.program(r.Method)
	out, errOut, ws, err := p.runShort(ctx, []string{prog, "inspect", "--type", "container",
		"--format", "{{.Id}} {{.State.Status}} {{.State.StartedAt}}", "--", r.Host})
	if err != nil {
		return Incarnation{}, unavailablef("remote: %s: %s inspect: %v", r.Target, prog, err)
	}
	msg := strings.TrimSpace(string(errOut))
	if ws.ExitStatus() != 0 || ws.Signaled() {
		if strings.Contains(strings.ToLower(msg), "no such") {
			return Incarnation{}, goneError{fmt.Sprintf("remote: %s: there is no container %q (%s inspect: %s)", r.Target, r.Host, prog, msg)}
		}
		return Incarnation{}, unavailablef("remote: %s: %s inspect %s failed (%s): %s", r.Target, prog, r.Host, exitWords(ws), msg)
	}
	f := strings.SplitN(strings.TrimSpace(string(out)), " ", 3)
	if len(f) != 3 || f[0] == "" {
		return Incarnation{}, unavailablef("remote: %s: %s inspect answered %q", r.Target, prog, out)
	}
	if f[1] != "running" {
		return Incarnation{}, goneError{fmt.Sprintf("remote: %s: container %q is not running (%s)", r.Target, r.Host, f[1])}
	}
	return Incarnation{ContainerID: f[0], StartedAt: f[2]}, nil
}

// podFields is what kubectl says of a pod: uid, phase, start time and
// its containers' names, parted by '|' (no name, phase or time has one).
const podFields = "jsonpath={.metadata.uid}|{.status.phase}|{.status.startTime}|{.spec.containers[*].name}"

// inspectPod asks kubectl which incarnation of r's pod runs: its uid and
// start time. A pod that does not exist or is not Running is a goneError
// naming it; a container the pod does not have is named with those it
// has.
func (p *Pool) inspectPod(ctx context.Context, r resolved) (Incarnation, error) {
	pod, container := r.pod()
	prog := p.program(r.Method)
	out, errOut, ws, err := p.runShort(ctx, []string{prog, "get", "pod", pod, "-o", podFields})
	if err != nil {
		return Incarnation{}, unavailablef("remote: %s: %s get pod: %v", r.Target, prog, err)
	}
	msg := strings.TrimSpace(string(errOut))
	if ws.ExitStatus() != 0 || ws.Signaled() {
		if strings.Contains(msg, "NotFound") {
			return Incarnation{}, goneError{fmt.Sprintf("remote: %s: there is no pod %q in kubectl's current namespace (%s get pod: %s)", r.Target, pod, prog, msg)}
		}
		// kubectl logs its retries first: its verdict is the last line.
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return Incarnation{}, unavailablef("remote: %s: %s get pod %s failed (%s): %s", r.Target, prog, pod, exitWords(ws), msg)
	}
	f := strings.Split(strings.TrimSpace(string(out)), "|")
	if len(f) != 4 || f[0] == "" {
		return Incarnation{}, unavailablef("remote: %s: %s get pod answered %q", r.Target, prog, out)
	}
	if f[1] != "Running" {
		return Incarnation{}, goneError{fmt.Sprintf("remote: %s: pod %q is not running (%s)", r.Target, pod, f[1])}
	}
	if names := strings.Fields(f[3]); container != "" && !slices.Contains(names, container) {
		return Incarnation{}, unavailablef("remote: %s: pod %q has no container %q (it has %s)", r.Target, pod, container, strings.Join(names, ", "))
	}
	return Incarnation{PodUID: f[0], StartedAt: f[2]}, nil
}

package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/remote/agent"
	"golang.org/x/crypto/ssh"
)

// The host agent's deployment. On a connection's first execution the
// helper asks the host, in one exec channel, for its OS and architecture
// and whether ~/.cache/mevedel-exec/bin/<version>/mevedel-exec there is
// this helper's own build (its SHA-256); if it is, the same channel
// becomes the agent's. If not, and the host is Linux on amd64 or arm64,
// the build for that architecture is uploaded over SFTP under a
// temporary name, its checksum is verified on the host, it is renamed
// into place (atomic), other versions are pruned, and it starts. A host
// that is not Linux amd64/arm64, or where the upload or the start fails,
// runs its commands through the wrapper (script.go) instead.

// Modes of a remote execution, as its facts name them.
const (
	ModeAgent   = "agent"
	ModeWrapper = "wrapper"
)

// deployTimeout bounds a deployment: the upload of a build included.
const deployTimeout = 2 * time.Minute

// Agent protocol markers printed by the deployment's scripts.
const (
	agentNeed = "\x00MEVEDEL-AGENT-NEED "
	agentErr  = "\x00MEVEDEL-AGENT-ERR "
)

// versionDir is the agent's directory name: the version, as a safe path
// element.
func versionDir() string {
	b := []byte(agent.Version)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] == '.' {
		b = append([]byte("v"), b...)
	}
	return string(b)
}

// agentHome is where the agents live, under the remote home.
const agentHome = ".cache/mevedel-exec/bin"

// build is this helper's executable for one architecture.
type build struct {
	path string
	sum  string // hex SHA-256
	size int64
}

// builds are the helper's builds by GOARCH, found and hashed once:
// mevedel-exec-linux-ARCH beside the running executable (`make build`
// makes both), or for its own architecture the executable itself.
var builds = sync.OnceValue(func() map[string]build {
	out := map[string]build{}
	exe, err := os.Executable()
	if err != nil {
		return out
	}
	for _, arch := range []string{"amd64", "arm64"} {
		// The static build beside the executable first (`make build`),
		// else the executable itself for its own architecture.
		p := filepath.Join(filepath.Dir(exe), "mevedel-exec-linux-"+arch)
		f, err := os.Open(p)
		if err != nil && arch == runtime.GOARCH && runtime.GOOS == "linux" {
			p = exe
			f, err = os.Open(p)
		}
		if err != nil {
			continue
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err == nil {
			out[arch] = build{path: p, sum: hex.EncodeToString(h.Sum(nil)), size: n}
		}
	}
	return out
})

// goarch names uname -m's machine as Go does; "" for one without a build.
func goarch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	}
	return ""
}

// probeCommand starts the installed agent when it is this build, and
// otherwise says what the host is and where its home is.
func probeCommand(v string) string {
	bs := builds()
	want := func(arch string) string {
		if b, ok := bs[arch]; ok {
			return b.sum
		}
		return "-"
	}
	script := `d="$HOME/` + agentHome + `/` + v + `"
s=$(uname -s 2>/dev/null) m=$(uname -m 2>/dev/null)
case $m in x86_64) want=` + want("amd64") + ` ;; aarch64|arm64) want=` + want("arm64") + ` ;; *) want=- ;; esac
if [ "$s" = Linux ] && [ -f "$d/mevedel-exec" ]; then
  sum=$(sha256sum "$d/mevedel-exec" 2>/dev/null)
  [ "${sum%% *}" = "$want" ] && exec "$d/mevedel-exec" host
fi
printf '\0MEVEDEL-AGENT-NEED %s %s %s\n' "$s" "$m" "$HOME"
`
	return "unset SSH_CLIENT SSH2_CLIENT; exec /bin/sh -c " + shq(script)
}

// installCommand verifies an upload, moves it into place, prunes other
// versions and starts it.
func installCommand(dir, v, tmp, sum string) string {
	script := `cd ` + shq(dir) + ` || exit 1
sum=$(sha256sum ` + shq(tmp) + ` 2>/dev/null)
if [ "${sum%% *}" != ` + sum + ` ]; then
  rm -f ` + shq(tmp) + `
  printf '\0MEVEDEL-AGENT-ERR the uploaded build does not have its checksum\n'
  exit 1
fi
chmod 700 ` + shq(tmp) + ` && mv -f ` + shq(tmp) + ` mevedel-exec || {
  printf '\0MEVEDEL-AGENT-ERR the uploaded build could not be moved into place\n'
  exit 1
}
for o in ../* ../.[!.]*; do [ "$o" = ../` + v + ` ] || rm -rf -- "$o"; done
exec "$PWD/mevedel-exec" host
`
	return "unset SSH_CLIENT SSH2_CLIENT; exec /bin/sh -c " + shq(script)
}

// errTransient marks a deployment that failed for want of an answer (a
// channel cut short): the next execution tries again.
var errTransient = errors.New("no answer from the host")

type transientError struct{ err error }

func (e transientError) Error() string   { return e.err.Error() }
func (e transientError) Unwrap() []error { return []error{e.err, errTransient} }

// agentSlot is a connection's host agent.
type agentSlot struct {
	mu       sync.Mutex
	cl       *agentClient  // guarded by mu; the running agent, if any
	starting chan struct{} // guarded by mu; closed when the deployment in flight ends
	failed   error         // guarded by mu; why this connection uses the wrapper
}

func (c *conn) hasAgent() bool {
	c.ag.mu.Lock()
	defer c.ag.mu.Unlock()
	return c.ag.cl != nil && !c.ag.cl.isDead()
}

// Ready reports, without waiting, whether t can be started on now: a
// live connection, with its host agent running unless the wrapper serves
// the host. Then it returns t resolved, as Connect would, and Prepare has
// nothing to do.
func (p *Pool) Ready(t Target) (Target, bool) {
	r, err := p.resolve(t)
	if err != nil {
		return Target{}, false
	}
	if r.Stream() {
		return r.Target, p.streamReady(r)
	}
	h, err := p.host(r.key())
	if err != nil {
		return Target{}, false
	}
	wantAgent := p.cfg.Mode != ModeWrapper && agent.Deployable
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		if !c.isDead() && (!wantAgent || c.hasAgent()) {
			return r.Target, true
		}
	}
	return Target{}, false
}

// agentFor returns the host agent of one of r's connections, deploying it
// when none runs; nil (and the reason) when the host's commands go
// through the wrapper.
func (p *Pool) agentFor(ctx context.Context, r resolved) (*agentClient, error) {
	if r.Container() {
		return p.containerAgent(ctx, r)
	}
	if r.Stream() {
		return p.streamAgent(ctx, r) // no wrapper to fall back to
	}
	if p.cfg.Mode == ModeWrapper {
		return nil, errors.New("the wrapper is forced")
	}
	if !agent.Deployable {
		return nil, errors.New("this program cannot serve as a host agent")
	}
	for round := 0; ; round++ {
		c, err := p.pickConn(ctx, r, (*conn).hasAgent)
		if err != nil {
			return nil, err
		}
		cl, err := c.agent(ctx, r)
		if !errors.Is(err, errConnGone) || round == maxDialRounds {
			return cl, err
		}
	}
}

// errConnGone is a connection that died while its agent was wanted:
// another one may take its place.
var errConnGone = unavailable(errors.New("remote: the connection was lost"))

// agent returns c's host agent, starting it when none runs. A deployment
// failure is remembered: c then uses the wrapper for its life.
func (c *conn) agent(ctx context.Context, r resolved) (*agentClient, error) {
	for {
		if c.isDead() {
			return nil, errConnGone
		}
		c.ag.mu.Lock()
		if cl := c.ag.cl; cl != nil && !cl.isDead() {
			c.ag.mu.Unlock()
			return cl, nil
		}
		if err := c.ag.failed; err != nil {
			c.ag.mu.Unlock()
			return nil, err
		}
		if w := c.ag.starting; w != nil {
			c.ag.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		w := make(chan struct{})
		c.ag.starting = w
		c.ag.mu.Unlock()
		started := c.pool.spawn(func() {
			cl, err := c.deployAgent(r)
			c.ag.mu.Lock()
			c.ag.starting = nil
			switch {
			case err == nil:
				c.ag.cl = cl
			case !c.isDead() && !errors.Is(err, errTransient):
				c.ag.failed = err
			}
			c.ag.mu.Unlock()
			close(w)
		})
		if !started {
			return nil, errClosed
		}
	}
}

// Prepare starts the deployment of t's host agent, if it has none, and
// returns at once: the first execution then finds it running or on its
// way.
func (p *Pool) Prepare(t Target) {
	if p.cfg.Mode == ModeWrapper || !agent.Deployable {
		return
	}
	r, err := p.resolve(t)
	if err != nil || r.Stream() {
		return // a stream target's agent runs once connected
	}
	p.spawn(func() {
		ctx, cancel := context.WithTimeout(p.life, deployTimeout)
		defer cancel()
		_, _ = p.agentFor(ctx, r)
	})
}

// deployAgent starts this build's agent on c, uploading it first if the
// host lacks it.
func (c *conn) deployAgent(r resolved) (*agentClient, error) {
	ctx, cancel := context.WithTimeout(c.pool.life, deployTimeout)
	defer cancel()
	v := versionDir()
	cl, need, err := c.startAgent(ctx, r, probeCommand(v))
	if cl != nil || err != nil {
		return cl, err
	}
	f := strings.Fields(need)
	if len(f) != 3 {
		return nil, fmt.Errorf("the host's description %q is malformed", need)
	}
	osName, machine, home := f[0], f[1], f[2]
	if osName != "Linux" || goarch(machine) == "" {
		return nil, fmt.Errorf("the host runs %s on %s: no host agent for it", osName, machine)
	}
	b, ok := builds()[goarch(machine)]
	if !ok {
		return nil, fmt.Errorf("no build of the helper for linux/%s beside %s (make build makes it)", goarch(machine), os.Args[0])
	}
	dir := path.Join(home, agentHome, v)
	tmp, err := c.upload(ctx, dir, b)
	if err != nil {
		return nil, fmt.Errorf("uploading the host agent: %w", err)
	}
	cl, need, err = c.startAgent(ctx, r, installCommand(dir, v, tmp, b.sum))
	if cl == nil && err == nil {
		err = fmt.Errorf("the host agent did not start: %q", need)
	}
	return cl, err
}

// upload copies b to a fresh temporary name in dir (0700 directories,
// a 0700 file) and returns that name.
func (c *conn) upload(ctx context.Context, dir string, b build) (string, error) {
	sc, _, err := c.sftpClient()
	if err != nil {
		return "", fmt.Errorf("sftp: %w", err)
	}
	if err := mkdirs(sc, dir); err != nil {
		return "", err
	}
	src, err := os.Open(b.path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp := ".mevedel-exec.tmp-" + rand.Text()
	full := path.Join(dir, tmp)
	f, err := sc.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return "", err
	}
	_ = f.Chmod(0o700)
	_, err = f.ReadFrom(&ctxReader{ctx: ctx, r: io.NewSectionReader(src, 0, b.size)})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = sc.Remove(full)
		return "", err
	}
	return tmp, nil
}

// startAgent runs command, which either execs the agent (whose hello
// comes back: its client is returned) or prints agentNeed (its rest is
// returned) or agentErr.
func (c *conn) startAgent(ctx context.Context, r resolved, command string) (*agentClient, string, error) {
	ch, reqs, err := c.openSession()
	if err != nil {
		return nil, "", transientError{err}
	}
	var stderr capped
	exit := make(chan string, 1)
	if !c.pool.spawn(func() {
		status := "no exit status"
		for req := range reqs {
			if req.Type == "exit-status" {
				var m struct{ Status uint32 }
				if ssh.Unmarshal(req.Payload, &m) == nil {
					status = fmt.Sprintf("exit %d", m.Status)
				}
			}
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
		exit <- status
		c.closed()
	}) || !c.pool.spawn(func() { _, _ = io.Copy(&stderr, ch.Stderr()) }) {
		ch.Close()
		return nil, "", errClosed
	}
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()
	ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{command}))
	if err == nil && !ok {
		err = errors.New("exec request refused")
	}
	if err != nil {
		ch.Close()
		return nil, "", transientError{err}
	}
	br := bufio.NewReaderSize(ch, 256<<10)
	g := readGreeting(br)
	switch {
	case g.said == agent.Hello && g.version != agent.Version:
		ch.Close()
		return nil, "", fmt.Errorf("the host agent is version %q, not %q", g.version, agent.Version)
	case g.said == agent.Hello:
		cl := newAgentClient(c.pool, c.lostWhy, r, Incarnation{Hostname: g.inc.Hostname, BootID: g.inc.BootID}, ch, br)
		if !stop() || !c.pool.spawn(cl.read) {
			ch.Close()
			return nil, "", errors.New("the host agent's start was cancelled")
		}
		return cl, "", nil
	case g.said == agentNeed:
		ch.Close()
		return nil, g.text, nil
	case g.said == agentErr:
		ch.Close()
		return nil, "", errors.New(g.text)
	}
	ch.Close()
	if ctx.Err() != nil {
		return nil, "", context.Cause(ctx)
	}
	status := "no exit status"
	select {
	case status = <-exit:
	case <-time.After(time.Second):
	}
	msg := strings.TrimSpace(string(append(g.junk, stderr.Bytes()...)))
	err = fmt.Errorf("the host agent did not start (%s): %s", status, msg)
	if status == "no exit status" {
		return nil, "", transientError{err}
	}
	return nil, "", err
}

// greeting is what a starting host agent said first: its hello (said is
// agent.Hello; its version and incarnation), a NEED line (agentNeed, the
// build it needs in text) or an error line (agentErr, in text); or, with
// said empty, nothing before its stream ended, junk being what came.
type greeting struct {
	said    string
	text    string
	version string
	inc     agent.Incarnation
	junk    []byte
}

// readGreeting reads a starting agent's stream up to its first line of
// the agent's own (what a login shell prints before it is junk), or its
// end.
func readGreeting(br *bufio.Reader) greeting {
	var g greeting
	for {
		chunk, err := br.ReadSlice('\n')
		if i := bytes.Index(chunk, []byte("\x00MEVEDEL-AGENT")); i >= 0 && err == nil {
			line := strings.TrimRight(string(chunk[i:]), "\r\n")
			for _, kind := range []string{agent.Hello, agentNeed, agentErr} {
				if rest, ok := strings.CutPrefix(line, kind); ok {
					g.said, g.text = kind, rest
					if kind == agent.Hello {
						g.version, g.inc = agent.ParseHello(rest)
					}
					return g
				}
			}
		}
		g.junk = appendCapped(g.junk, chunk)
		if err != nil && err != bufio.ErrBufferFull {
			return g
		}
	}
}

package remote

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// run starts command on the host a TRAMP name names and returns its
// output once it ended.
func run(t *testing.T, p *Pool, name, command string) string {
	t.Helper()
	tg, _, err := ParseTRAMP(name)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := p.Start(testCtx(t), tg, process.Spec{Command: command, Dir: tg.Path})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := collect(proc.Output())
	if e, err := wait(t, proc); err != nil || e.Code != 0 {
		t.Fatalf("%s: %q ended %+v, %v", name, command, e, err)
	}
	return out.all(t)
}

// Every SSH method names the same host the same way: one pooled
// connection serves them all, and the target they resolve to is one.
func TestSSHMethodsShareOneConnection(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	dir := t.TempDir()
	for _, m := range Methods {
		name := fmt.Sprintf("/%s:%s:%s", m, sshd.Alias, dir)
		if got := run(t, p, name, "pwd"); got != dir+"\n" {
			t.Fatalf("%s: pwd %q", name, got)
		}
		tg, _, _ := ParseTRAMP(name)
		r, err := p.Resolve(tg)
		if err != nil || r.String() != fmt.Sprintf("ssh:%s@127.0.0.1#%d", s.User, s.Port) || r.MethodName() != m {
			t.Fatalf("%s resolves to %q (method %q), %v", name, r, r.MethodName(), err)
		}
	}
	if n := p.dials.Load(); n != 1 {
		t.Fatalf("%d connections dialled for one host named by %d methods", n, len(Methods))
	}
}

// chain starts two servers, the first a jump host to the second, for the
// second's client home, and returns the hop chain's name prefix.
func chain(t *testing.T) (jump, target *sshd.Server, via string) {
	t.Helper()
	jump, target = sshd.Start(t), sshd.Start(t)
	if err := jump.Admit(target); err != nil {
		t.Fatal(err)
	}
	return jump, target, fmt.Sprintf("/ssh:%s@127.0.0.1#%d|", jump.User, jump.Port)
}

// A host behind a hop is dialled through the hop's pooled connection, as
// ProxyJump does: the connection to it is the jump host's, not this
// process's, and the hop's connection serves a direct name of it too.
func TestHopChainDialsThroughTheJumpHost(t *testing.T) {
	t.Parallel()
	jump, target, via := chain(t)
	p := newPool(t, target)
	dir := t.TempDir()
	name := via + "scp:" + sshd.Alias + ":" + dir
	if got := run(t, p, name, "pwd"); got != dir+"\n" {
		t.Fatalf("pwd %q", got)
	}
	conns := testsupport.ConnectedTo(target.Port)
	if slices.Contains(conns, os.Getpid()) || len(conns) == 0 {
		t.Fatalf("processes connected to the target: %v; want the jump host's sshd, not this process %d", conns, os.Getpid())
	}
	for _, pid := range conns {
		if !slices.Contains(jump.Connections(), pid) {
			t.Fatalf("process %d (%s) holds the connection to the target; the jump host's are %v", pid, testsupport.Cmdline(pid), jump.Connections())
		}
	}
	// The jump host's connection is the pool's: a direct name of it
	// dials nothing more, nor does the chain again.
	run(t, p, fmt.Sprintf("/ssh:%s@127.0.0.1#%d:", jump.User, jump.Port), "true")
	run(t, p, name, "true")
	if n := p.dials.Load(); n != 2 {
		t.Fatalf("%d connections dialled; want 2 (the hop and the host behind it)", n)
	}
	tg, _, _ := ParseTRAMP(name)
	r, err := p.Resolve(tg)
	want := fmt.Sprintf("ssh:%s@127.0.0.1#%d|ssh:%s@127.0.0.1#%d", jump.User, jump.Port, target.User, target.Port)
	if err != nil || r.String() != want {
		t.Fatalf("resolved %q, %v; want %q", r, err, want)
	}
	// The hop's loss takes the connection behind it along: the next
	// command dials both again.
	if jump.KillConnections() == 0 {
		t.Fatal("no connection to the jump host to cut")
	}
	run(t, p, name, "true")
	if n := p.dials.Load(); n != 4 {
		t.Fatalf("%d connections dialled after the hop's loss; want 4", n)
	}
}

// A host behind a hop that cannot be reached is unavailable, and the
// message names the hop it was asked of.
func TestHopChainUnreachableBehindTheHop(t *testing.T) {
	t.Parallel()
	jump, target, via := chain(t)
	p := newPool(t, target)
	target.Stop()
	tg, _, err := ParseTRAMP(via + fmt.Sprintf("ssh:127.0.0.1#%d:/", target.Port))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Start(testCtx(t), tg, process.Spec{Command: "true"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("through ssh:%s@127.0.0.1#%d", jump.User, jump.Port)) {
		t.Fatalf("Start behind a hop to a closed port: %v", err)
	}
}

// A hop whose host key known_hosts does not vouch for stops the chain
// there: the error is the hop's, and nothing is dialled behind it.
func TestHopChainUnknownHopKey(t *testing.T) {
	t.Parallel()
	jump, target, via := chain(t)
	// The chain's client home is the target's: its known_hosts keeps the
	// target's line, not the one Admit added for the jump host.
	if err := os.WriteFile(target.KnownHostsPath(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := target.WriteKnownHosts(target.HostKey); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, target)
	tg, _, err := ParseTRAMP(via + "ssh:" + sshd.Alias + ":/")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Start(testCtx(t), tg, process.Spec{Command: "true"})
	var hke *HostKeyError
	if !errors.As(err, &hke) || hke.HostPort != jump.Addr || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start through a hop of unknown key: %v", err)
	}
	if n := p.dials.Load(); n != 2 || slices.Contains(testsupport.ConnectedTo(target.Port), os.Getpid()) {
		t.Fatalf("dials %d, connected to the target: %v; want the hop's dial (and the chain's, which waited on it) only", n, testsupport.ConnectedTo(target.Port))
	}
}

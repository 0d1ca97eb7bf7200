package remote

import (
	"crypto/ed25519"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/process"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/mevedel/mevedel-exec/test/sshd"
)

func TestUnknownHostKeyIsRefused(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	for _, setup := range []struct {
		name string
		do   func() error
	}{
		{"empty known_hosts", func() error { return s.WriteKnownHosts(nil) }},
		{"missing known_hosts", func() error { return os.Remove(s.KnownHostsPath()) }},
	} {
		t.Run(setup.name, func(t *testing.T) {
			if err := setup.do(); err != nil {
				t.Fatal(err)
			}
			p := newPool(t, s)
			_, err := p.Start(testCtx(t), target(""), process.Spec{Command: "true"})
			var hke *HostKeyError
			if !errors.As(err, &hke) || hke.Changed {
				t.Fatalf("Start: %v; want an unknown host key error", err)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%v is not classified unavailable", err)
			}
			msg := err.Error()
			for _, want := range []string{"unknown", "known_hosts", s.Addr, s.HostKeyFingerprint} {
				if !strings.Contains(msg, want) {
					t.Fatalf("message %q does not name %q", msg, want)
				}
			}
		})
	}
}

func TestChangedHostKeyIsRefused(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	pub, _, _ := ed25519.GenerateKey(nil)
	other, _ := ssh.NewPublicKey(pub)
	if err := s.WriteKnownHosts(other); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, s)
	_, err := p.Start(testCtx(t), target(""), process.Spec{Command: "true"})
	var hke *HostKeyError
	if !errors.As(err, &hke) || !hke.Changed || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start: %v; want a changed host key error", err)
	}
	for _, want := range []string{"changed", s.Addr, s.HostKeyFingerprint} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("message %q does not name %q", err, want)
		}
	}
	if p.dials.Load() != 1 {
		t.Fatalf("dials %d", p.dials.Load())
	}
}

func TestUnreachableHostIsUnavailable(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	s.Stop()
	_, err := p.Start(testCtx(t), target(""), process.Spec{Command: "true"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start on a stopped server: %v; want ErrUnavailable", err)
	}
}

func TestPoolSharesOneConnection(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	for i := 0; i < 10; i++ {
		proc, out := start(t, p, process.Spec{Command: "echo $$"})
		if e, err := wait(t, proc); err != nil || e.Code != 0 {
			t.Fatalf("run %d: %+v, %v", i, e, err)
		}
		out.all(t)
	}
	if n := p.dials.Load(); n != 1 {
		t.Fatalf("10 starts dialled %d times, want once", n)
	}

	// Concurrent first users share one dial.
	p2 := newPool(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			proc, err := p2.Start(testCtx(t), target(""), process.Spec{Command: "true"})
			if err == nil {
				_, err = proc.Wait()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := p2.dials.Load(); n != 1 {
		t.Fatalf("8 concurrent starts dialled %d times, want once", n)
	}
}

// sshd allows 10 sessions a connection; the 11th command gets a sibling
// connection instead of an error.
func TestSessionLimitOpensASibling(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	var procs []*Process
	for i := 0; i < 12; i++ {
		proc, out := start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
		out.waitFor(t, "started\n")
		procs = append(procs, proc)
	}
	if n := p.dials.Load(); n != 2 {
		t.Fatalf("12 long commands dialled %d times, want 2", n)
	}
	for _, proc := range procs {
		if err := proc.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if e, _ := wait(t, proc); !e.Signaled {
			t.Fatalf("exit %+v", e)
		}
	}
}

func TestCloseEndsTheTransport(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	proc, out := start(t, p, process.Spec{Command: "echo started; exec sleep 1000"})
	out.waitFor(t, "started\n")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	<-proc.Transport()
	if e, _ := wait(t, proc); e.Lost == "" {
		t.Fatalf("exit %+v", e)
	}
	if _, err := p.Start(testCtx(t), target(""), process.Spec{Command: "true"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start after Close: %v", err)
	}
}

func TestLoginEnvIsCapturedOncePerConnection(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	env, err := p.LoginEnv(testCtx(t), target(""))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	for _, k := range []string{"PATH", "HOME", "USER"} {
		if !keys[k] {
			t.Errorf("login environment lacks %s: %q", k, env)
		}
	}
	for _, k := range []string{"SHLVL", "_", "PWD", "MEVEDEL_EXEC_TAG", "SSH_CLIENT"} {
		if keys[k] {
			t.Errorf("login environment has %s", k)
		}
	}
	sessions := p.sessions.Load()
	again, err := p.LoginEnv(testCtx(t), target(""))
	if err != nil || strings.Join(again, "\n") != strings.Join(env, "\n") {
		t.Fatalf("second capture differs: %v", err)
	}
	if p.sessions.Load() != sessions {
		t.Fatal("the second call captured again")
	}
	// It is what a command started with it sees.
	proc, out := start(t, p, process.Spec{Command: `printf %s "$PATH"`, Env: env})
	wait(t, proc)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && out.all(t) != v {
			t.Fatalf("PATH %q, want %q", out.all(t), v)
		}
	}
}

func TestAgentKeysAuthenticate(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	// A home that trusts the server but holds no key.
	home := t.TempDir()
	os.MkdirAll(home+"/.ssh", 0o700)
	known, err := os.ReadFile(s.KnownHostsPath())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(home+"/.ssh/known_hosts", known, 0o600)
	direct := Target{Host: "127.0.0.1", Port: s.Port}

	p := NewPool(Config{Home: home})
	defer p.Close()
	if _, err := p.Start(testCtx(t), direct, process.Spec{Command: "true"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start without a key: %v; want ErrUnavailable", err)
	}

	pem, err := os.ReadFile(s.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: raw}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = agent.ServeAgent(keyring, c)
				c.Close()
			}()
		}
	}()
	pa := NewPool(Config{Home: home, AgentSocket: sock})
	defer pa.Close()
	proc, err := pa.Start(testCtx(t), direct, process.Spec{Command: "echo via agent"})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(proc.Output())
	wait(t, proc)
	if got := out.all(t); got != "via agent\n" {
		t.Fatalf("output %q", got)
	}
}

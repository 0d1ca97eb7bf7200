package sshd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func dial(t *testing.T, s *Server) *ssh.Client {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(s.Home, ".ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	known, err := knownhosts.New(s.KnownHostsPath())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{
		User:            s.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: known,
		Timeout:         10 * time.Second,
	})
	if err != nil {
		t.Fatalf("dial %s: %v", s.Addr, err)
	}
	return c
}

func TestServerRunsCommandsForItsClientHome(t *testing.T) {
	s := Start(t)
	c := dial(t, s)
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.CombinedOutput("echo hello")
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("echo: %q, %v", out, err)
	}
	conf, err := os.ReadFile(filepath.Join(s.Home, ".ssh", "config"))
	if err != nil || !strings.Contains(string(conf), "Host "+Alias) {
		t.Fatalf(".ssh/config: %q, %v", conf, err)
	}
	if !strings.HasPrefix(s.HostKeyFingerprint, "SHA256:") {
		t.Fatalf("fingerprint %q", s.HostKeyFingerprint)
	}
}

func TestKillConnectionsCutsTheTransport(t *testing.T) {
	s := Start(t)
	c := dial(t, s)
	defer c.Close()
	if n := s.KillConnections(); n == 0 {
		t.Fatal("no connection process found")
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not see its connection end")
	}
	// The listener still serves new connections.
	c2 := dial(t, s)
	c2.Close()
}

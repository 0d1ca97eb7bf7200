package remote

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mevedel/mevedel-exec/test/sshd"
)

func TestResolveAppliesSSHConfig(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	got, err := p.Resolve(Target{Host: sshd.Alias, Path: "/srv"})
	if err != nil {
		t.Fatal(err)
	}
	want := Target{User: s.User, Host: "127.0.0.1", Port: s.Port, Path: "/srv"}
	if got != want {
		t.Fatalf("Resolve(alias) = %+v, want %+v", got, want)
	}
	r, err := p.resolve(Target{Host: sshd.Alias})
	if err != nil {
		t.Fatal(err)
	}
	if id := filepath.Join(s.Home, ".ssh", "id_ed25519"); !slices.Equal(r.identities, []string{id}) {
		t.Fatalf("identities %q, want [%s]", r.identities, id)
	}
	// What the name gives wins over the config.
	got, _ = p.Resolve(Target{User: "other", Host: sshd.Alias, Port: 2})
	if got.User != "other" || got.Port != 2 || got.Host != "127.0.0.1" {
		t.Fatalf("explicit user and port were overridden: %+v", got)
	}
	// No entry: port 22 and the current user.
	got, _ = p.Resolve(Target{Host: "elsewhere.invalid"})
	if got.Port != 22 || got.User != currentUser() || got.Host != "elsewhere.invalid" {
		t.Fatalf("defaults: %+v", got)
	}
	if got.String() != "ssh:"+currentUser()+"@elsewhere.invalid#22" {
		t.Fatalf("String() = %q", got.String())
	}
}

func TestResolveExpandsTokens(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := `Host web-*
  HostName %h.example.com
  User deploy
  IdentityFile ~/.ssh/key-%r
  IdentityFile %d/other
  IdentityFile none
Host *
  Port 2200
`
	if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := NewPool(Config{Home: home})
	defer p.Close()
	r, err := p.resolve(Target{Host: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Host != "web-1.example.com" || r.User != "deploy" || r.Port != 2200 {
		t.Fatalf("resolved %+v", r.Target)
	}
	want := []string{filepath.Join(home, ".ssh", "key-deploy"), filepath.Join(home, "other")}
	if !slices.Equal(r.identities, want) {
		t.Fatalf("identities %q, want %q", r.identities, want)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte("Host x\n  Port nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Resolve(Target{Host: "x"}); err == nil {
		t.Fatal("a bad Port was accepted")
	}
}

// Every hop of a chain is resolved through the config as ssh resolves a
// ProxyJump's hosts, each with its own keys; the chain is a connection of
// its own, beside the host's direct one, whatever the methods.
func TestResolveHopChain(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := `Host j
  HostName 10.0.0.1
  Port 2200
  User ju
  IdentityFile ~/.ssh/jump_key
Host b
  HostName 10.0.0.2
  User bu
`
	if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := NewPool(Config{Home: home})
	defer p.Close()
	resolve := func(name string) resolved {
		t.Helper()
		tg, _, err := ParseTRAMP(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.resolve(tg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := resolve("/ssh:j|scp:b:/x")
	if got, want := r.String(), "ssh:ju@10.0.0.1#2200|ssh:bu@10.0.0.2#22"; got != want || r.Path != "/x" {
		t.Fatalf("resolved %q %q, want %q", got, r.Path, want)
	}
	if r.jump == nil || !slices.Equal(r.jump.identities, []string{filepath.Join(home, ".ssh", "jump_key")}) {
		t.Fatalf("the hop's keys: %+v", r.jump)
	}
	if r.key() != resolve("/sshx:ju@10.0.0.1#2200|rsync:b:/y").key() {
		t.Fatal("two names of one chain do not share its connection")
	}
	if r.key() == resolve("/ssh:b:/x").key() {
		t.Fatal("the chain shares the host's direct connection")
	}
	if got := resolve("/ssh:j|ssh:j|ssh:b:").String(); got != "ssh:ju@10.0.0.1#2200|ssh:ju@10.0.0.1#2200|ssh:bu@10.0.0.2#22" {
		t.Fatalf("three hops: %q", got)
	}
}

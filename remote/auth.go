package remote

// How a connection proves the host and itself: known_hosts and the
// client's keys (apart from the pool, which only dials and shares).

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// hostKeyCallback checks keys against Home/.ssh/known_hosts, read afresh
// for every dial so an edit takes effect; a missing file is empty.
func (p *Pool) hostKeyCallback() (ssh.HostKeyCallback, ssh.HostKeyCallback, error) {
	file := filepath.Join(p.cfg.Home, ".ssh", "known_hosts")
	var files []string
	if _, err := os.Stat(file); err == nil {
		files = append(files, file)
	}
	known, err := knownhosts.New(files...)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", file, err)
	}
	check := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := known(hostname, remote, key)
		if err == nil {
			return nil
		}
		e := &HostKeyError{HostPort: hostname, Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(), KnownHosts: file}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &ke):
			e.Changed = len(ke.Want) > 0
			return e
		case errors.As(err, &re):
			e.Revoked = true
			return e
		}
		return err
	}
	return check, known, nil
}

// probeKey is a key no known_hosts holds: checking it reveals which keys
// are known for a host.
var probeKey = func() ssh.PublicKey {
	pub, _, _ := ed25519.GenerateKey(nil)
	k, _ := ssh.NewPublicKey(pub)
	return k
}()

// knownAlgorithms limits the host key algorithms to the types known_hosts
// holds for addr, so a host with several keys offers one we can check
// instead of one we would call changed. Nil (no limit) for an unknown host.
func knownAlgorithms(known ssh.HostKeyCallback, addr string, remote net.Addr) []string {
	var ke *knownhosts.KeyError
	if err := known(addr, remote, probeKey); !errors.As(err, &ke) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, k := range ke.Want {
		if k.Key.Type() == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512)
			add(ssh.KeyAlgoRSASHA256)
		}
		add(k.Key.Type())
	}
	return algos
}

// signers offers the agent's keys, then the identity files (those of the
// config, else the default ones). Keys that need a passphrase are left to
// the agent.
func (p *Pool) signers(r resolved) (func() ([]ssh.Signer, error), func()) {
	var agentConn net.Conn
	if p.cfg.AgentSocket != "" {
		agentConn, _ = net.DialTimeout("unix", p.cfg.AgentSocket, p.cfg.DialTimeout)
	}
	files := r.identities
	if files == nil {
		files = p.defaultIdentities()
	}
	get := func() ([]ssh.Signer, error) {
		var out []ssh.Signer
		if agentConn != nil {
			if s, err := agent.NewClient(agentConn).Signers(); err == nil {
				out = append(out, s...)
			}
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if s, err := ssh.ParsePrivateKey(b); err == nil {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			return nil, errors.New("no usable key: no agent key and no readable unencrypted identity file")
		}
		return out, nil
	}
	return get, func() {
		if agentConn != nil {
			agentConn.Close()
		}
	}
}

package remote

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kevinburke/ssh_config"
)

// Config says whose SSH setup the pool uses.
type Config struct {
	// Home holds .ssh/config, .ssh/known_hosts and the default keys
	// .ssh/id_*. If empty, the current user's home is used.
	Home string
	// AgentSocket is the SSH agent's socket (SSH_AUTH_SOCK); empty means
	// no agent.
	AgentSocket string
	// KeepAlive is the interval of keepalive requests on every pooled
	// connection; a request unanswered for as long marks the connection
	// dead. If zero, 15 s is used.
	KeepAlive time.Duration
	// DialTimeout bounds the TCP dial and the SSH handshake. If zero, 10 s
	// is used.
	DialTimeout time.Duration
	// Mode is ModeWrapper to run every command through the wrapper, never
	// a host agent; empty (or ModeAgent) deploys the agent where the host
	// can run it.
	Mode string
	// Engines names the program of a stream method (sudo, podman,
	// docker, kubernetes) where it is not the method's name on PATH
	// (kubectl for kubernetes).
	Engines map[string]string
}

func (c Config) withDefaults() Config {
	if c.Home == "" {
		c.Home, _ = os.UserHomeDir()
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	return c
}

// resolved is a target after ~/.ssh/config: the real host name, port and
// user, and the keys named for it; each hop before it is resolved the
// same way, as ssh resolves the hosts of a ProxyJump.
type resolved struct {
	Target
	alias      string
	identities []string  // IdentityFile paths, expanded; nil: the defaults
	jump       *resolved // the hop dialled through; nil: dialled directly
}

// key identifies the pooled connection a resolved target shares: the
// method is not part of it, so /ssh: and /scp: names of a host share one,
// and a host reached through hops has its own, beside a direct one.
func (r resolved) key() string {
	if r.Stream() {
		k := r.Method + ":" + r.User + "@" + r.Host
		if r.jump != nil {
			return r.jump.key() + "|" + k
		}
		return k
	}
	k := r.User + "@" + r.addr()
	if r.jump != nil {
		return r.jump.key() + "|" + k
	}
	return k
}

const systemConfig = "/etc/ssh/ssh_config"

// Resolve applies ~/.ssh/config (then /etc/ssh/ssh_config) to t: HostName,
// Port and User, each only where t does not give it; then the defaults
// (port 22, the current user). Path is kept.
func (p *Pool) Resolve(t Target) (Target, error) {
	r, err := p.resolve(t)
	return r.Target, err
}

// resolve applies the configuration to t. Parsing the two files costs
// most of a millisecond and every operation resolves its target, so the
// result is kept per target until either file changes.
func (p *Pool) resolve(t Target) (resolved, error) {
	if t.Stream() {
		// No ssh_config: sudo is root unless told, on this machine or
		// on the SSH host before it; a container is its engine's name.
		if t.Method == "sudo" && t.User == "" {
			t.User = "root"
		}
		if t.Via == "" {
			if t.Method == "sudo" {
				t.Host = "localhost"
			}
			return resolved{Target: t}, nil
		}
		j, err := t.jump()
		if err != nil {
			return resolved{}, err
		}
		rj, err := p.resolve(j)
		if err != nil {
			return resolved{}, err
		}
		// sudo on that SSH host, as it is resolved.
		r := resolved{Target: t, jump: &rj}
		r.Via, r.Host = rj.String(), rj.Host
		return r, nil
	}
	userFile := filepath.Join(p.cfg.Home, ".ssh", "config")
	sig := fileSignature(userFile) + fileSignature(systemConfig)
	key := t
	key.Path = ""
	p.resolvedMu.Lock()
	if c, ok := p.resolved[key]; ok && c.sig == sig {
		p.resolvedMu.Unlock()
		r := c.r
		r.Path = t.Path
		return r, nil
	}
	p.resolvedMu.Unlock()
	r, err := p.resolveFiles(t, userFile)
	if err != nil {
		return resolved{}, err
	}
	p.resolvedMu.Lock()
	if p.resolved == nil || len(p.resolved) > 1000 {
		p.resolved = map[Target]resolvedEntry{}
	}
	p.resolved[key] = resolvedEntry{r: r, sig: sig}
	p.resolvedMu.Unlock()
	return r, nil
}

// resolvedEntry is a resolution and the configuration it was made from.
type resolvedEntry struct {
	r   resolved
	sig string
}

// fileSignature identifies a file's version well enough to notice an edit.
func fileSignature(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "-;"
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d:%d:%d;", ino, fi.Size(), fi.ModTime().UnixNano())
}

func (p *Pool) resolveFiles(t Target, userFile string) (resolved, error) {
	userCfg, err := readSSHConfig(userFile)
	if err != nil {
		return resolved{}, err
	}
	// A broken system file is not the user's to fix; ssh would refuse it,
	// but the user's own file is what the helper promises to honour.
	sysCfg, _ := readSSHConfig(systemConfig)
	get := func(key string) string {
		for _, c := range []*ssh_config.Config{userCfg, sysCfg} {
			if c == nil {
				continue
			}
			if v, err := c.Get(t.Host, key); err == nil && v != "" {
				return v
			}
		}
		return ""
	}
	r := resolved{Target: t, alias: t.Host}
	if h := get("HostName"); h != "" {
		r.Host = expandTokens(h, map[byte]string{'h': t.Host})
	}
	if r.Port == 0 {
		if v := get("Port"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return resolved{}, fmt.Errorf("remote: ssh config: bad Port %q for %s", v, t.Host)
			}
			r.Port = n
		} else {
			r.Port = 22
		}
	}
	if r.User == "" {
		r.User = get("User")
	}
	if r.User == "" {
		r.User = currentUser()
	}
	var files []string
	for _, c := range []*ssh_config.Config{userCfg, sysCfg} {
		if c == nil {
			continue
		}
		if v, err := c.GetAll(t.Host, "IdentityFile"); err == nil {
			files = append(files, v...)
		}
	}
	tokens := map[byte]string{
		'd': p.cfg.Home, 'h': r.Host, 'n': r.alias, 'p': strconv.Itoa(r.Port),
		'r': r.User, 'u': currentUser(),
	}
	for _, f := range files {
		if strings.EqualFold(f, "none") {
			continue
		}
		f = expandTokens(f, tokens)
		if f == "~" || strings.HasPrefix(f, "~/") {
			f = filepath.Join(p.cfg.Home, f[1:])
		} else if !filepath.IsAbs(f) {
			f = filepath.Join(p.cfg.Home, f)
		}
		r.identities = append(r.identities, f)
	}
	if t.Via != "" {
		j, err := t.jump()
		if err != nil {
			return resolved{}, err
		}
		rj, err := p.resolve(j)
		if err != nil {
			return resolved{}, err
		}
		r.jump, r.Via = &rj, rj.String()
	}
	return r, nil
}

// readSSHConfig parses an ssh_config file; a missing file is empty.
func readSSHConfig(path string) (*ssh_config.Config, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: ssh config: %w", err)
	}
	c, err := ssh_config.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("remote: ssh config %s: %w", path, err)
	}
	return c, nil
}

// expandTokens replaces ssh_config's %x tokens that it knows; %% is a
// percent sign.
func expandTokens(s string, tokens map[byte]string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
		} else if v, ok := tokens[s[i]]; ok {
			b.WriteString(v)
		} else {
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// defaultIdentities are the keys ssh tries when the config names none.
func (p *Pool) defaultIdentities() []string {
	var out []string
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		f := filepath.Join(p.cfg.Home, ".ssh", n)
		if _, err := os.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	return out
}

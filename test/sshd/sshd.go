// Package sshd starts a private OpenSSH server for tests: its own host key,
// port and authorized key on 127.0.0.1, and a client-side HOME that trusts
// it (known_hosts, a key, and a `testhost` alias in .ssh/config).
package sshd

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"golang.org/x/crypto/ssh"
)

// Binary is the server started; the fixture fails (never skips) without it.
const Binary = "/usr/sbin/sshd"

// Alias is the Host entry of the client's .ssh/config for this server.
const Alias = "testhost"

// Server is one running sshd.
type Server struct {
	Addr               string // 127.0.0.1:port
	Port               int
	User               string // the current user, whom the server lets in
	Home               string // the client's private HOME (.ssh/config, known_hosts, id_ed25519)
	HostHome           string // HOME of every session on the host: private too
	HostKeyFingerprint string // SHA256:... of the server's host key
	HostKey            ssh.PublicKey
	ClientKey          string // path of the client's private key

	dir  string
	env  []string // more KEY=value for every session (SetEnv)
	cmd  *exec.Cmd
	done chan struct{} // closed once, when sshd has been waited for
	err  error         // set before done is closed

	stopOnce sync.Once
	stderr   *testsupport.Buffer
}

// Start starts sshd in a temporary directory of t and registers its
// teardown with t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartEnv(t)
}

// StartEnv is Start with env (KEY=value, no spaces or quotes) set in
// every session on the host, after sshd's own: a PATH there replaces
// sshd's default.
func StartEnv(t testing.TB, env ...string) *Server {
	t.Helper()
	s, err := launch(t.TempDir(), env)
	if err != nil {
		t.Fatalf("sshd: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Launch starts sshd with its keys, configuration and the client's HOME
// in dir, which must exist and stay until Stop; a program (the
// benchmark) uses it where a test uses Start. The caller must Stop it.
func Launch(dir string) (*Server, error) { return launch(dir, nil) }

func launch(dir string, env []string) (*Server, error) {
	if _, err := os.Stat(Binary); err != nil {
		return nil, fmt.Errorf("%s not found (%v): run scripts/setup.sh", Binary, err)
	}
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		return nil, fmt.Errorf("ssh-keygen not found (%v): run scripts/setup.sh", err)
	}
	// sshd refuses to run without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, fmt.Errorf("creating /run/sshd: %w", err)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	s := &Server{User: u.Username, dir: dir, env: env, Home: filepath.Join(dir, "home"), HostHome: filepath.Join(dir, "hosthome")}
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key")
	s.ClientKey = filepath.Join(dir, "client_ed25519")
	for _, k := range []string{hostKey, s.ClientKey} {
		if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "mevedel-exec-test", "-f", k).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pubHost, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		return nil, err
	}
	s.HostKey, _, _, _, err = ssh.ParseAuthorizedKey(pubHost)
	if err != nil {
		return nil, fmt.Errorf("parsing the host key: %w", err)
	}
	s.HostKeyFingerprint = ssh.FingerprintSHA256(s.HostKey)
	pubClient, err := os.ReadFile(s.ClientKey + ".pub")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.HostHome, 0o700); err != nil {
		return nil, err
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, pubClient, 0o600); err != nil {
		return nil, err
	}

	// A free port can be taken between the probe and sshd's bind: retry.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		if lastErr = s.start(port, hostKey, authorized); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if err := s.writeClientHome(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("client home: %w", err)
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(port int, hostKey, authorized string) error {
	cfg := filepath.Join(s.dir, "sshd_config")
	// SetEnv SHLVL=1 keeps the test user's ~/.bashrc out of every channel:
	// Debian's bash reads it for a command run by sshd at shell level 1,
	// and a slow rc file would then time the tests instead of the code.
	// HOME is a private directory too: a login shell (the login
	// environment's capture) would otherwise read the real user's profile,
	// and one killed in the middle of it can leave locks (pyenv's rehash)
	// that stall every later shell.
	conf := fmt.Sprintf(`ListenAddress 127.0.0.1
Port %d
HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
Subsystem sftp internal-sftp
SetEnv SHLVL=1 %s HOME=%s%s
LogLevel ERROR
`, port, hostKey, filepath.Join(s.dir, "sshd.pid"), authorized, testsupport.RaceExit, s.HostHome, strings.Join(append([]string{""}, s.env...), " "))
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return err
	}
	s.stderr = &testsupport.Buffer{}
	cmd := exec.Command(Binary, "-D", "-e", "-f", cfg)
	cmd.Stderr = s.stderr
	// Its own group: a test's interrupt does not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Ready once this sshd wrote its pid file (it does after binding) and
	// the port answers. The port alone is not enough: when another test's
	// sshd took the same free port first, this one exits and the probe
	// would be answered by the other, which may be stopped at any time.
	pidFile := filepath.Join(s.dir, "sshd.pid")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(cmd.Process.Pid) {
			if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
				c.Close()
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("sshd exited (%v): %s", s.err, s.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("sshd did not accept on %s within 10s: %s", s.Addr, s.stderr.String())
		}
	}
}

// writeClientHome makes the client side's HOME: known_hosts trusting the
// server, the client key, and a config alias for it.
func (s *Server) writeClientHome() error {
	sshDir := filepath.Join(s.Home, ".ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		return err
	}
	key, err := os.ReadFile(s.ClientKey)
	if err != nil {
		return err
	}
	id := filepath.Join(sshDir, "id_ed25519")
	if err := os.WriteFile(id, key, 0o600); err != nil {
		return err
	}
	if err := s.WriteKnownHosts(s.HostKey); err != nil {
		return err
	}
	conf := fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n", Alias, s.Port, s.User, id)
	return os.WriteFile(filepath.Join(sshDir, "config"), []byte(conf), 0o600)
}

// KnownHostsPath is the client's known_hosts file.
func (s *Server) KnownHostsPath() string { return filepath.Join(s.Home, ".ssh", "known_hosts") }

// WriteKnownHosts replaces this server's line in the client's
// known_hosts with one for its address and key (nil: none); the lines of
// other servers (Admit's) stay.
func (s *Server) WriteKnownHosts(key ssh.PublicKey) error {
	return writeKnownHost(s.KnownHostsPath(), s.Port, key)
}

func writeKnownHost(file string, port int, key ssh.PublicKey) error {
	prefix := fmt.Sprintf("[127.0.0.1]:%d ", port)
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(string(old), "\n") {
		if l != "" && !strings.HasPrefix(l, prefix) {
			b.WriteString(l)
		}
	}
	if key != nil {
		b.WriteString(prefix)
		b.Write(ssh.MarshalAuthorizedKey(key))
	}
	return os.WriteFile(file, []byte(b.String()), 0o600)
}

// Admit lets the client of c (its HOME, as a helper uses it) log in to
// s too: c's key is authorized here and s's host key is added to c's
// known_hosts. A test reaches c through s as a jump host this way.
func (s *Server) Admit(c *Server) error {
	pub, err := os.ReadFile(c.ClientKey + ".pub")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "authorized_keys"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(pub)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return writeKnownHost(c.KnownHostsPath(), s.Port, s.HostKey)
}

// Pid is the listening sshd's pid.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Connections returns the pids of the per-connection sshd processes: the
// listener's descendants that are sshd (privilege separation makes two or
// three a connection), not the commands they run.
func (s *Server) Connections() []int {
	children := map[int][]int{}
	for _, p := range process.Table() {
		children[p.PPid] = append(children[p.PPid], p.Pid)
	}
	var out []int
	queue := append([]int(nil), children[s.Pid()]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if exe, ok := testsupport.Exe(pid); !ok || exe != Binary {
			continue // a command, or gone
		}
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// KillConnections SIGKILLs every per-connection sshd: the transport of
// every client connection is cut, while the commands they started stay
// (orphaned) for the test to find and clean up. It returns how many
// processes it killed.
func (s *Server) KillConnections() int {
	pids := s.Connections()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// Stop kills sshd and its connections and waits for it.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		// Let the listener reap its connections first: orphaned zombies
		// would wait for init.
		s.KillConnections()
		deadline := time.Now().Add(5 * time.Second)
		for s.hasChildren() && time.Now().Before(deadline) {
			select {
			case <-s.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		s.kill()
	})
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// hasChildren reports whether the listener has a child, zombies included.
func (s *Server) hasChildren() bool {
	return slices.ContainsFunc(process.Table(), func(p process.Info) bool { return p.PPid == s.Pid() })
}

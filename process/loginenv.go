package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"

	"github.com/mevedel/mevedel-exec/internal/envlist"
	"golang.org/x/sys/unix"
)

// A login shell can cost most of a second (a profile that runs `pyenv init`
// measured 0.7 s here). LoginEnv runs the user's login shell once, keeps the
// environment it exports, and runs it again only when a profile file
// changes; each command then starts with that environment and a plain
// bash -c, paying a few milliseconds.
//
// Carried over: every exported variable, exported functions included (bash
// exports them as BASH_FUNC_name%% variables). Not carried over: shell
// variables that were not exported, aliases, functions that were not
// exported, and shell options (set -o, shopt).
type LoginEnv struct {
	bash    string
	base    []string // the helper's own environment, the capture's input
	timeout time.Duration
	life    context.Context // the session's; its end stops a capture
	wg      sync.WaitGroup  // the capture goroutine

	mu        sync.Mutex
	vars      []string      // guarded by mu; the last capture
	signature string        // guarded by mu; profile files as seen by that capture
	capturing chan struct{} // guarded by mu; non-nil while a capture runs

	dmu      sync.Mutex
	dirKey   [3]int64 // guarded by dmu; /etc/profile.d's inode and mtime when listed
	dirFiles []string // guarded by dmu; its listing then
}

// captureTimeout bounds a hung profile; the helper's own environment is
// used then.
const captureTimeout = 15 * time.Second

// captureDrain bounds the wait for the environment's end once the login
// shell and what it left are gone.
const captureDrain = 2 * time.Second

// NewLoginEnv captures with bash; the end of life (the session's) stops a
// capture in progress.
func NewLoginEnv(life context.Context, bash string) *LoginEnv {
	return &LoginEnv{bash: bash, base: os.Environ(), timeout: captureTimeout, life: life}
}

// profileFiles are the files bash reads as a login shell, plus the rc files
// that Debian's profiles source. The listing of /etc/profile.d is read
// again only when the directory changed (its entries did).
func (l *LoginEnv) profileFiles(home string) []string {
	files := []string{"/etc/profile", "/etc/bash.bashrc", "/etc/environment"}
	var st unix.Stat_t
	if unix.Stat(profileDir, &st) == nil {
		key := [3]int64{int64(st.Ino), st.Mtim.Sec, st.Mtim.Nsec}
		l.dmu.Lock()
		if l.dirKey != key || l.dirFiles == nil {
			m, _ := filepath.Glob(profileDir + "/*")
			l.dirKey, l.dirFiles = key, append([]string{}, m...)
		}
		files = append(files, l.dirFiles...)
		l.dmu.Unlock()
	}
	for _, f := range []string{".bash_profile", ".bash_login", ".profile", ".bashrc"} {
		files = append(files, filepath.Join(home, f))
	}
	return files
}

const profileDir = "/etc/profile.d"

func (l *LoginEnv) currentSignature() string {
	home := envlist.Value(l.base, "HOME")
	var b []byte
	for _, f := range l.profileFiles(home) {
		var st unix.Stat_t
		if unix.Stat(f, &st) != nil {
			continue
		}
		b = append(b, f...)
		for _, n := range []int64{st.Mtim.Sec, st.Mtim.Nsec, st.Size, int64(st.Ino)} {
			b = strconv.AppendInt(append(b, ':'), n, 10)
		}
		b = append(b, ';')
	}
	return string(b)
}

// Get returns the login environment, capturing it first when there is none
// yet or a profile file changed. Concurrent callers share one capture; a
// caller whose ctx ends stops waiting and gets the best environment known.
func (l *LoginEnv) Get(ctx context.Context) []string {
	for {
		sig := l.currentSignature()
		l.mu.Lock()
		if l.vars != nil && l.signature == sig {
			vars := l.vars
			l.mu.Unlock()
			return vars
		}
		ch := l.capturing
		if ch == nil && l.life.Err() == nil {
			ch = make(chan struct{})
			l.capturing = ch
			l.wg.Add(1)
			go l.run(sig, ch)
		}
		l.mu.Unlock()
		if ch == nil {
			return l.fallback()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return l.fallback()
		}
	}
}

func (l *LoginEnv) run(sig string, done chan struct{}) {
	defer l.wg.Done()
	vars, err := l.capture()
	if err != nil {
		logf("capturing the login environment: %v; using the helper's own environment", err)
		vars = l.base
	}
	l.mu.Lock()
	l.vars, l.signature, l.capturing = vars, sig, nil
	l.mu.Unlock()
	close(done)
}

// Wait waits for a capture in progress (the end of life stops it).
func (l *LoginEnv) Wait() { l.wg.Wait() }

func (l *LoginEnv) fallback() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.vars != nil {
		return l.vars
	}
	return l.base
}

// capture runs bash as a login shell and reads its exported environment
// from a private pipe (fd 3), so whatever the profile prints is ignored.
func (l *LoginEnv) capture() ([]string, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	tag := statedir.TagVar + "=login-env-" + rand.Text()
	cmd := exec.Command(l.bash, "-l", "-c", "env -0 >&3")
	cmd.Env = append(l.base[:len(l.base):len(l.base)], tag)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if home := envlist.Value(l.base, "HOME"); home != "" {
		cmd.Dir = home
	}
	c, tree, err := Spawn(cmd, tag)
	if err != nil {
		pw.Close()
		return nil, err
	}
	pw.Close()
	pid := c.pid

	type result struct {
		data []byte
		err  error
	}
	read := make(chan result, 1)
	go func() {
		var buf bytes.Buffer
		_, err := buf.ReadFrom(pr)
		read <- result{buf.Bytes(), err}
	}()
	waited := make(chan error, 1)
	go func() {
		if st := c.wait(); st.Signaled() || st.ExitStatus() != 0 {
			waited <- fmt.Errorf("login shell: %s", exitText(st))
			return
		}
		waited <- nil
	}()

	timer := time.NewTimer(l.timeout)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-waited:
	case <-timer.C:
		werr = fmt.Errorf("login shell did not finish within %v (%w)", l.timeout, stopGroup(pid, waited))
	case <-l.life.Done():
		werr = fmt.Errorf("session ended during the capture (%w)", stopGroup(pid, waited))
	}
	// Anything the profile left running (an agent, a daemon) goes too.
	killTree(pid, tree)
	// Every writer of the pipe is gone now, so the reader reaches EOF by
	// itself; closing the pipe first could throw away an environment that
	// is already in it. Only a holder we could not kill is waited out.
	var res result
	select {
	case res = <-read:
	case <-time.After(captureDrain):
		pr.Close()
		res = <-read
	}
	if werr != nil {
		return nil, werr
	}
	if res.err != nil && !errors.Is(res.err, os.ErrClosed) {
		return nil, res.err
	}
	return envlist.Parse0(res.data, statedir.TagVar), nil
}

// stopGroup ends a login shell politely (a profile killed mid-way may leave
// locks behind), then for good, and returns its wait error.
func stopGroup(pid int, waited <-chan error) error {
	_ = unix.Kill(-pid, unix.SIGTERM)
	select {
	case err := <-waited:
		return err
	case <-time.After(2 * time.Second):
		_ = unix.Kill(-pid, unix.SIGKILL)
		return <-waited
	}
}

// killTree kills what remains of a group and its tree, without waiting.
func killTree(pgid int, tree *Tree) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
	for _, m := range tree.Members() {
		_ = unix.Kill(m.Pid, unix.SIGKILL)
	}
}

// exitText says how a wait status ended, as os/exec would.
func exitText(st unix.WaitStatus) string {
	if st.Signaled() {
		return "signal: " + unix.SignalName(st.Signal())
	}
	return fmt.Sprintf("exit status %d", st.ExitStatus())
}

// MergeEnv layers environments: later layers override earlier keys.
func MergeEnv(layers ...[]string) []string {
	idx := map[string]int{}
	var out []string
	for _, layer := range layers {
		for _, kv := range layer {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// LookBash finds bash where Debian and others put it.
func LookBash() (string, error) {
	for _, p := range []string{"/bin/bash", "/usr/bin/bash"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("bash"); err == nil {
		return p, nil
	}
	return "", errors.New("bash not found")
}

var logger = log.New(os.Stderr, "mevedel-exec: ", log.LstdFlags|log.Lmicroseconds)

// SetLogger sets where the package logs (stderr by default).
func SetLogger(l *log.Logger) { logger = l }

func logf(format string, args ...any) { logger.Printf(format, args...) }

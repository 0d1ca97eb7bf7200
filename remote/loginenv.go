package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"

	"github.com/mevedel/mevedel-exec/internal/envlist"
	"golang.org/x/crypto/ssh"
)

// envCall is one capture of a connection's login environment, shared by
// concurrent callers and kept for the connection's life.
type envCall struct {
	done chan struct{} // closed once, when env or err is set
	env  []string
	err  error
}

// loginEnvTimeout bounds a hung remote profile.
const loginEnvTimeout = 15 * time.Second

// sshdOwn describe the capture's own SSH session rather than a
// command's. With them set and SHLVL unset, bash takes itself for a shell
// started by sshd and reads ~/.bashrc for every command.
var sshdOwn = []string{"SSH_CLIENT", "SSH2_CLIENT", "SSH_TTY"}

// LoginEnv returns the remote user's login environment: what `bash -l`
// exports on the host, captured once per connection (a reconnection
// captures again). Profile output is discarded; anything the profile left
// running is killed.
func (p *Pool) LoginEnv(ctx context.Context, t Target) ([]string, error) {
	r, err := p.resolve(t)
	if err != nil {
		return nil, err
	}
	if r.Stream() {
		return nil, notSSH(r, "a login environment")
	}
	c, err := p.anyConn(ctx, r)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e := c.env
	if e == nil {
		e = &envCall{done: make(chan struct{})}
		c.env = e
		started := p.spawn(func() {
			e.env, e.err = p.captureEnv(r)
			if e.err != nil {
				c.mu.Lock()
				if c.env == e {
					c.env = nil // the next caller tries again
				}
				c.mu.Unlock()
			}
			close(e.done)
		})
		if !started {
			c.env = nil
			c.mu.Unlock()
			return nil, errClosed
		}
	}
	c.mu.Unlock()
	select {
	case <-e.done:
		return e.env, e.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// envEnd ends the capture's output: env -0 never prints an entry without
// '=', so a daemon started by the profile and holding the channel open
// cannot keep the capture waiting.
const (
	envBegin = "MEVEDEL-EXEC-ENV-BEGIN"
	envEnd   = "MEVEDEL-EXEC-ENV-END"
)

func (p *Pool) captureEnv(r resolved) ([]string, error) {
	ctx, cancel := context.WithTimeout(p.life, loginEnvTimeout)
	defer cancel()
	tag := statedir.TagVar + "=login-env-" + rand.Text()
	// The login shell that runs this may print (rc files) before it: the
	// environment starts after envBegin.
	inner := `printf '\0%s\0' ` + envBegin + ` >&3; env -0 >&3; printf '%s\0' ` + envEnd + ` >&3`
	cmd := "unset SSH_CLIENT SSH2_CLIENT; exec env " + shq(tag) + " bash -l -c " + shq(inner) + " 3>&1 >/dev/null 2>&1 </dev/null"
	out, err := p.capture(ctx, r, cmd, []byte("\x00"+envEnd+"\x00"))
	if err == nil {
		var found bool
		if _, out, found = bytes.Cut(out, []byte("\x00"+envBegin+"\x00")); !found {
			err = errors.New("no environment in the output")
		}
	}
	// Anything the profile left running (an agent, a daemon) goes too.
	kctx, kcancel := context.WithTimeout(p.life, p.cfg.DialTimeout)
	_ = p.withSession(kctx, r, (*conn).hasController, func(c *conn) error {
		_, err := c.control(kctx, controlRequest(Identity{Tag: tag}, actKillTag, "KILL"))
		return err
	})
	kcancel()
	if err != nil {
		return nil, fmt.Errorf("remote: %s: capturing the login environment: %w", r.Target, err)
	}
	return envlist.Parse0(out, append([]string{statedir.TagVar}, sshdOwn...)...), nil
}

// maxCapture bounds what capture keeps.
const maxCapture = 8 << 20

// capture runs command on its own channel and returns its output up to
// the first occurrence of end, without waiting for it to exit: a daemon
// that inherited the output cannot hold it up.
func (p *Pool) capture(ctx context.Context, r resolved, command string, end []byte) ([]byte, error) {
	c, ch, reqs, err := p.channel(ctx, r)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()
	var stderr capped
	if !p.spawn(func() {
		ssh.DiscardRequests(reqs)
		c.closed()
	}) || !p.spawn(func() { _, _ = io.Copy(&stderr, ch.Stderr()) }) {
		ch.Close()
		return nil, errClosed
	}
	defer ch.Close()
	ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{command}))
	if err == nil && !ok {
		err = errors.New("exec request refused")
	}
	if err != nil {
		return nil, roundTripError(c, r, err)
	}
	_ = ch.CloseWrite()
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := ch.Read(buf)
		out = append(out, buf[:n]...)
		if i := bytes.Index(out, end); i >= 0 {
			return out[:i], nil
		}
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case len(out) > maxCapture:
			return nil, fmt.Errorf("more than %d bytes of output", maxCapture)
		case err == io.EOF:
			msg := strings.TrimSpace(string(bytes.ToValidUTF8(stderr.Bytes(), nil)))
			return nil, roundTripError(c, r, fmt.Errorf("output ended early: %s", msg))
		case err != nil:
			return nil, roundTripError(c, r, err)
		}
	}
}

// Package client is the one client of the helper that Go code uses: the
// `run` command, the end-to-end tests and the benchmark. It starts
// `mevedel-exec serve` as a child and speaks JSON-RPC over its stdio, or
// connects to a helper serving a unix socket (`serve --listen`); requests
// are typed calls, and notifications go to a handler the caller supplies.
//
// It also starts a helper without a connection (Spawn, for `serve
// --listen`) or with bare pipes (SpawnPiped, for a test that writes its
// own frames), so every caller starts and stops the child the same way.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/sourcegraph/jsonrpc2"
)

// Options say how to start the helper.
type Options struct {
	Bin    string    // the mevedel-exec binary
	Args   []string  // its arguments; none means "serve"
	Env    []string  // nil: this process's environment
	Dir    string    // "": this process's directory
	Stderr io.Writer // the helper's log; nil discards it
	// OwnGroup starts the helper in its own process group, so a Ctrl-C
	// at the terminal reaches only the caller, which then stops commands
	// through the protocol and shuts the helper down in order.
	OwnGroup bool
	// OwnSession starts the helper as the leader of a session of its
	// own, as an editor starts it.
	OwnSession bool
	// Credential runs the helper as another user (the tests of what
	// holds for an unprivileged uid, run as root).
	Credential *syscall.Credential
}

// Child is a started helper process.
type Child struct {
	cmd    *exec.Cmd
	stdin  *os.File // our ends of its stdio, nil unless piped
	stdout *os.File
	exited chan struct{} // closed once the process has been waited for
}

// Spawn starts the helper with its stdin and stdout on /dev/null.
func Spawn(o Options) (*Child, error) {
	return spawn(o, false)
}

// SpawnPiped starts the helper with pipes on its stdin and stdout, for a
// caller that frames messages itself; Stdin and Stdout are its ends.
func SpawnPiped(o Options) (*Child, error) {
	return spawn(o, true)
}

func spawn(o Options, piped bool) (*Child, error) {
	args := o.Args
	if len(args) == 0 {
		args = []string{"serve"}
	}
	cmd := exec.Command(o.Bin, args...)
	cmd.Env, cmd.Dir, cmd.Stderr = o.Env, o.Dir, o.Stderr
	if o.OwnGroup || o.OwnSession || o.Credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: o.OwnGroup, Setsid: o.OwnSession, Credential: o.Credential}
	}
	// A descendant that inherited the helper's stderr must not keep Wait
	// from returning once the helper itself is gone.
	cmd.WaitDelay = 5 * time.Second
	c := &Child{cmd: cmd, exited: make(chan struct{})}
	var theirs []*os.File
	if piped {
		// Plain pipes rather than StdinPipe/StdoutPipe: Wait would close
		// the read end under a reader still taking the helper's last
		// bytes; here the reader closes it after it has seen EOF.
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout = inR, outW
		c.stdin, c.stdout = inW, outR
		theirs = []*os.File{inR, outW}
	}
	err := cmd.Start()
	for _, f := range theirs {
		f.Close()
	}
	if err != nil {
		if piped {
			c.stdin.Close()
			c.stdout.Close()
		}
		return nil, fmt.Errorf("starting the helper: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Pid is the helper's pid.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Kill sends SIGKILL to the helper.
func (c *Child) Kill() error { return c.cmd.Process.Kill() }

// Exited is closed once the helper has exited and been waited for.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// ExitCode is the helper's exit code once Exited is closed (-1 when a
// signal ended it).
func (c *Child) ExitCode() int {
	<-c.exited
	return c.cmd.ProcessState.ExitCode()
}

// Stdin is the write end of the helper's stdin (nil unless piped).
func (c *Child) Stdin() io.WriteCloser { return c.stdin }

// Stdout is the read end of the helper's stdout (nil unless piped).
func (c *Child) Stdout() io.ReadCloser { return c.stdout }

// ErrNoExit says the helper had to be killed: it did not exit in time.
var ErrNoExit = errors.New("the helper did not exit in time and was killed")

// Wait waits up to bound for the helper to exit; past it the helper is
// killed, and Wait returns ErrNoExit once it is gone.
func (c *Child) Wait(bound time.Duration) error {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-c.exited:
		return nil
	case <-t.C:
	}
	_ = c.Kill()
	<-c.exited
	return ErrNoExit
}

// Notification is one notification from the helper.
type Notification struct {
	Method string
	Params json.RawMessage
}

// Handler receives notifications on the connection's read loop, in
// arrival order, with the client they came on. It must not block, and
// must not make a call on that client from the loop (its reply would
// never be read).
type Handler func(*Client, Notification)

// Client is one connection to a helper.
type Client struct {
	conn  *jsonrpc2.Conn
	st    *stream
	child *Child // nil when dialled
}

// Start starts the helper and connects to its stdio. A nil handler
// ignores notifications.
func Start(o Options, h Handler) (*Client, error) {
	child, err := SpawnPiped(o)
	if err != nil {
		return nil, err
	}
	c := &Client{child: child}
	st := newStream(pipes{child.stdout, child.stdin})
	c.st = st
	c.conn = jsonrpc2.NewConn(context.Background(), st, c.handler(h), st.attach())
	return c, nil
}

// Dial connects to a helper serving the unix socket at path. A nil
// handler ignores notifications.
func Dial(ctx context.Context, path string, h Handler) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	c := &Client{}
	st := newStream(nc)
	c.st = st
	c.conn = jsonrpc2.NewConn(context.Background(), st, c.handler(h), st.attach(),
		// Socket clients drop connections on purpose (a reattaching
		// client): a reply to a request cut off by the drop, or the read
		// the drop ends, is expected and not worth the library's log line.
		jsonrpc2.SetLogger(log.New(io.Discard, "", 0)))
	return c, nil
}

func (c *Client) handler(h Handler) jsonrpc2.Handler {
	return handlerFunc(func(ctx context.Context, conn *jsonrpc2.Conn, r *jsonrpc2.Request) {
		if !r.Notif {
			// The helper sends no requests; answer one rather than leave it pending.
			_ = conn.ReplyWithError(ctx, r.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "the client serves no requests"})
			return
		}
		if h == nil {
			return
		}
		var p json.RawMessage
		if r.Params != nil {
			p = append(p, *r.Params...)
		}
		h(c, Notification{r.Method, p})
	})
}

type handlerFunc func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request)

func (f handlerFunc) Handle(ctx context.Context, conn *jsonrpc2.Conn, r *jsonrpc2.Request) {
	f(ctx, conn, r)
}

// Call sends a request and decodes its result into result (which may be
// nil). An error answer is a *jsonrpc2.Error; opts can pick the id.
func (c *Client) Call(ctx context.Context, method string, params, result any, opts ...jsonrpc2.CallOption) error {
	return c.refusedOr(c.conn.Call(ctx, method, params, result, opts...))
}

// Dispatch sends a request and returns at once; the Waiter gets its reply.
func (c *Client) Dispatch(ctx context.Context, method string, params any, opts ...jsonrpc2.CallOption) (jsonrpc2.Waiter, error) {
	w, err := c.conn.DispatchCall(ctx, method, params, opts...)
	return w, c.refusedOr(err)
}

// refusedOr is err, or, when the helper refused this connection, the
// refusal: a request cut off by the close that follows it says why.
func (c *Client) refusedOr(err error) error {
	if err != nil && c.st != nil {
		if r := c.st.refusal(); r != nil {
			return r
		}
	}
	return err
}

// Notify sends a notification ($/cancelRequest, say).
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	return c.conn.Notify(ctx, method, params)
}

// Child is the helper this client started, or nil when it dialled one.
func (c *Client) Child() *Child { return c.child }

// Close drops the connection at once, without a shutdown request. A
// started helper sees EOF on its stdin; a listening one keeps running.
func (c *Client) Close() error { return c.conn.Close() }

// Shutdown ends the helper in order: a shutdown request, then (for a
// started helper) EOF on its stdin and a wait for its exit, each within
// bound; a helper still running after that is killed and ErrNoExit is
// returned. A dialled client only asks for shutdown and drops the
// connection: the listening process is its starter's to wait for.
func (c *Client) Shutdown(bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_ = c.conn.Call(ctx, rpc.MethodShutdown, nil, nil)
	if c.child == nil {
		return c.conn.Close()
	}
	c.child.stdin.Close()
	err := c.child.Wait(bound)
	// Let the read loop take the helper's last bytes and EOF before its
	// pipe is closed under it.
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-c.conn.DisconnectNotify():
	case <-t.C:
	}
	c.conn.Close()
	return err
}

// pipes is a helper's stdio as one stream.
type pipes struct {
	r, w *os.File
}

func (p pipes) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipes) Write(b []byte) (int, error) { return p.w.Write(b) }

func (p pipes) Close() error {
	werr := p.w.Close()
	rerr := p.r.Close()
	if errors.Is(werr, os.ErrClosed) {
		werr = nil // Shutdown closed it first
	}
	return errors.Join(werr, rerr)
}

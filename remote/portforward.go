package remote

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
)

// Forward is a listener on this machine's loopback whose connections are
// carried over a pooled SSH connection (direct-tcpip channels, as ssh -L
// makes them) to a port on the host, or for a container over its host
// agent's stream (a tunnel of agent/tunnel.go).
type Forward struct {
	ln   net.Listener
	done chan struct{}  // closed once, at Close
	wg   sync.WaitGroup // forwarded connections

	mu     sync.Mutex
	closed bool // guarded by mu; no connection is added once set
}

// Forward opens 127.0.0.1:0 here and forwards each connection to
// host:port as seen from t (host is an address of the host, usually
// 127.0.0.1). It fails when the connection to t cannot be had.
func (p *Pool) Forward(ctx context.Context, t Target, host string, port int) (*Forward, error) {
	r, err := p.resolve(t)
	if err != nil {
		return nil, err
	}
	// A stream target's agent carries the connections (a container's
	// ports are in its own network); sudo on an SSH host has the host's.
	tunnel := r.Stream() && r.jump == nil
	if r.Stream() && !tunnel {
		r = *r.jump
	}
	if tunnel {
		if _, err := p.streamAgent(ctx, r); err != nil {
			return nil, err
		}
	} else if _, err := p.anyConn(ctx, r); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forward{ln: ln, done: make(chan struct{})}
	dest := net.JoinHostPort(host, strconv.Itoa(port))
	carry := f.carry
	if tunnel {
		carry = f.carryByAgent
	}
	started := p.spawn(func() { f.serve(p, r, dest, carry) })
	if !started {
		ln.Close()
		return nil, errClosed
	}
	// The pool's end closes it too.
	p.spawn(func() {
		select {
		case <-p.life.Done():
			f.Close()
		case <-f.done:
		}
	})
	return f, nil
}

// Addr is the local address, "127.0.0.1:N".
func (f *Forward) Addr() string { return f.ln.Addr().String() }

// Done is closed once the forward is closed.
func (f *Forward) Done() <-chan struct{} { return f.done }

// Close stops listening and ends every forwarded connection; it waits for
// them.
func (f *Forward) Close() error {
	f.mu.Lock()
	first := !f.closed
	f.closed = true
	f.mu.Unlock()
	if first {
		close(f.done)
		f.ln.Close()
	}
	f.wg.Wait()
	return nil
}

func (f *Forward) serve(p *Pool, r resolved, dest string, carry func(*Pool, resolved, string, net.Conn)) {
	for {
		local, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			local.Close()
			return
		}
		f.wg.Add(1)
		f.mu.Unlock()
		go func() {
			defer f.wg.Done()
			carry(p, r, dest, local)
		}()
	}
}

// carry copies one connection both ways until either side ends or the
// forward closes.
func (f *Forward) carry(p *Pool, r resolved, dest string, local net.Conn) {
	defer local.Close()
	ctx, cancel := context.WithCancel(p.life)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { local.Close() })
	defer stop()
	go func() {
		select {
		case <-f.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := p.anyConn(ctx, r)
	if err != nil {
		return
	}
	remote, err := c.client.Dial("tcp", dest)
	if err != nil {
		return
	}
	defer remote.Close()
	context.AfterFunc(ctx, func() { remote.Close() })
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(remote, local)
		if cw, ok := remote.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	})
	_, _ = io.Copy(local, remote)
	if tc, ok := local.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	wg.Wait()
}

// carryByAgent carries one connection through r's host agent, a tunnel
// of its stream, until either side ends it or the forward closes.
func (f *Forward) carryByAgent(p *Pool, r resolved, dest string, local net.Conn) {
	ctx, cancel := context.WithCancel(p.life)
	defer cancel()
	go func() {
		select {
		case <-f.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	cl, err := p.streamAgent(ctx, r)
	if err != nil {
		local.Close()
		return
	}
	done, err := cl.tunnel(ctx, dest, local)
	if err != nil {
		local.Close()
		return
	}
	// Closing the connection ends the tunnel: its reset goes to the agent.
	stop := context.AfterFunc(ctx, func() { local.Close() })
	defer stop()
	<-done
}

package execution

import (
	"context"
	"net"
	"strconv"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/remote"
)

// exec/forward makes a port a remote execution listens on reachable from
// this machine: a listener on 127.0.0.1 here, carried over the pooled SSH
// connection to the port on the host, or for a container over its host
// agent's stream. It lives until exec/unforward, the
// execution's settlement or the session's end, whichever comes first.

// portForwards are a session's forwards.
type portForwards struct {
	mu sync.Mutex
	m  map[forwardKey]*remote.Forward // guarded by mu
}

type forwardKey struct {
	exec string
	port int
}

// Forward answers exec/forward with the local address ("127.0.0.1:N").
// A local execution's port needs no forward: its own address is the
// answer.
func (s *Session) Forward(ctx context.Context, c Caller, id string, port int) (string, error) {
	e, err := s.lookup(c, id)
	if err != nil {
		return "", err
	}
	if port < 1 || port > 65535 {
		return "", fault.New(fault.InvalidParams, "port must be a TCP port (1 to 65535), got %d", port)
	}
	if e.settledNow() {
		return "", fault.New(fault.Refused, "execution %s has already ended; nothing listens for it", id)
	}
	host := "127.0.0.1"
	for _, l := range e.ListeningNow() {
		if l.Port == port {
			switch l.Address {
			case "0.0.0.0", "::", "127.0.0.1", "":
			default:
				host = l.Address // ::1, or one address of the host
			}
			break
		}
	}
	if e.remote == nil || e.remote.named.Method == "sudo" && e.remote.named.Via == "" {
		// sudo runs on this machine: its ports are here.
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	}
	key := forwardKey{id, port}
	s.ports.mu.Lock()
	if fw := s.ports.m[key]; fw != nil {
		s.ports.mu.Unlock()
		return fw.Addr(), nil
	}
	s.ports.mu.Unlock()
	fw, err := e.remote.pool.Forward(ctx, e.remote.named, host, port)
	if err != nil {
		return "", fault.New(fault.Unavailable, "forwarding port %d of %s: %w", port, e.remote.target, err)
	}
	s.ports.mu.Lock()
	if old := s.ports.m[key]; old != nil {
		// A concurrent forward of the same port won.
		s.ports.mu.Unlock()
		fw.Close()
		return old.Addr(), nil
	}
	if s.ports.m == nil {
		s.ports.m = map[forwardKey]*remote.Forward{}
	}
	s.ports.m[key] = fw
	s.ports.mu.Unlock()
	s.Go(func() {
		select {
		case <-e.done:
		case <-s.life.Done():
		case <-fw.Done():
		}
		s.ports.mu.Lock()
		if s.ports.m[key] == fw {
			delete(s.ports.m, key)
		}
		s.ports.mu.Unlock()
		fw.Close()
	})
	return fw.Addr(), nil
}

// Unforward answers exec/unforward: it closes the forward of port.
func (s *Session) Unforward(c Caller, id string, port int) error {
	if _, err := s.lookup(c, id); err != nil {
		return err
	}
	key := forwardKey{id, port}
	s.ports.mu.Lock()
	fw := s.ports.m[key]
	delete(s.ports.m, key)
	s.ports.mu.Unlock()
	if fw == nil {
		return fault.New(fault.NotFound, "execution %s has no forward of port %d", id, port)
	}
	fw.Close()
	return nil
}

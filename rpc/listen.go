package rpc

import (
	"net"
	"time"
)

// ServeListener serves the clients of l one after another. A client that
// leaves without shutdown leaves its sessions running for linger: the
// next client to connect within it gets every pending delivery again.
// With linger 0, or after shutdown, the first disconnect ends it all.
func (s *Server) ServeListener(l net.Listener, linger time.Duration) error {
	defer l.Close()
	for first := true; ; first = false {
		if !first {
			if dl, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
				_ = dl.SetDeadline(time.Now().Add(linger))
			}
		}
		c, err := l.Accept()
		if err != nil {
			if first {
				_ = s.finish()
				return err
			}
			s.logger.Printf("no client came back within %v; shutting down", linger)
			return s.finish()
		}
		s.serveConn(c, c, c, !first)
		c.Close()
		s.mu.Lock()
		down := s.down
		s.mu.Unlock()
		if down || linger <= 0 {
			return s.finish()
		}
		s.logger.Printf("client left without shutdown; keeping sessions for %v", linger)
		s.mgr.SetConnected(false)
	}
}

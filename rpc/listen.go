package rpc

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// extraClientGrace is how long a client that connects while another is
// attached waits for that one to leave (a client reconnecting right after
// it dropped its connection) before it is refused.
const extraClientGrace = 2 * time.Second

// ServeListener serves the clients of l one at a time. A client that
// leaves without shutdown leaves its sessions running for linger: the
// next client to connect within it gets every pending delivery again.
// With linger 0, or after shutdown, the first disconnect ends it all.
// A client that connects while another is attached is refused with an
// error response (-32005) and its connection closed. l is closed on
// return.
func (s *Server) ServeListener(l net.Listener, linger time.Duration) error {
	defer l.Close()
	slot := newSlot()
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				accepted <- err
				slot.shut()
				return
			}
			if why := peerRefusal(c); why != "" {
				go refuse(c, why, s.logger)
				continue
			}
			go slot.admit(c, s.logger)
		}
	}()
	for first := true; ; first = false {
		var lingered <-chan time.Time
		var t *time.Timer
		if !first {
			t = time.NewTimer(linger)
			lingered = t.C
		}
		var c net.Conn
		select {
		case c = <-slot.next:
		case err := <-accepted:
			if first {
				_ = s.finish()
				return err
			}
			s.logger.Printf("rpc: accepting clients: %v; shutting down", err)
			return s.finish()
		case <-lingered:
			if c = slot.takeOrShut(); c == nil {
				s.logger.Printf("no client came back within %v; shutting down", linger)
				return s.finish()
			}
		case <-s.stopped:
		case <-s.aborted:
		}
		if t != nil {
			t.Stop()
		}
		if c == nil {
			if c = slot.takeOrShut(); c != nil {
				refuse(c, "the helper is shutting down", s.logger)
			}
			return s.finish()
		}
		s.serveConn(c, c, c, !first)
		c.Close()
		s.mu.Lock()
		down := s.down
		s.mu.Unlock()
		if down || linger <= 0 {
			slot.shut()
			return s.finish()
		}
		s.logger.Printf("client left without shutdown; keeping sessions for %v", linger)
		s.mgr.SetConnected(false)
		slot.free()
	}
}

// slot is the one client connection a listening helper serves.
type slot struct {
	next chan net.Conn // the client that took the slot, for the serving loop

	mu     sync.Mutex
	taken  bool          // guarded by mu; a client holds the slot or is handed over
	closed bool          // guarded by mu; no client will be served any more
	freed  chan struct{} // guarded by mu; closed (and replaced) when the slot frees or closes
}

func newSlot() *slot {
	return &slot{next: make(chan net.Conn, 1), freed: make(chan struct{})}
}

// admit hands c to the serving loop once the slot is free, waiting up to
// extraClientGrace for the attached client to leave, and refuses it
// otherwise.
func (sl *slot) admit(c net.Conn, logger interface{ Printf(string, ...any) }) {
	grace := time.NewTimer(extraClientGrace)
	defer grace.Stop()
	for {
		sl.mu.Lock()
		switch {
		case sl.closed:
			sl.mu.Unlock()
			refuse(c, "the helper is shutting down", logger)
			return
		case !sl.taken:
			sl.taken = true
			sl.mu.Unlock()
			sl.next <- c // never blocks: one taker at a time, and next holds one
			return
		}
		freed := sl.freed
		sl.mu.Unlock()
		select {
		case <-freed:
		case <-grace.C:
			refuse(c, "another client is attached to this helper, which serves one client at a time", logger)
			return
		}
	}
}

// free lets the next client take the slot.
func (sl *slot) free() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.taken = false
	close(sl.freed)
	sl.freed = make(chan struct{})
}

// shut refuses every client from now on.
func (sl *slot) shut() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if !sl.closed {
		sl.closed = true
		close(sl.freed)
		sl.freed = make(chan struct{})
	}
}

// takeOrShut returns the client that took the slot meanwhile, if one
// did; otherwise it shuts the slot and returns nil.
func (sl *slot) takeOrShut() net.Conn {
	sl.mu.Lock()
	if sl.taken {
		sl.mu.Unlock()
		return <-sl.next // its taker is handing it over
	}
	sl.closed = true
	close(sl.freed)
	sl.freed = make(chan struct{})
	sl.mu.Unlock()
	return nil
}

// refuse answers a client that will not be served with an error response
// (id null, -32005) and closes its connection once it has read it.
func refuse(c net.Conn, why string, logger interface{ Printf(string, ...any) }) {
	logger.Printf("rpc: refusing a client: %s", why)
	body := errorFrame(nil, CodeUnavailable, why)
	_ = c.SetDeadline(time.Now().Add(extraClientGrace))
	_, _ = io.WriteString(c, "Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
	_, _ = c.Write(body)
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		// The client sees the error, then end of input; what it sent is
		// read and dropped, so the close does not reset the connection
		// under it.
		_ = hc.CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	}
	c.Close()
}

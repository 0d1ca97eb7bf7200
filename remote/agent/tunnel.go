package agent

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Tunnels carry TCP connections over the agent's stream, as ssh -L does
// over SSH: the helper forwards a port of an execution that runs where no
// SSH connection reaches (a container). The helper sends MsgDial with an
// address; the host dials it from where it runs (the container's network)
// and answers MsgDialed, empty or why not. Then each side sends what its
// connection reads as data frames of at most TunnelChunk bytes, never
// more than the credit the other side granted; a shut frame when its
// connection has no more to send; a reset to drop the tunnel. Credit
// comes back once the data is written to the receiving side's connection,
// so a slow reader holds back its own tunnel, never the stream that every
// execution's output, signals and probes share.
const (
	MsgDial   byte = 'D' // id: tunnel; payload: the address, host:port
	MsgDialed byte = 'd' // id: tunnel; payload: empty when connected, else why not
)

// The tunnel frames of each direction: upper case to the host, lower
// case from it, as every frame.
const (
	MsgTunnelData  byte = 'T' // id: tunnel; payload: bytes
	MsgTunnelShut  byte = 'F' // id: tunnel; the sender's side reads no more
	MsgTunnelAck   byte = 'A' // id: tunnel; payload: uint32 more bytes the sender may send
	MsgTunnelReset byte = 'Q' // id: tunnel; drop it
)

// TunnelWindow is the data a tunnel may have in flight each way;
// TunnelChunk the largest data frame.
const (
	TunnelWindow = 256 << 10
	TunnelChunk  = 32 << 10
)

// lower is the frame type as the host sends it.
func lower(t byte) byte { return t + 'a' - 'A' }

// Tunnels are one side's tunnels on one stream.
type Tunnels struct {
	w    *Writer
	host bool // this side is the host: it sends the lower case frames

	mu     sync.Mutex
	m      map[uint32]*tunnel // guarded by mu
	closed bool               // guarded by mu; the stream ended
}

// NewTunnels returns the tunnels of the side that writes with w: the host
// agent's (host true) or the helper's.
func NewTunnels(w *Writer, host bool) *Tunnels {
	return &Tunnels{w: w, host: host, m: map[uint32]*tunnel{}}
}

type tunnel struct {
	ts   *Tunnels
	id   uint32
	conn net.Conn
	done chan struct{} // closed when both pumps have ended

	mu       sync.Mutex
	cond     *sync.Cond // on mu: credit, data or an end came
	credit   int64      // guarded by mu; what this side may still send
	queue    [][]byte   // guarded by mu; received, not yet written to conn
	peerShut bool       // guarded by mu; the peer sends no more
	reset    bool       // guarded by mu; dropped, either way
	pumps    int        // guarded by mu; pumps still running
}

// send writes a frame of this side's direction.
func (ts *Tunnels) send(typ byte, id uint32, payload []byte) error {
	if ts.host {
		typ = lower(typ)
	}
	return ts.w.Write(typ, id, payload)
}

// Tunnel is one tunnel, registered before it runs.
type Tunnel struct{ t *tunnel }

// Register makes tunnel id known, so that frames for it are kept from now
// on, before either side may send them; Run then carries conn over it
// until either side ends it, and conn is closed then. Register fails when
// the stream has ended.
func (ts *Tunnels) Register(id uint32, conn net.Conn) (Tunnel, error) {
	t := &tunnel{ts: ts, id: id, conn: conn, done: make(chan struct{}), credit: TunnelWindow, pumps: 2}
	t.cond = sync.NewCond(&t.mu)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return Tunnel{}, errors.New("agent: the stream has ended")
	}
	ts.m[id] = t
	return Tunnel{t}, nil
}

// Run starts carrying the connection.
func (tu Tunnel) Run() {
	go tu.t.readConn()
	go tu.t.writeConn()
}

// Done is closed once a running tunnel has ended, its connection closed.
func (tu Tunnel) Done() <-chan struct{} { return tu.t.done }

// Abort forgets a tunnel that never ran; its connection is the caller's.
func (tu Tunnel) Abort() {
	ts := tu.t.ts
	ts.mu.Lock()
	if ts.m[tu.t.id] == tu.t {
		delete(ts.m, tu.t.id)
	}
	ts.mu.Unlock()
}

// Handle takes a tunnel frame of the other side; it reports whether f is
// one. A frame of a tunnel that ended already is dropped.
func (ts *Tunnels) Handle(f Frame) bool {
	typ := f.Type
	if !ts.host {
		typ -= 'a' - 'A' // the host's frames, read by the helper
	}
	switch typ {
	case MsgTunnelData, MsgTunnelShut, MsgTunnelAck, MsgTunnelReset:
	default:
		return false
	}
	ts.mu.Lock()
	t := ts.m[f.ID]
	ts.mu.Unlock()
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch typ {
	case MsgTunnelData:
		t.queue = append(t.queue, f.Payload)
	case MsgTunnelShut:
		t.peerShut = true
	case MsgTunnelAck:
		if n, ok := CreditOf(f.Payload); ok {
			t.credit += int64(n)
		}
	case MsgTunnelReset:
		t.reset = true
		t.conn.Close() // ends both pumps
	}
	t.cond.Broadcast()
	return true
}

// CloseAll ends every tunnel: the stream has ended.
func (ts *Tunnels) CloseAll() {
	ts.mu.Lock()
	ts.closed = true
	m := ts.m
	ts.m = map[uint32]*tunnel{}
	ts.mu.Unlock()
	for _, t := range m {
		t.mu.Lock()
		t.reset = true
		t.cond.Broadcast()
		t.mu.Unlock()
		t.conn.Close()
	}
}

// drop resets the tunnel from this side: the other side is told, the
// connection closed.
func (t *tunnel) drop() {
	t.mu.Lock()
	first := !t.reset
	t.reset = true
	t.cond.Broadcast()
	t.mu.Unlock()
	if first {
		_ = t.ts.send(MsgTunnelReset, t.id, nil)
	}
	t.conn.Close()
}

// pumpDone forgets the tunnel once both of its pumps have ended.
func (t *tunnel) pumpDone() {
	t.mu.Lock()
	t.pumps--
	last := t.pumps == 0
	t.mu.Unlock()
	if !last {
		return
	}
	t.conn.Close()
	t.ts.mu.Lock()
	if t.ts.m[t.id] == t {
		delete(t.ts.m, t.id)
	}
	t.ts.mu.Unlock()
	close(t.done)
}

// readConn sends what the connection reads, within the credit; at its
// EOF, a shut frame.
func (t *tunnel) readConn() {
	defer t.pumpDone()
	buf := make([]byte, TunnelChunk)
	for {
		t.mu.Lock()
		for t.credit <= 0 && !t.reset {
			t.cond.Wait()
		}
		n := int(min(t.credit, TunnelChunk))
		gone := t.reset
		t.mu.Unlock()
		if gone {
			return
		}
		k, err := t.conn.Read(buf[:n])
		if k > 0 {
			t.mu.Lock()
			t.credit -= int64(k)
			t.mu.Unlock()
			if t.ts.send(MsgTunnelData, t.id, buf[:k]) != nil {
				t.drop()
				return
			}
		}
		if err != nil {
			t.mu.Lock()
			gone := t.reset
			t.mu.Unlock()
			if gone {
				return
			}
			if errors.Is(err, io.EOF) {
				_ = t.ts.send(MsgTunnelShut, t.id, nil)
				return
			}
			t.drop()
			return
		}
	}
}

// writeConn writes what came to the connection and grants the credit
// back; at the peer's shut, it shuts the connection's writing side.
func (t *tunnel) writeConn() {
	defer t.pumpDone()
	for {
		t.mu.Lock()
		for len(t.queue) == 0 && !t.peerShut && !t.reset {
			t.cond.Wait()
		}
		if t.reset {
			t.mu.Unlock()
			return
		}
		if len(t.queue) == 0 { // shut, all written
			t.mu.Unlock()
			if cw, ok := t.conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return
		}
		b := t.queue[0]
		t.queue = t.queue[1:]
		t.mu.Unlock()
		if _, err := t.conn.Write(b); err != nil {
			t.drop()
			return
		}
		if t.ts.send(MsgTunnelAck, t.id, Credit(uint32(len(b)))) != nil {
			t.drop()
			return
		}
	}
}

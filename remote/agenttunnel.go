package remote

import (
	"context"
	"fmt"
	"net"

	"github.com/mevedel/mevedel-exec/remote/agent"
)

// tunnel carries local to addr as the host agent's side reaches it (a
// port of a container, in the container's network) over the agent's
// stream (agent/tunnel.go). It returns once the agent has connected, or
// says why it could not; local is the tunnel's from then on, and closed
// when it ends (the channel returned is closed then).
func (cl *agentClient) tunnel(ctx context.Context, addr string, local net.Conn) (<-chan struct{}, error) {
	w := make(chan string, 1)
	cl.mu.Lock()
	if cl.isDead() {
		cl.mu.Unlock()
		return nil, errAgentLost
	}
	cl.next++
	id := cl.next
	cl.dials[id] = w
	cl.mu.Unlock()
	forget := func() {
		cl.mu.Lock()
		delete(cl.dials, id)
		cl.mu.Unlock()
	}
	// Known before the agent can answer: its data may follow its answer
	// at once.
	tu, err := cl.tunnels.Register(id, local)
	if err != nil {
		forget()
		return nil, errAgentLost
	}
	if err := cl.w.Write(agent.MsgDial, id, []byte(addr)); err != nil {
		forget()
		tu.Abort()
		return nil, errAgentLost
	}
	select {
	case why := <-w:
		if why != "" {
			tu.Abort()
			return nil, fmt.Errorf("remote: %s: connecting to %s there: %s", cl.target.Target, addr, why)
		}
		tu.Run()
		return tu.Done(), nil
	case <-cl.dead:
		forget()
		tu.Abort()
		return nil, errAgentLost
	case <-ctx.Done():
		tu.Abort()
		// The agent may still connect: its tunnel is then reset there.
		go func() {
			select {
			case why := <-w:
				if why == "" {
					_ = cl.w.Write(agent.MsgTunnelReset, id, nil)
				}
			case <-cl.dead:
			}
		}()
		return nil, context.Cause(ctx)
	}
}

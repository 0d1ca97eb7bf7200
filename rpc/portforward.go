package rpc

import (
	"github.com/sourcegraph/jsonrpc2"
)

// exec/forward and exec/unforward: a port a remote execution listens on,
// reachable on this machine's loopback.
const (
	MethodExecForward   = "exec/forward"
	MethodExecUnforward = "exec/unforward"
)

type ExecForwardParams struct {
	SessionID string `json:"sessionId"`
	Authority
	ExecutionID string `json:"executionId"`
	Port        int    `json:"port"`
}

type ExecForwardResult struct {
	LocalAddress string `json:"localAddress"` // 127.0.0.1:N
}

// ExecUnforwardParams closes a forward early.
type ExecUnforwardParams = ExecForwardParams

func (s *Server) execForward(req *jsonrpc2.Request, r *reply) {
	var p ExecForwardParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	// A look at the host's ports and perhaps a dial: off the read loop.
	ctx := r.cancellable()
	sess.Go(func() {
		addr, err := sess.Forward(ctx, c, p.ExecutionID, p.Port)
		r.answer(ExecForwardResult{LocalAddress: addr}, err)
	})
}

func (s *Server) execUnforward(req *jsonrpc2.Request, r *reply) {
	var p ExecUnforwardParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		r.answer(Empty{}, sess.Unforward(c, p.ExecutionID, p.Port))
	})
}

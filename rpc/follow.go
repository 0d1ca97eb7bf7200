package rpc

import (
	"github.com/sourcegraph/jsonrpc2"
)

// MethodExecFollow asks for an execution's listening ports to be watched
// while someone looks at it.
const MethodExecFollow = "exec/follow"

// ExecFollowParams: follow (default true) or undo one follow (false);
// Output streams the new output in exec/output too (or, with follow
// false, undoes such a follow).
type ExecFollowParams struct {
	SessionID string `json:"sessionId"`
	Authority
	ExecutionID string `json:"executionId"`
	Follow      *bool  `json:"follow,omitempty"`
	Output      bool   `json:"output,omitempty"`
}

func (s *Server) execFollow(req *jsonrpc2.Request, r *reply) {
	var p ExecFollowParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	on := p.Follow == nil || *p.Follow
	r.answer(Empty{}, sess.Follow(c, p.ExecutionID, on, p.Output))
}

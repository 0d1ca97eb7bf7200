package rpc

import (
	"github.com/mevedel/mevedel-exec/execution"
	"github.com/sourcegraph/jsonrpc2"
)

// The unknown-outcome gate: the person learns which execution's outcome
// could not be proven, and says when it has looked.
const (
	MethodSessionUnknownOutcome     = "session/unknownOutcome"
	MethodSessionAcknowledgeUnknown = "session/acknowledgeUnknown"
)

type SessionUnknownOutcomeParams struct {
	SessionID string `json:"sessionId"`
}

// SessionUnknownOutcomeResult carries the latest unknown outcome in Facts
// (absent when none) and every one not yet acknowledged in Unknown.
type SessionUnknownOutcomeResult struct {
	Facts   *execution.Facts  `json:"facts,omitempty"`
	Unknown []execution.Facts `json:"unknown"`
}

type SessionAcknowledgeUnknownParams struct {
	SessionID string `json:"sessionId"`
}

type SessionAcknowledgeUnknownResult struct {
	Acknowledged int `json:"acknowledged"`
}

func (s *Server) sessionUnknownOutcome(req *jsonrpc2.Request, r *reply) {
	var p SessionUnknownOutcomeParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	res := SessionUnknownOutcomeResult{Unknown: sess.UnknownOutcome()}
	if n := len(res.Unknown); n > 0 {
		res.Facts = &res.Unknown[n-1]
	}
	r.ok(res)
}

func (s *Server) sessionAcknowledgeUnknown(req *jsonrpc2.Request, r *reply) {
	var p SessionAcknowledgeUnknownParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	r.ok(SessionAcknowledgeUnknownResult{Acknowledged: sess.AcknowledgeUnknown()})
}

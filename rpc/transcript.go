package rpc

import (
	"github.com/mevedel/mevedel-exec/transcript"
	"github.com/sourcegraph/jsonrpc2"
)

// Methods on the session's journal and its history.
const (
	MethodTranscriptRecords    = "transcript/records"
	MethodTranscriptCheckpoint = "transcript/checkpoint"
	MethodSessionCanRewind     = "session/canRewind"
)

type TranscriptRecordsParams struct {
	SessionID string `json:"sessionId"`
	Since     uint64 `json:"since"`
	Limit     int    `json:"limit"`
}

type TranscriptRecordsResult struct {
	Records []transcript.Record `json:"records"`
	Next    uint64              `json:"next"`
}

type TranscriptCheckpointParams struct {
	SessionID string `json:"sessionId"`
}

type TranscriptCheckpointResult struct {
	Seq uint64 `json:"seq"`
	// Journal is the journal's health; a degraded journal answers -32006
	// with the same object in error.data.journal.
	Journal transcript.Health `json:"journal"`
}

type SessionCanRewindParams struct {
	SessionID string `json:"sessionId"`
	Operation string `json:"operation"` // rewind or fork
}

type SessionCanRewindResult struct {
	Allowed bool `json:"allowed"`
}

// The journal is the rendering of the session as a whole, read by Emacs
// itself, so these methods take no owner.

func (s *Server) transcriptRecords(req *jsonrpc2.Request, r *reply) {
	var p TranscriptRecordsParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	// A large journal is much to copy and encode: off the loop. The
	// records of requests handled before it are appended already.
	sess.Go(func() {
		recs, next, err := sess.Records(p.Since, p.Limit)
		r.answer(TranscriptRecordsResult{Records: recs, Next: next}, err)
	})
}

func (s *Server) transcriptCheckpoint(req *jsonrpc2.Request, r *reply) {
	var p TranscriptCheckpointParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	// fsync may take a while: never on the read loop.
	ctx := r.cancellable()
	sess.Go(func() {
		seq, health, err := sess.Checkpoint(ctx)
		if err != nil && health.State != transcript.StateOK {
			err = withData{err, map[string]any{"journal": health}}
		}
		r.answer(TranscriptCheckpointResult{Seq: seq, Journal: health}, err)
	})
}

func (s *Server) sessionCanRewind(req *jsonrpc2.Request, r *reply) {
	var p SessionCanRewindParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	if err := sess.CanRewind(p.Operation); err != nil {
		r.fail(err)
		return
	}
	r.ok(SessionCanRewindResult{Allowed: true})
}

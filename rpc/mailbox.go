package rpc

import (
	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

func (s *Server) monitorStart(req *jsonrpc2.Request, r *reply) {
	var p MonitorStartParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	m, err := sess.StartMonitor(c, execution.MonitorParams{
		Command: p.Command, Argv: p.Argv, Cwd: p.Cwd, Label: p.Label, Filter: p.Filter,
		Persistent: p.Persistent, TimeoutMs: p.TimeoutMs, Env: p.Env, Sandbox: p.Sandbox,
	})
	if err != nil {
		r.fail(err)
		return
	}
	r.ok(m.Info())
}

func (s *Server) monitorStop(req *jsonrpc2.Request, r *reply) {
	var p MonitorStopParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	if err := sess.StopMonitor(c, p.MonitorID, func(m execution.MonitorInfo) { r.ok(m) }); err != nil {
		r.fail(err)
	}
}

func (s *Server) monitorList(req *jsonrpc2.Request, r *reply) {
	var p MonitorListParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	r.ok(MonitorListResult{Monitors: sess.Monitors(c)})
}

func (s *Server) ownerState(req *jsonrpc2.Request, r *reply) {
	var p OwnerStateParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	var busy bool
	switch p.State {
	case "busy":
		busy = true
	case "idle":
	default:
		r.fail(fault.New(fault.InvalidParams, `state must be "busy" or "idle", got %q`, p.State))
		return
	}
	sess.SetOwnerState(ownerOf(p.Owner), busy)
	// The reply follows every wake decided before the change, so a client
	// that got it never sees a wake contradicting busy.
	s.fwd.after(func() { r.ok(Empty{}) })
}

func (s *Server) ownerRetire(req *jsonrpc2.Request, r *reply) {
	var p OwnerRetireParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	owner := ownerOf(p.Owner)
	var res OwnerRetireResult
	switch p.Phase {
	case "":
		res.Frontier = sess.RetireBegin()
		res.Retired, _ = sess.RetireCommit(owner, res.Frontier)
	case "begin":
		res.Frontier = sess.RetireBegin()
	case "commit", "abort":
		if p.Frontier == nil {
			r.fail(fault.New(fault.InvalidParams, "owner/retire %s needs the frontier its begin answered", p.Phase))
			return
		}
		res.Frontier = *p.Frontier
		if p.Phase == "commit" {
			n, err := sess.RetireCommit(owner, res.Frontier)
			if err != nil {
				r.fail(err)
				return
			}
			res.Retired = n
		}
	default:
		r.fail(fault.New(fault.InvalidParams, `phase must be "begin", "commit" or "abort", got %q`, p.Phase))
		return
	}
	s.fwd.after(func() { r.ok(res) })
}

func (s *Server) ownerAttend(req *jsonrpc2.Request, r *reply) {
	var p OwnerAttendParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	n := sess.Attend(ownerOf(p.Owner), p.DeliveryIDs)
	r.ok(OwnerAttendResult{Attended: n})
}

func (s *Server) mailboxAck(req *jsonrpc2.Request, r *reply) {
	var p MailboxAckParams
	sess, ok := s.prepareSession(req, r, &p, &p.SessionID)
	if !ok {
		return
	}
	if p.DeliveryID == "" {
		r.fail(fault.New(fault.InvalidParams, "deliveryId is required"))
		return
	}
	if p.Durable == (p.Error != "") {
		r.fail(fault.New(fault.InvalidParams, "mailbox/ack takes either durable: true or an error, not both or neither"))
		return
	}
	sess.Ack(p.DeliveryID, p.Durable)
	r.ok(Empty{})
}

func ownerOf(o string) string {
	if o == "" {
		return execution.RootOwner
	}
	return o
}

package rpc

import (
	"os"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/execution/analyze"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

// The handlers of the lifecycle and exec/spool methods; each decodes,
// checks, does only non-blocking work on the read loop and hands waiting
// to a goroutine the session owns (see dispatch.go for the table).

func (s *Server) initialize(req *jsonrpc2.Request, r *reply) {
	var p InitializeParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	if p.ProtocolVersion != 0 && p.ProtocolVersion != ProtocolVersion {
		r.fail(fault.New(fault.InvalidParams, "protocol version %d is not supported; this helper speaks version %d", p.ProtocolVersion, ProtocolVersion))
		return
	}
	r.ok(InitializeResult{ServerName: ServerName, ServerVersion: ServerVersion, ProtocolVersion: ProtocolVersion, InstanceID: s.instanceID, Pid: os.Getpid()})
	// While the client opens its session, the login shell runs.
	s.mgr.WarmLoginEnv()
}

func (s *Server) shutdownRequest(req *jsonrpc2.Request, r *reply) {
	wait := s.beginShutdown(false)
	s.goOwned(func() {
		wait()
		r.ok(Empty{})
	})
}

// goOwned runs f on a goroutine the server waits for before it returns.
func (s *Server) goOwned(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Server) sessionOpen(req *jsonrpc2.Request, r *reply) {
	var p SessionOpenParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	if err := execution.CheckRemoteArtifactDir(p.RemoteArtifactDir); err != nil {
		r.fail(err)
		return
	}
	if p.SessionID == "" {
		r.fail(fault.New(fault.InvalidParams, "sessionId is required"))
		return
	}
	if err := execution.CheckDefaults(p.Sandbox, p.Resources); err != nil {
		r.fail(err)
		return
	}
	if err := checkRole(p.Role); err != nil {
		r.fail(err)
		return
	}
	if err := execution.CheckTarget(p.Target); err != nil {
		r.fail(err)
		return
	}
	if s.daemon && s.attachOpen(r, p) {
		return
	}
	// An open may replay a long journal and kill what a crashed helper
	// left (up to 3 s): off the loop, with what names the session held
	// back until it has answered.
	sid := p.SessionID
	s.opening[sid] = true
	ctx := r.cancellable() // bounds the target's description
	s.goOwned(func() {
		info, err := s.mgr.Open(sid, p.StateDir, p.Limits)
		if err == nil {
			if sess, serr := s.mgr.Session(sid); serr == nil {
				sess.SetRemoteArtifactDir(p.RemoteArtifactDir)
				sess.SetDefaults(p.Sandbox, p.Resources)
				ti := sess.DescribeTarget(ctx, p.Target, info.Recovered)
				info.Target = &ti
				s.track(sess)
				if s.daemon {
					s.attachTo(r.p, sess, p.Role)
				}
			}
		}
		r.answer(info, err)
		s.releaseHeld(sid)
	})
}

// attachOpen answers a daemon's session/open of a session it has open
// already: the client attaches to it (same idPrefix, its live executions
// listed). An agent client then gets every pending delivery again. It
// reports false when the session is not open (the caller opens it).
func (s *Server) attachOpen(r *reply, p SessionOpenParams) bool {
	sess, info, ok, err := s.mgr.Attach(p.SessionID, p.StateDir)
	if err != nil {
		r.fail(err)
		return true
	}
	if !ok {
		return false
	}
	// A delivery sent to p may come before this reply, as after a
	// recovering open.
	s.attachTo(r.p, sess, p.Role)
	r.ok(info)
	return true
}

func (s *Server) sessionClose(req *jsonrpc2.Request, r *reply) {
	var p SessionCloseParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	if p.SessionID == "" {
		r.fail(fault.New(fault.InvalidParams, "sessionId is required"))
		return
	}
	if s.daemon {
		switch s.roleIn(r.p, p.SessionID) {
		case "":
			r.fail(fault.New(fault.NotFound, "session %q is not open on this connection", p.SessionID))
			return
		case RoleObserver:
			// An observer leaves; the session goes on for the others.
			s.detach(r.p, p.SessionID)
			r.ok(SessionCloseResult{})
			return
		}
	}
	s.mu.Lock()
	att := s.attached[p.SessionID]
	s.mu.Unlock()
	sess, err := s.mgr.Detach(p.SessionID)
	if err != nil {
		r.fail(err)
		return
	}
	s.goOwned(func() {
		sess.Wait()
		s.untrack(sess)
		s.mu.Lock()
		if att != nil && s.attached[p.SessionID] == att {
			delete(s.attached, p.SessionID) // its clients heard its end
		}
		s.mu.Unlock()
		r.ok(SessionCloseResult{Discarded: sess.Discarded()})
	})
}

func (s *Server) execStart(req *jsonrpc2.Request, r *reply) {
	var p ExecStartParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	var yield *time.Duration
	if p.YieldMs != nil {
		if *p.YieldMs < 0 {
			r.fail(fault.New(fault.InvalidParams, "yieldMs must not be negative"))
			return
		}
		if *p.YieldMs <= maxWaitMs { // beyond that, as good as waiting for the end
			d := time.Duration(*p.YieldMs) * time.Millisecond
			yield = &d
		}
	}
	var timeout time.Duration
	if p.TimeoutMs != nil {
		if *p.TimeoutMs <= 0 {
			r.fail(fault.New(fault.InvalidParams, "timeoutMs must be positive"))
			return
		}
		timeout = time.Duration(min(*p.TimeoutMs, maxTimeoutMs)) * time.Millisecond
	}
	ctx := r.cancellable()
	sess.StartAndAwait(ctx, c, execution.StartParams{
		Command: p.Command, Argv: p.Argv, Stdin: p.Stdin, Cwd: p.Cwd, TTY: p.TTY, Lane: p.Lane, ReadOnly: p.ReadOnly,
		Env: p.Env, Label: p.Label, ToolUseID: p.ToolUseID, Timeout: timeout, Scratch: p.Scratch, Kind: p.Kind,
		ReadyPattern: p.ReadyPattern, ReadyPort: p.ReadyPort,
		Sandbox: p.Sandbox, Resources: p.Resources, Follow: p.Follow,
		NoDelivery: p.Deliver != nil && !*p.Deliver,
	}, yield, p.MaxOutputChars, func(o execution.Observation, err error) { r.answer(o, err) })
}

func (s *Server) execObserve(req *jsonrpc2.Request, r *reply) {
	var p ExecObserveParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	if p.WaitMs < 0 {
		r.fail(fault.New(fault.InvalidParams, "waitMs must not be negative"))
		return
	}
	ctx := r.cancellable()
	err := sess.Observe(ctx, c, p.ExecutionID, p.Chars, time.Duration(min(p.WaitMs, maxWaitMs))*time.Millisecond, p.MaxOutputChars,
		func(o execution.Observation, err error) { r.answer(o, err) })
	if err != nil {
		r.fail(err)
	}
}

func (s *Server) execStop(req *jsonrpc2.Request, r *reply) {
	var p ExecStopParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	if err := sess.Stop(c, p.ExecutionID, p.MaxOutputChars, r.observation); err != nil {
		r.fail(err)
	}
}

func (s *Server) execInterrupt(req *jsonrpc2.Request, r *reply) {
	var p ExecInterruptParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	r.answer(sess.Interrupt(c, p.ExecutionID))
}

func (s *Server) execList(req *jsonrpc2.Request, r *reply) {
	var p ExecListParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	// Listed where the reply goes in the stream of notifications: every
	// exec/changed written before it is older than the listing, and any
	// change after it comes in a later one, so a table seeded by the reply
	// and merged with exec/changed stays true.
	s.fwd.after(func() {
		if p.All {
			r.ok(ExecListResult{Executions: sess.Recent(c)})
			return
		}
		bp := listBufs.Get().(*[]execution.Facts)
		facts := sess.AppendList((*bp)[:0], c)
		r.ok(ExecListResult{Executions: facts}) // encoded before it returns
		clear(facts)                            // holds nothing of them in the pool
		*bp = facts[:0]
		listBufs.Put(bp)
	})
}

// listBufs are the room of listings, reused (see Session.AppendList).
var listBufs = sync.Pool{New: func() any { return new([]execution.Facts) }}

func (s *Server) execStopAll(req *jsonrpc2.Request, r *reply) {
	var p ExecStopAllParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.StopAll(c, func(n int) { r.ok(ExecStopAllResult{Stopped: n}) })
}

func (s *Server) execAnalyze(req *jsonrpc2.Request, r *reply) {
	var p ExecAnalyzeParams
	if err := decode(req, &p); err != nil {
		r.fail(err)
		return
	}
	// Parsing a long command takes a while: off the loop (decode bounded
	// its length).
	s.goOwned(func() {
		res := analyze.Command(p.Command)
		r.ok(ExecAnalyzeResult{Class: string(res.Class), Reasons: res.Reasons})
	})
}

// Reads and greps may inflate and scan much of a log, a glob lists the
// whole directory and a stat may read an index: they run on a session
// goroutine, never on the read loop. What they see was created by
// requests handled before them.

func (s *Server) spoolRead(req *jsonrpc2.Request, r *reply) {
	var p SpoolReadParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		r.answer(sess.ReadLog(c, p.Address, p.Offset, p.Length, p.Line, p.Lines))
	})
}

func (s *Server) spoolGrep(req *jsonrpc2.Request, r *reply) {
	var p SpoolGrepParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	ctx := r.cancellable()
	sess.Go(func() {
		r.answer(sess.GrepLogs(ctx, c, execution.GrepParams{
			Pattern: p.Pattern, Glob: p.Glob, Addresses: p.Addresses, MaxMatches: p.MaxMatches, Context: p.Context,
		}))
	})
}

func (s *Server) spoolGlob(req *jsonrpc2.Request, r *reply) {
	var p SpoolGlobParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		addrs, err := sess.GlobLogs(c, p.Pattern)
		r.answer(SpoolGlobResult{Addresses: addrs}, err)
	})
}

func (s *Server) spoolStat(req *jsonrpc2.Request, r *reply) {
	var p SpoolStatParams
	c, sess, ok := s.prepare(req, r, &p, &p.Authority, &p.SessionID)
	if !ok {
		return
	}
	sess.Go(func() {
		r.answer(sess.StatLog(c, p.Address))
	})
}

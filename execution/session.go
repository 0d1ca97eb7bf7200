package execution

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mevedel/mevedel-exec/execution/analyze"
	"github.com/mevedel/mevedel-exec/internal/envlist"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
)

// Session is one agent conversation's executions.
type Session struct {
	m        *Manager
	id       string              // immutable
	stateDir *statedir.Dir       // immutable; released at close
	prefix   string              // immutable; fresh per open
	limits   Limits              // immutable
	journal  *transcript.Journal // immutable; closed at close
	// life is the session's one lifetime: it ends when the session begins
	// to close (under mu, so no execution registers after that), which
	// also stops a login-environment capture and a remote connect.
	life    context.Context
	endLife context.CancelFunc
	env     *process.LoginEnv
	runner  *process.Local
	sched   scheduler
	wg      sync.WaitGroup // run goroutines and waiting requests

	dir     *spool.Dir  // immutable; logical views of the logs
	retireQ chan string // logs to compress, for the retirer

	mu      sync.Mutex
	owners  map[string]string     // guarded by mu; owner of every execution of this open
	execs   map[string]*Execution // guarded by mu; live and retained
	counter int                   // guarded by mu
	// discarded counts deliveries dropped at close; guarded by mu.
	discarded int
	monitors  map[string]*Monitor // guarded by mu
	monitorN  int                 // guarded by mu
	// unknown holds the final facts of executions whose outcome could not
	// be proven (a lost SSH transport), until the person acknowledges
	// them; guarded by unknownMu, which is taken under any other lock.
	unknownMu sync.Mutex
	unknown   []Facts

	mail *mailbox  // immutable
	att  attention // wake marks

	// listening is set while a goroutine reads the listening ports of
	// executions a listing found stale (see Live).
	listening atomic.Bool

	// changes holds the executions changed since the last exec/changed
	// was written (see TakeChanged).
	chMu    sync.Mutex
	changes map[*Execution]struct{} // guarded by chMu

	remoteDir string // set once at open; see artifactDir

	ports portForwards // exec/forward listeners (portforward.go)
	// The session's sandbox and resource defaults, set once at open.
	sandboxDef   *sandbox.Policy
	resourcesDef *sandbox.Resources
	// backend is the probe of bubblewrap, run once on first need.
	backendOnce sync.Once
	backend     sandbox.Probe
}

// Discarded returns how many pending deliveries the close dropped.
func (s *Session) Discarded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.discarded
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// MaxCommandBytes bounds a command's text: the parser's cost grows with
// nesting, and no hand-written command comes near it.
const MaxCommandBytes = 1 << 20

// StartParams are the inputs of exec/start that shape the execution.
type StartParams struct {
	Command   string   // run by bash -c; exclusive with Argv
	Argv      []string // run directly, no shell
	Cwd       string
	TTY       bool
	Lane      Lane  // "" decides by ReadOnly, else by analysis
	ReadOnly  *bool // the caller's lane decision: true read, false exclusive
	Env       map[string]string
	Label     string
	ToolUseID string
	Stdin     *string       // written to stdin, which is then closed
	Timeout   time.Duration // 0: none; past it the execution is stopped (timed-out)
	Scratch   bool          // a private scratch directory, the cwd unless Cwd is set
	Kind      Kind          // "" is KindBash
	// ReadyPattern (RE2, over output lines) and ReadyPort (TCP): the
	// start yields as soon as a line matches or the process tree listens
	// on the port.
	ReadyPattern string
	ReadyPort    int
	// Sandbox and Resources are laid over the session's defaults.
	Sandbox   *sandbox.Policy
	Resources *sandbox.Resources

	remote *remoteExec // set by StartAndAwait for a TRAMP cwd
}

// Start registers and queues an execution in arrival order; the command
// runs once its lane admits it. It does not block.
func (s *Session) Start(c Caller, p StartParams) (*Execution, error) {
	return s.start(c, p, nil)
}

// start registers an execution; mon is set for a monitor's own command.
func (s *Session) start(c Caller, p StartParams, mon *Monitor) (*Execution, error) {
	command, script, err := p.commandText()
	if err != nil {
		return nil, err
	}
	kind, err := p.Kind.valid()
	if err != nil {
		return nil, err
	}
	if p.Timeout < 0 {
		return nil, fault.New(fault.InvalidParams, "timeoutMs must not be negative")
	}
	if p.Stdin != nil && p.remote != nil {
		return nil, fault.New(fault.InvalidParams, "stdin is not supported on an SSH target yet: put the input in a file on the host")
	}
	if p.Scratch && p.remote != nil {
		return nil, fault.New(fault.InvalidParams, "scratch is only supported on this machine, not on an SSH target")
	}
	ready, err := p.readiness()
	if err != nil {
		return nil, err
	}
	cwd := p.Cwd
	if cwd == "" && !p.Scratch {
		cwd = envlist.Value(os.Environ(), "HOME")
	}
	if cwd != "" && !filepath.IsAbs(cwd) {
		return nil, fault.New(fault.InvalidParams, "cwd must be an absolute path, got %q", p.Cwd)
	}
	target, err := p.target(cwd)
	if err != nil {
		return nil, err
	}
	// What a shell would run is analysed: the command, or the script of an
	// argv that runs a shell with -c; a plain argv has no shell to
	// background anything, so only its lane is classified.
	an := analyze.Command(script)
	if an.Class == analyze.Refused && (len(p.Argv) == 0 || shellScript(p.Argv) != "") {
		return nil, fault.New(fault.Refused, "shell backgrounding is not allowed (%s): run the command in the foreground and pass yieldMs to let it continue in the background", strings.Join(an.Reasons, "; "))
	}
	lane := p.Lane
	switch {
	case lane == "" && p.ReadOnly != nil:
		lane = LaneExclusive
		if *p.ReadOnly {
			lane = LaneRead
		}
	case lane == "":
		lane = LaneExclusive
		if an.Class == analyze.ReadOnly {
			lane = LaneRead
		}
	case lane != LaneRead && lane != LaneExclusive:
		return nil, fault.New(fault.InvalidParams, "lane must be %q or %q, got %q", LaneRead, LaneExclusive, lane)
	case p.ReadOnly != nil && *p.ReadOnly != (lane == LaneRead):
		return nil, fault.New(fault.InvalidParams, "readOnly %v contradicts lane %q", *p.ReadOnly, lane)
	}
	box, err := s.confinement(p)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(p.Env))
	for k, v := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fault.New(fault.InvalidParams, "env: invalid variable %q", k)
		}
		env = append(env, k+"="+v)
	}
	sort.Strings(env)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Err() != nil {
		return nil, fault.New(fault.NotFound, "no open session %q", s.id)
	}
	live := 0
	for _, e := range s.execs {
		if !e.settledNow() {
			live++
		}
	}
	if live >= s.limits.MaxLive {
		return nil, fault.New(fault.Limit, "session %s already has %d live executions (the limit); stop one or wait for one to end", s.id, live)
	}
	if u := s.UnknownOutcome(); len(u) > 0 && lane != LaneRead {
		return nil, fault.New(fault.Refused, "execution %s on %s ended with an unknown outcome (%s): whether it ran cannot be proven, so commands that may change something are refused until the person acknowledges it (session/acknowledgeUnknown); read-only commands still run",
			u[len(u)-1].ExecutionID, u[len(u)-1].Target, u[len(u)-1].Reason)
	}
	if err := s.journalWritable(); err != nil {
		return nil, err
	}
	s.counter++
	id := statedir.ExecutionID(s.prefix, s.counter)
	scratch := ""
	if p.Scratch {
		if scratch, err = s.stateDir.MakeScratch(id); err != nil {
			return nil, err
		}
		if cwd == "" {
			cwd = scratch
		}
	}
	box.scratch = scratch
	sp, err := s.dir.Create(filepath.Base(s.stateDir.LogPath(id)), s.limits.OutputLimitBytes)
	if err != nil {
		removeScratch(scratch)
		return nil, err
	}
	var stdin []byte
	if p.Stdin != nil && !p.TTY {
		stdin = []byte(*p.Stdin)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	now := time.Now()
	e := &Execution{
		s:         s,
		id:        id,
		owner:     c.owner(),
		label:     p.Label,
		remote:    p.remote,
		box:       box,
		spec:      process.Spec{Command: p.Command, Argv: p.Argv, Stdin: stdin, Dir: cwd, Env: env, TTY: p.TTY, Tag: statedir.Tag(id)},
		kind:      kind,
		timeout:   p.Timeout,
		scratch:   scratch,
		sp:        sp,
		grace:     time.Duration(s.limits.GraceMs) * time.Millisecond,
		toolUseID: p.ToolUseID,
		ctx:       ctx,
		cancel:    cancel,
		started:   make(chan struct{}),
		inputs:    make(chan inputReq, maxPendingInput),
		done:      make(chan struct{}),
		retired:   make(chan struct{}),
		unclaimed: make(chan struct{}),
		ready:     ready,
	}
	if p.TTY {
		e.watch = newInputWatch(s.limits)
	}
	e.st = execState{
		facts: Facts{
			ExecutionID:   id,
			SessionID:     s.id,
			Owner:         c.owner(),
			Command:       command,
			Argv:          p.Argv,
			Kind:          kind,
			Label:         p.Label,
			ToolUseID:     p.ToolUseID,
			Cwd:           cwd,
			Target:        target,
			State:         Queued,
			Lane:          lane,
			TTY:           p.TTY,
			QueuedAt:      stamp(now),
			OutputAddress: statedir.LogAddress(id),
			ScratchDir:    scratch,
			TimeoutMs:     p.Timeout.Milliseconds(),
			Sandbox:       box.facts,
			Resources:     box.resFacts,
			Version:       1,
		},
	}
	if p.Stdin != nil && p.TTY {
		// Typed into the terminal once it runs, like input sent then.
		e.inputs <- inputReq{data: []byte(*p.Stdin), done: make(chan error, 1)}
	}
	if mon != nil {
		s.monitorN++
		mon.id = statedir.MonitorID(s.prefix, s.monitorN)
		mon.e = e
		e.monitor = mon
		e.st.facts.MonitorID = mon.id
		s.monitors[mon.id] = mon
	}
	e.ticket = s.sched.enqueue(lane)
	select {
	case <-e.ticket.admitted:
		// Nothing waits ahead of it: its spawn record goes to the disk
		// now, while the rest of the start is made.
		e.journaled = e.beginJournalSpawn()
	default:
	}
	s.execs[id] = e
	s.owners[id] = c.owner()
	s.wg.Add(1)
	go e.run()
	s.changed(e)
	return e, nil
}

// lookup finds an execution visible to c; anything else is "not found".
func (s *Session) lookup(c Caller, id string) (*Execution, error) {
	s.mu.Lock()
	e, ok := s.execs[id]
	s.mu.Unlock()
	if !ok || !c.sees(e.owner) {
		return nil, fault.New(fault.NotFound, "no execution %q", id)
	}
	return e, nil
}

// Go runs f on a goroutine the session waits for at close.
func (s *Session) Go(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// AwaitStart replies to a start request from a session goroutine once the
// execution ends or yields.
func (s *Session) AwaitStart(ctx context.Context, e *Execution, yield *time.Duration, maxChars int, reply func(Observation)) {
	s.Go(func() { reply(e.awaitStart(ctx, yield, maxChars)) })
}

// Observe answers exec/observe. Input is written first; a waiting
// observation replies later from a session goroutine.
func (s *Session) Observe(ctx context.Context, c Caller, id, chars string, wait time.Duration, maxChars int, reply func(Observation, error)) error {
	e, err := s.lookup(c, id)
	if err != nil {
		return err
	}
	var tok *waitToken
	if wait > 0 && !e.settledNow() {
		if tok, err = e.beginWait(ctx); err != nil {
			return err
		}
	} else {
		wait = 0
	}
	var written <-chan error
	if chars != "" {
		if written, err = e.input(chars); err != nil {
			if wait > 0 {
				e.endWait(tok)
			}
			return err
		}
	}
	claims := !c.User
	if wait == 0 && written == nil {
		o := e.observe(ctx, 0, maxChars, claims)
		if o.Final && claims {
			e.readByOwner()
		}
		reply(o, nil)
		return nil
	}
	s.Go(func() {
		if written != nil {
			var werr error
			select {
			case werr = <-written:
			case <-ctx.Done():
				werr = fault.New(fault.Refused, "the request was cancelled while its input waited for execution %s to read it; the input stays queued", id)
			}
			if werr != nil {
				if wait > 0 {
					e.endWait(tok)
				}
				reply(Observation{}, werr)
				return
			}
		}
		o := e.observe(ctx, wait, maxChars, claims)
		if o.Final && claims {
			e.readByOwner()
		}
		if wait > 0 {
			e.endWait(tok) // before the reply, so the caller's next wait is welcome
		}
		reply(o, nil)
	})
	return nil
}

// Stop stops an execution and replies with its final observation once it
// has settled.
func (s *Session) Stop(c Caller, id string, maxChars int, reply func(Observation)) error {
	e, err := s.lookup(c, id)
	if err != nil {
		return err
	}
	claims := !c.User
	if claims {
		e.claimStop()
	}
	e.cancel(&stopCause{term: Stopped, reason: "stopped on request"})
	s.Go(func() {
		<-e.done
		o := e.observation(maxChars, true, claims)
		if claims {
			e.readByOwner()
		}
		reply(o)
	})
	return nil
}

// Interrupt sends Ctrl-C (a signal, never queued behind input) and returns
// fresh facts.
func (s *Session) Interrupt(c Caller, id string) (Facts, error) {
	e, err := s.lookup(c, id)
	if err != nil {
		return Facts{}, err
	}
	if err := e.interrupt(); err != nil {
		return Facts{}, err
	}
	return e.Facts(), nil
}

// List returns live executions visible to c: under model authority the
// owner's yielded ones and its one-shots, helpers and evals, under user
// authority all, ordered by start.
func (s *Session) List(c Caller) []Facts { return s.AppendList(nil, c) }

// AppendList is List appending to out, whose room a caller that lists
// often reuses: a listing of hundreds of facts is otherwise most of what
// the helper allocates, and each collection slows the listings it meets.
func (s *Session) AppendList(out []Facts, c Caller) []Facts {
	n := len(out)
	out = s.appendLive(out)
	kept := slices.DeleteFunc(out[n:], func(f Facts) bool {
		return !c.User && (f.Owner != c.owner() || (!f.Yielded && f.Kind.Yields()))
	})
	return out[:n+len(kept)]
}

// Live returns the facts of every live execution, by start (queued ones
// last, by arrival). Live means not settled in the facts it returns, so a
// listing never holds an execution whose final facts a consumer may
// already have seen.
//
// The listening ports it shows are those last read: reading them for
// hundreds of executions would make one listing in every listenFresh
// tens of milliseconds slow. Those older than listenFresh are read after
// it, off the caller's path, and a change is announced by exec/changed.
func (s *Session) Live() []Facts { return s.appendLive(nil) }

func (s *Session) appendLive(out []Facts) []Facts {
	var stale []*Execution
	n := len(out)
	s.mu.Lock()
	out = slices.Grow(out, len(s.execs))
	if out == nil {
		out = []Facts{} // a listing of none is [], not null
	}
	for _, e := range s.execs {
		if e.settledNow() {
			continue
		}
		f, old := e.factsAsRead()
		if f.State != Settled {
			out = append(out, f)
		}
		if old {
			stale = append(stale, e)
		}
	}
	// Started under mu while the session lives, so that close, which
	// ends the life under mu, waits for it.
	if len(stale) > 0 && s.life.Err() == nil && s.listening.CompareAndSwap(false, true) {
		s.Go(func() {
			defer s.listening.Store(false)
			digests := map[string]uint64{}
			for _, e := range stale {
				if s.life.Err() != nil {
					return
				}
				if e.refreshListening(digests) {
					s.changed(e)
				}
			}
		})
	}
	s.mu.Unlock()
	sortFacts(out[n:])
	return out
}

// sortFacts orders facts as exec/list does: those started by start, then
// the others; ties by id, which is arrival order.
func sortFacts(out []Facts) {
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j] // not copies: a listing sorts hundreds
		if (a.StartedAt == nil) != (b.StartedAt == nil) {
			return a.StartedAt != nil
		}
		if a.StartedAt != nil && !a.StartedAt.Equal(b.StartedAt.Time) {
			return a.StartedAt.Before(b.StartedAt.Time)
		}
		return a.ExecutionID < b.ExecutionID
	})
}

// TakeChanged returns the current facts of every execution changed since
// the last call, in exec/list order, and forgets those changes; ok is
// false when none changed. A settled execution is returned once, with its
// final facts, however often it is marked after: that tells a consumer it
// left the live set. The sink of exec/changed calls it when it writes one,
// so every change made meanwhile joins it.
func (s *Session) TakeChanged() ([]Facts, bool) {
	s.chMu.Lock()
	taken := s.changes
	s.changes = nil
	s.chMu.Unlock()
	if len(taken) == 0 {
		return nil, false
	}
	type pair struct {
		e *Execution
		f Facts
	}
	snap := make([]pair, 0, len(taken))
	for e := range taken {
		snap = append(snap, pair{e, e.Facts()})
	}
	kept := make([]Facts, 0, len(snap))
	s.chMu.Lock()
	for _, p := range snap {
		if p.f.State == Settled {
			if p.e.finalShown {
				continue
			}
			p.e.finalShown = true
		}
		kept = append(kept, p.f)
	}
	s.chMu.Unlock()
	sortFacts(kept)
	return kept, len(kept) > 0
}

// StopAll stops live executions and replies with the count once they
// settled: under user authority without an owner, every one (termination
// stopped); otherwise the owner's own (termination owner-stopped).
func (s *Session) StopAll(c Caller, reply func(int)) {
	all := c.User && c.Owner == ""
	term, reason := OwnerStopped, "every execution of owner "+c.owner()+" was stopped"
	if all {
		term, reason = Stopped, "every execution of the session was stopped"
	}
	s.mu.Lock()
	var targets []*Execution
	for _, e := range s.execs {
		if !e.settledNow() && (all || e.owner == c.owner()) {
			targets = append(targets, e)
		}
	}
	s.mu.Unlock()
	for _, e := range targets {
		e.cancel(&stopCause{term: term, reason: reason})
	}
	s.Go(func() {
		for _, e := range targets {
			<-e.done
		}
		reply(len(targets))
	})
}

// beginClose marks the session closing, stops every live execution
// (session-ended) and any login-environment capture. It does not block.
func (s *Session) beginClose() {
	s.mu.Lock()
	first := s.life.Err() == nil
	s.endLife()
	for _, e := range s.execs {
		e.cancel(&stopCause{term: SessionEnded, reason: "the session was closed"})
	}
	s.mu.Unlock()
	if first {
		// A closing session delivers nothing; what is pending is dropped.
		n := s.mail.close()
		if n > 0 {
			logf("session %s: closed with %d undelivered results (their logs stay)", s.id, n)
			s.journalNotice("", "", fmt.Sprintf("● Session closed with %d undelivered results; their output stays readable", n),
				map[string]any{"kind": "SESSION_CLOSED", "discarded": n})
		}
		s.mu.Lock()
		s.discarded = n
		s.mu.Unlock()
	}
}

// Wait waits for everything the session runs after beginClose, then
// releases the state directory.
func (s *Session) Wait() {
	s.mu.Lock()
	targets := make([]*Execution, 0, len(s.execs))
	for _, e := range s.execs {
		targets = append(targets, e)
	}
	s.mu.Unlock()
	for _, e := range targets {
		<-e.done
	}
	s.mu.Lock()
	for id, e := range s.execs {
		close(e.retired) // ends its retention wait
		delete(s.execs, id)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.env.Wait()
	if err := s.journal.Close(); err != nil {
		logf("session %s: closing the journal: %v", s.id, err)
	}
	s.dir.Close()
	_ = s.stateDir.Release()
}

// settled is called once per execution, after its facts became final.
func (s *Session) settled(e *Execution, f Facts) {
	s.m.events.Settled(f)
	s.changed(e)
	retain := time.Duration(s.limits.RetainMs) * time.Millisecond
	s.Go(func() {
		t := time.NewTimer(retain)
		defer t.Stop()
		select {
		case <-t.C:
		case <-e.retired:
			return
		}
		// A pending delivery keeps the execution observable.
		select {
		case <-e.unclaimed:
		case <-e.retired:
			return
		}
		s.mu.Lock()
		removed := s.execs[e.id] == e
		if removed {
			delete(s.execs, e.id)
			close(e.retired)
		}
		s.mu.Unlock()
		if removed {
			// Nobody can poll it any more: its log may be compressed.
			s.retireLater(e, f.EndedAt.Time)
		}
	})
}

// changed records that e's facts changed (registered, started, yielded,
// stopping, output grew, settled, ...) and tells the sink, which coalesces
// the news per session and takes the changes when it writes them.
func (s *Session) changed(e *Execution) {
	s.chMu.Lock()
	if s.changes == nil {
		s.changes = map[*Execution]struct{}{}
	}
	s.changes[e] = struct{}{}
	s.chMu.Unlock()
	s.m.events.Changed(s)
}

// commandText checks that exactly one of Command and Argv is given and
// returns the command as facts show it and the script a shell would run
// (what analysis reads).
func (p StartParams) commandText() (command, script string, err error) {
	switch {
	case len(p.Argv) > 0 && p.Command != "":
		return "", "", fault.New(fault.InvalidParams, "give either command or argv, not both")
	case len(p.Argv) > 0:
		size := 0
		for i, a := range p.Argv {
			if strings.ContainsRune(a, 0) {
				return "", "", fault.New(fault.InvalidParams, "argv[%d] contains a NUL byte", i)
			}
			size += len(a)
		}
		if p.Argv[0] == "" {
			return "", "", fault.New(fault.InvalidParams, "argv[0] is empty")
		}
		if size > MaxCommandBytes {
			return "", "", fault.New(fault.InvalidParams, "argv is %d bytes; the limit is %d", size, MaxCommandBytes)
		}
		command = shellWords(p.Argv)
		if s := shellScript(p.Argv); s != "" {
			return command, s, nil
		}
		return command, command, nil
	case strings.TrimSpace(p.Command) == "":
		return "", "", fault.New(fault.InvalidParams, "command is empty (give command, or argv)")
	case len(p.Command) > MaxCommandBytes:
		return "", "", fault.New(fault.InvalidParams, "command is %d bytes; the limit is %d (put a long script in a file)", len(p.Command), MaxCommandBytes)
	}
	return p.Command, p.Command, nil
}

// shellScript returns the script of an argv that runs a shell with -c
// (bash -c SCRIPT, sh -lc SCRIPT, ...), "" otherwise.
func shellScript(argv []string) string {
	switch filepath.Base(argv[0]) {
	case "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash":
	default:
		return ""
	}
	for i := 1; i < len(argv)-1; i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") || a == "--" {
			return ""
		}
		if !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'c') {
			return argv[i+1]
		}
	}
	return ""
}

// shellWords joins argv into one line a shell would split back into the
// same words, for facts and labels.
func shellWords(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ':' || r == ',' || r == '+' || r == '@' ||
				('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9'))
		}) < 0 {
			words[i] = a
			continue
		}
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}

// removeScratch removes a scratch directory and everything in it, even
// what the command made read-only inside.
func removeScratch(dir string) {
	if dir == "" {
		return
	}
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		logf("removing scratch directory %s: %v", dir, err)
	}
}

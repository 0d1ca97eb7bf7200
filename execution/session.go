package execution

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/execution/analyze"
	"github.com/mevedel/mevedel-exec/internal/envlist"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
	"golang.org/x/sys/unix"
)

var (
	logger = log.New(os.Stderr, "mevedel-exec: ", log.LstdFlags|log.Lmicroseconds)
	// strictTransitions turns an illegal state move into a panic (tests).
	strictTransitions = false
)

// ErrCallerGone is the cause of a request context cancelled because its
// client went away: what such a request would read or claim is left for
// the mailbox.
var ErrCallerGone = errors.New("the client disconnected")

// SetLogger sets where the package logs (stderr by default).
func SetLogger(l *log.Logger) { logger = l }

func logf(format string, args ...any) { logger.Printf(format, args...) }

// Limits bound one session. Zero values mean the defaults.
type Limits struct {
	MaxLive          int   `json:"maxLive,omitempty"`          // if zero, 64
	OutputLimitBytes int64 `json:"outputLimitBytes,omitempty"` // if zero, 64 MiB
	GraceMs          int64 `json:"graceMs,omitempty"`          // if zero, 2000
	RetireAfterMs    int64 `json:"retireAfterMs,omitempty"`    // if zero, 60000
	RetainMs         int64 `json:"retainMs,omitempty"`         // if zero, 60000: how long a settled execution stays observable
	AckTimeoutMs     int64 `json:"ackTimeoutMs,omitempty"`     // if zero, 10000: a delivery without ack is sent again
	RetryMs          int64 `json:"retryMs,omitempty"`          // if zero, 1000: first wait before a resend, doubling to 30 s
}

func (l Limits) withDefaults() Limits {
	if l.MaxLive <= 0 {
		l.MaxLive = 64
	}
	if l.OutputLimitBytes <= 0 {
		l.OutputLimitBytes = spool.DefaultLimit
	}
	if l.GraceMs <= 0 {
		l.GraceMs = 2000
	}
	if l.RetireAfterMs <= 0 {
		l.RetireAfterMs = 60000
	}
	if l.RetainMs <= 0 {
		l.RetainMs = 60000
	}
	return l
}

// Events receives what the manager announces. Implementations must not
// block: they queue and return.
type Events interface {
	// Changed says the live set of s changed.
	Changed(s *Session)
	// Settled carries the final facts of an execution.
	Settled(f Facts)
	// Progress carries facts and the output tail of a running execution
	// that has a toolUseId.
	Progress(f Facts, tail string)
	// Deliver sends one mailbox delivery.
	Deliver(d Delivery)
	// Wake says owner of s may be owed a wake; the sink calls TakeWake
	// when it sends one, so marks made meanwhile coalesce.
	Wake(s *Session, owner string)
}

// RootOwner is the agent's top-level owner: the owner of a request that
// names none, and the only one whose idle state a result may wake.
const RootOwner = "/root"

// Caller is who asks: an owner under model authority, or the user.
type Caller struct {
	Owner string // RootOwner when empty
	User  bool   // user authority: every owner
}

func (c Caller) owner() string {
	if c.Owner == "" {
		return RootOwner
	}
	return c.Owner
}

func (c Caller) sees(owner string) bool { return c.User || c.owner() == owner }

// Manager holds the sessions of one helper.
type Manager struct {
	events Events
	bash   string

	mu        sync.Mutex
	sessions  map[string]*Session // guarded by mu
	down      bool                // guarded by mu; shutting down
	connected bool                // guarded by mu; a client is attached
	// opening holds the ids of sessions whose open is under way (recovery
	// runs without mu); guarded by mu.
	opening map[string]bool

	remote remoteHosts // SSH connections, for the helper's life
}

// NewManager returns a manager that announces through events.
func NewManager(events Events) *Manager {
	bash, err := process.LookBash()
	if err != nil {
		logf("execution: %v", err)
	}
	return &Manager{events: events, bash: bash, sessions: map[string]*Session{}, connected: true}
}

// SetConnected follows the client connection. Deliveries in flight when
// it is lost are restored and sent again to the next client.
func (m *Manager) SetConnected(up bool) {
	m.mu.Lock()
	m.connected = up
	sessions := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		sessions = append(sessions, s)
	}
	m.mu.Unlock()
	for _, s := range sessions {
		s.mail.setConnected(up)
	}
}

// SessionInfo answers session/open.
type SessionInfo struct {
	SessionID string  `json:"sessionId"`
	StateDir  string  `json:"stateDir"`
	IDPrefix  string  `json:"idPrefix"`
	Recovered []Facts `json:"recovered"`
}

// Open opens a session on stateDir, creating it (0700) when missing and
// locking it against other helpers.
func (m *Manager) Open(id, stateDir string, limits Limits) (SessionInfo, error) {
	if id == "" {
		return SessionInfo{}, fault.New(fault.InvalidParams, "sessionId is required")
	}
	if !filepath.IsAbs(stateDir) {
		return SessionInfo{}, fault.New(fault.InvalidParams, "stateDir must be an absolute path, got %q", stateDir)
	}
	stateDir = filepath.Clean(stateDir)
	m.mu.Lock()
	if m.down {
		m.mu.Unlock()
		return SessionInfo{}, fault.New(fault.Unavailable, "the helper is shutting down")
	}
	if _, ok := m.sessions[id]; ok || m.opening[id] {
		m.mu.Unlock()
		return SessionInfo{}, fault.New(fault.Conflict, "session %s is already open", id)
	}
	if m.opening == nil {
		m.opening = map[string]bool{}
	}
	m.opening[id] = true
	m.mu.Unlock()
	// Recovery may have processes to kill: other sessions go on meanwhile.
	lock, journal, recovered, owed, err := prepareStateDir(stateDir, m.reclaimRemote)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.opening, id)
	if err == nil && m.down {
		_ = journal.Close()
		_ = lock.Close()
		err = fault.New(fault.Unavailable, "the helper is shutting down")
	}
	if err != nil {
		return SessionInfo{}, err
	}
	life, endLife := context.WithCancel(context.Background())
	s := &Session{
		m:        m,
		life:     life,
		endLife:  endLife,
		id:       id,
		stateDir: stateDir,
		prefix:   freshPrefix(stateDir),
		limits:   limits.withDefaults(),
		lock:     lock,
		journal:  journal,
		env:      process.NewLoginEnv(life, m.bash),
		execs:    map[string]*Execution{},
		owners:   map[string]string{},
		dir:      spool.NewDir(stateDir),
		retireQ:  make(chan string),
		closed:   make(chan struct{}),
		monitors: map[string]*Monitor{},
	}
	s.runner = &process.Local{Bash: m.bash, Env: s.env}
	s.att.owners = map[string]*ownerMarks{}
	s.mail = newMailbox(s)
	s.mail.connected = m.connected
	m.sessions[id] = s
	// Warm the login environment now, so the first command need not wait.
	s.Go(func() { s.env.Get(life) })
	s.Go(s.retirer)
	s.Go(s.mail.run)
	s.redeliver(owed)
	return SessionInfo{SessionID: id, StateDir: stateDir, IDPrefix: s.prefix, Recovered: recovered}, nil
}

// prepareStateDir makes the state directory, takes its lock, and opens
// its journal, recovering what a previous helper left unsettled.
// The owed deliveries are openJournal's.
func prepareStateDir(stateDir string, onHost remoteKill) (lock *os.File, j *transcript.Journal, recovered, owed []Facts, err error) {
	if err = makePrivateDir(stateDir); err != nil {
		return
	}
	if err = makePrivateDir(filepath.Join(stateDir, "executions")); err != nil {
		return
	}
	if lock, err = lockStateDir(stateDir); err != nil {
		return
	}
	if j, recovered, owed, err = openJournal(stateDir, onHost); err != nil {
		_ = lock.Close()
		return nil, nil, nil, nil, err
	}
	return
}

func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fault.New(fault.IO, "creating %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fault.New(fault.IO, "%s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fault.New(fault.InvalidParams, "%s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fault.New(fault.IO, "making %s private: %w", dir, err)
		}
	}
	return nil
}

// lockStateDir takes the flock that makes one helper the holder of a state
// directory. The lock belongs to the open file description, so a second
// open in this same process conflicts too.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fault.New(fault.IO, "opening %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fault.New(fault.Conflict, "state directory %s is held by another helper (pid %s)", dir, strings.TrimSpace(string(holder)))
		}
		return nil, fault.New(fault.IO, "locking %s: %w", path, err)
	}
	_ = f.Chmod(0o600)
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// Session looks up an open session.
func (m *Manager) Session(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, fault.New(fault.Unavailable, "the helper is shutting down")
	}
	s, ok := m.sessions[id]
	if !ok {
		return nil, fault.New(fault.NotFound, "no open session %q", id)
	}
	return s, nil
}

// Detach takes a session out of service at once: later requests find no
// such session, and every live execution is told to stop (session-ended).
// Wait then waits for the end of it all.
func (m *Manager) Detach(id string) (*Session, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if ok {
		delete(m.sessions, id)
	}
	m.mu.Unlock()
	if !ok {
		return nil, fault.New(fault.NotFound, "no open session %q", id)
	}
	s.beginClose()
	return s, nil
}

// Close ends a session: every live execution is stopped (session-ended),
// pending deliveries are discarded (the count is returned) and the state
// directory is released; spools stay. It blocks until the executions have
// settled.
func (m *Manager) Close(id string) (int, error) {
	s, err := m.Detach(id)
	if err != nil {
		return 0, err
	}
	s.Wait()
	return s.Discarded(), nil
}

// BeginShutdown refuses new sessions and detaches every open one; the
// caller waits for them with Wait.
func (m *Manager) BeginShutdown() []*Session {
	m.mu.Lock()
	m.down = true
	sessions := make([]*Session, 0, len(m.sessions))
	for id, s := range m.sessions {
		sessions = append(sessions, s)
		delete(m.sessions, id)
	}
	m.mu.Unlock()
	for _, s := range sessions {
		s.beginClose()
	}
	return sessions
}

// Shutdown closes every session and refuses new ones. It blocks until all
// executions have settled.
func (m *Manager) Shutdown() {
	for _, s := range m.BeginShutdown() {
		s.Wait()
	}
}

// Session is one agent conversation's executions.
type Session struct {
	m        *Manager
	id       string              // immutable
	stateDir string              // immutable
	prefix   string              // immutable; fresh per open
	limits   Limits              // immutable
	lock     *os.File            // the state directory's flock; closed at close
	journal  *transcript.Journal // immutable; closed at close
	life     context.Context     // ends when the session begins to close
	endLife  context.CancelFunc
	env      *process.LoginEnv
	runner   *process.Local
	sched    scheduler
	wg       sync.WaitGroup // run goroutines and waiting requests

	dir     *spool.Dir    // immutable; logical views of the logs
	retireQ chan string   // logs to compress, for the retirer
	closed  chan struct{} // closed once, when the session begins to close

	mu      sync.Mutex
	owners  map[string]string     // guarded by mu; owner of every execution of this open
	execs   map[string]*Execution // guarded by mu; live and retained
	counter int                   // guarded by mu
	closing bool                  // guarded by mu
	// discarded counts deliveries dropped at close; guarded by mu.
	discarded int
	monitors  map[string]*Monitor // guarded by mu
	monitorN  int                 // guarded by mu

	mail *mailbox  // immutable
	att  attention // wake marks

	remoteDir string // set once at open; see artifactDir
}

// Discarded returns how many pending deliveries the close dropped.
func (s *Session) Discarded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.discarded
}

func (s *Session) closingNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// maxPendingInput bounds terminal input waiting for a command to read it.
const maxPendingInput = 64

// MaxCommandBytes bounds a command's text: the parser's cost grows with
// nesting, and no hand-written command comes near it.
const MaxCommandBytes = 256 << 10

// StartParams are the inputs of exec/start that shape the execution.
type StartParams struct {
	Command   string
	Cwd       string
	TTY       bool
	Lane      Lane // "" decides by analysis
	Env       map[string]string
	Label     string
	ToolUseID string

	remote *remoteExec // set by StartAndAwait for a TRAMP cwd
}

// Start registers and queues an execution in arrival order; the command
// runs once its lane admits it. It does not block.
func (s *Session) Start(c Caller, p StartParams) (*Execution, error) {
	return s.start(c, p, nil)
}

// start registers an execution; mon is set for a monitor's own command.
func (s *Session) start(c Caller, p StartParams, mon *Monitor) (*Execution, error) {
	if strings.TrimSpace(p.Command) == "" {
		return nil, fault.New(fault.InvalidParams, "command is empty")
	}
	if len(p.Command) > MaxCommandBytes {
		return nil, fault.New(fault.InvalidParams, "command is %d bytes; the limit is %d (put a long script in a file)", len(p.Command), MaxCommandBytes)
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = envlist.Value(os.Environ(), "HOME")
	}
	if !filepath.IsAbs(cwd) {
		return nil, fault.New(fault.InvalidParams, "cwd must be an absolute path, got %q", p.Cwd)
	}
	target, err := p.target(cwd)
	if err != nil {
		return nil, err
	}
	an := analyze.Command(p.Command)
	if an.Class == analyze.Refused {
		return nil, fault.New(fault.Refused, "shell backgrounding is not allowed (%s): run the command in the foreground and pass yieldMs to let it continue in the background", strings.Join(an.Reasons, "; "))
	}
	lane := p.Lane
	switch lane {
	case "":
		lane = LaneExclusive
		if an.Class == analyze.ReadOnly {
			lane = LaneRead
		}
	case LaneRead, LaneExclusive:
	default:
		return nil, fault.New(fault.InvalidParams, "lane must be %q or %q, got %q", LaneRead, LaneExclusive, lane)
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
	if s.closing {
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
	s.counter++
	id := fmt.Sprintf("exec-%s-%06d", s.prefix, s.counter)
	sp, err := spool.Create(filepath.Join(s.stateDir, "executions", id+".log"), s.limits.OutputLimitBytes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	now := time.Now()
	e := &Execution{
		s:         s,
		id:        id,
		remote:    p.remote,
		spec:      process.Spec{Command: p.Command, Dir: cwd, Env: env, TTY: p.TTY, Tag: "MEVEDEL_EXEC_TAG=" + s.prefix + "-" + id},
		sp:        sp,
		grace:     time.Duration(s.limits.GraceMs) * time.Millisecond,
		toolUseID: p.ToolUseID,
		ctx:       ctx,
		cancel:    cancel,
		started:   make(chan struct{}),
		inputs:    make(chan inputReq, maxPendingInput),
		done:      make(chan struct{}),
		retired:   make(chan struct{}),
		delivered: make(chan struct{}),
		facts: Facts{
			ExecutionID:   id,
			SessionID:     s.id,
			Owner:         c.owner(),
			Command:       p.Command,
			Label:         p.Label,
			ToolUseID:     p.ToolUseID,
			Cwd:           cwd,
			Target:        target,
			State:         Queued,
			Lane:          lane,
			TTY:           p.TTY,
			QueuedAt:      stamp(now),
			OutputAddress: "artifact://executions/" + id + ".log",
			Version:       1,
		},
	}
	if mon != nil {
		s.monitorN++
		mon.id = fmt.Sprintf("mon-%s-%06d", s.prefix, s.monitorN)
		mon.e = e
		e.monitor = mon
		e.facts.MonitorID = mon.id
		s.monitors[mon.id] = mon
	}
	e.ticket = s.sched.enqueue(lane)
	s.execs[id] = e
	s.owners[id] = c.owner()
	s.wg.Add(1)
	go e.run()
	s.changed()
	return e, nil
}

// lookup finds an execution visible to c; anything else is "not found".
func (s *Session) lookup(c Caller, id string) (*Execution, error) {
	s.mu.Lock()
	e, ok := s.execs[id]
	s.mu.Unlock()
	if !ok || !c.sees(e.facts.Owner) {
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
	answer := func(o Observation) {
		if o.Final && !c.User {
			e.markRead()
		}
		reply(o, nil)
	}
	if wait == 0 && written == nil {
		answer(e.observe(ctx, 0, maxChars))
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
		o := e.observe(ctx, wait, maxChars)
		if o.Final && !c.User {
			e.markRead()
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
	e.claimStop()
	e.cancel(&stopCause{term: Stopped, reason: "stopped on request"})
	s.Go(func() {
		<-e.done
		o := e.finalObservation(maxChars)
		if !c.User {
			e.markRead()
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
// owner's yielded ones, under user authority all, ordered by start.
func (s *Session) List(c Caller) []Facts {
	out := []Facts{}
	for _, f := range s.Live() {
		if c.User || (f.Owner == c.owner() && f.Yielded) {
			out = append(out, f)
		}
	}
	return out
}

// Live returns the facts of every live execution, by start (queued ones
// last, by arrival).
func (s *Session) Live() []Facts {
	s.mu.Lock()
	var out []Facts
	for _, e := range s.execs {
		if !e.settledNow() {
			out = append(out, e.Facts())
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.StartedAt == nil) != (b.StartedAt == nil) {
			return a.StartedAt != nil
		}
		if a.StartedAt != nil && !a.StartedAt.Equal(b.StartedAt.Time) {
			return a.StartedAt.Before(b.StartedAt.Time)
		}
		return a.ExecutionID < b.ExecutionID
	})
	if out == nil {
		out = []Facts{}
	}
	return out
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
		if !e.settledNow() && (all || e.facts.Owner == c.owner()) {
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
	first := !s.closing
	if first {
		close(s.closed)
	}
	s.closing = true
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
	s.endLife()
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
	_ = s.lock.Close()
}

// settled is called once per execution, after its facts became final.
func (s *Session) settled(e *Execution, f Facts) {
	s.m.events.Settled(f)
	s.changed()
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
		case <-e.delivered:
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

func (s *Session) changed() {
	s.m.events.Changed(s)
}

// freshPrefix draws an id prefix that no spool in stateDir uses yet, so a
// reopened session never reuses an id.
func freshPrefix(stateDir string) string {
	for {
		p := randomLetters(5)
		if m, _ := filepath.Glob(filepath.Join(stateDir, "executions", "exec-"+p+"-*")); len(m) == 0 {
			return p
		}
	}
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// randomLetters returns n random lowercase letters and digits.
func randomLetters(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

package execution

import (
	"context"
	"errors"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/mevedel/mevedel-exec/transcript"
)

var logger = log.New(os.Stderr, "mevedel-exec: ", log.LstdFlags|log.Lmicroseconds)

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
	WaitingAfterMs   int64 `json:"waitingAfterMs,omitempty"`   // if zero, 500: output quiet before a tty command may be waiting for input
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
	if l.WaitingAfterMs <= 0 {
		l.WaitingAfterMs = 500
	}
	return l
}

// Events receives what the manager announces. Implementations must not
// block: they queue and return.
type Events interface {
	// Changed says the live set of s changed.
	Changed(s *Session)
	// Output says e, followed with output, has output to send; the sink
	// calls TakeOutput when it writes exec/output.
	Output(e *Execution)
	// Settled carries the final facts of an execution.
	Settled(f Facts)
	// Progress carries facts and the output tail of a running execution
	// that has a toolUseId.
	Progress(f Facts, tail string)
	// Deliver sends one mailbox delivery.
	Deliver(d Delivery)
	// Delivered says d was durably acknowledged, for passive listeners.
	Delivered(d Delivery)
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

	// env is the login environment of this machine's commands, one for
	// every session: a login shell that takes most of a second runs once
	// per helper, not once per project. It is captured from initialize
	// on, while the client opens its session; the helper's end (life)
	// stops a capture in progress.
	env     *process.LoginEnv
	life    context.Context
	endLife context.CancelFunc

	// hidden are control paths of this helper besides its sessions'
	// state directories (a --listen socket), hidden in every box;
	// guarded by mu.
	hidden []string
}

// Hide adds paths of the helper's own control plane (a --listen socket)
// to what every confined command of every session is kept from.
func (m *Manager) Hide(paths ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hidden = append(m.hidden, paths...)
}

// controlPaths is this helper's control plane as a box hides it: the
// daemon's directories, every open session's state directory, and what
// Hide added. A command confined in one session must not reach another
// session's journal and logs, nor a socket that would start it
// unconfined commands.
func (m *Manager) controlPaths(home string) []string {
	out := sandbox.ControlDirs(home, os.Getenv("XDG_RUNTIME_DIR"))
	m.mu.Lock()
	defer m.mu.Unlock()
	out = append(out, m.hidden...)
	for _, s := range m.sessions {
		out = append(out, s.stateDir.Root)
	}
	return out
}

// NewManager returns a manager that announces through events.
func NewManager(events Events) *Manager {
	bash, err := process.LookBash()
	if err != nil {
		logf("execution: %v", err)
	}
	life, endLife := context.WithCancel(context.Background())
	return &Manager{events: events, bash: bash, sessions: map[string]*Session{}, connected: true,
		env: process.NewLoginEnv(life, bash), life: life, endLife: endLife}
}

// WarmLoginEnv starts capturing the login environment, unless it is known
// or being captured, so that the first command need not wait for it.
func (m *Manager) WarmLoginEnv() {
	go m.env.Get(m.life)
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
	// Journal is the journal's health once recovery is done.
	Journal transcript.Health `json:"journal"`
	// Attached: the session was open in this helper already (a daemon)
	// and the open attached to it; Live then lists its live executions.
	Attached bool    `json:"attached,omitempty"`
	Live     []Facts `json:"live,omitempty"`
	// Target describes the session's target (target.go).
	Target *TargetInfo `json:"target,omitempty"`
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
	rec, err := recoverStateDir(stateDir, m.reclaimRemote)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.opening, id)
	if err == nil && m.down {
		_ = rec.journal.Close()
		_ = rec.dir.Release()
		err = fault.New(fault.Unavailable, "the helper is shutting down")
	}
	if err != nil {
		return SessionInfo{}, err
	}
	dir := rec.dir
	life, endLife := context.WithCancel(context.Background())
	stateDir = dir.Root
	s := &Session{
		m:        m,
		life:     life,
		endLife:  endLife,
		id:       id,
		stateDir: dir,
		prefix:   dir.Prefix,
		limits:   limits.withDefaults(),
		journal:  rec.journal,
		execs:    map[string]*Execution{},
		owners:   rec.owners,
		unknown:  rec.unknown,
		dir:      spool.NewDir(stateDir),
		retireQ:  make(chan string),
		monitors: map[string]*Monitor{},
	}
	s.runner = &process.Local{Bash: m.bash, Env: m.env, Direct: true}
	s.att.owners = map[string]*ownerMarks{}
	s.mail = newMailbox(s)
	s.mail.connected = m.connected
	m.sessions[id] = s
	// Warm the login environment now, so the first command need not wait.
	m.WarmLoginEnv()
	s.Go(s.retirer)
	s.Go(s.mail.run)
	s.redeliver(rec.owed)
	return SessionInfo{SessionID: id, StateDir: stateDir, IDPrefix: s.prefix, Recovered: rec.recovered, Journal: rec.journal.Health()}, nil
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
	m.endLife() // no command starts now: a capture under way stops
	return sessions
}

// WaitLoginEnv waits, after BeginShutdown, for the login shell of a
// capture to be gone.
func (m *Manager) WaitLoginEnv() { m.env.Wait() }

// Shutdown closes every session and refuses new ones. It blocks until all
// executions have settled.
func (m *Manager) Shutdown() {
	for _, s := range m.BeginShutdown() {
		s.Wait()
	}
	m.WaitLoginEnv()
}

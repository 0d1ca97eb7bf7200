package execution

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/execution/analyze"
	"github.com/mevedel/mevedel-exec/internal/envlist"
	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// A start, from request to a registered execution in its lane's queue:
// validation, analysis (backgrounding refused, the lane chosen), the
// confinement granted, the spool file, registration, and the journal's
// spawn record begun. run.go takes it from admission on.

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
	// Follow follows it with output from before its first byte, as an
	// exec/follow with output would (follow.go).
	Follow bool
	// NoDelivery: a yielded end is not mailed; the starter watches it
	// (a person's output buffer), so it is held like a foreground end.
	NoDelivery bool

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
	target, method, tier, err := p.where(cwd)
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
	live := int(s.live.Load())
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
		unmailed:  p.NoDelivery,
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
			TargetMethod:  method,
			SupportTier:   tier,
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
	if p.Follow {
		e.countFollow(&e.st, true, true)
	}
	s.execs[id] = e
	s.live.Add(1)
	s.owners[id] = c.owner()
	s.wg.Add(1)
	go e.run()
	if p.Follow {
		s.Go(e.watchStartFollowed)
	}
	s.changed(e)
	return e, nil
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

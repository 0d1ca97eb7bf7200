package execution

import (
	"reflect"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// State is where an execution is in its life.
type State string

const (
	Queued   State = "queued"
	Running  State = "running"
	Stopping State = "stopping"
	Settled  State = "settled"
)

// Termination says how an execution ended.
type Termination string

const (
	Exited       Termination = "exited"
	Signaled     Termination = "signaled"
	Stopped      Termination = "stopped"
	Aborted      Termination = "aborted"
	TimedOut     Termination = "timed-out"
	OutputLimit  Termination = "output-limit"
	SpoolFailed  Termination = "spool-failed"
	SpawnFailed  Termination = "spawn-failed"
	OwnerStopped Termination = "owner-stopped"
	SessionEnded Termination = "session-ended"
	Unknown      Termination = "unknown"
	// ResourceLimit: a resource limit ended the command (facts' limit
	// says which).
	ResourceLimit Termination = "resource-limit"
	Lost          Termination = "lost"
)

// Outcome is success only for an exit with code 0.
type Outcome string

const (
	Success Outcome = "success"
	Failure Outcome = "failure"
)

// Status is what a view shows.
type Status string

const (
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusStopped   Status = "stopped"
	StatusTimedOut  Status = "timed-out"
	StatusLost      Status = "lost"
)

// Classify derives outcome and status from a termination and exit code.
func Classify(t Termination, exitCode *int) (Outcome, Status) {
	switch t {
	case Exited:
		if exitCode != nil && *exitCode == 0 {
			return Success, StatusCompleted
		}
		return Failure, StatusFailed
	case Stopped, Aborted, OwnerStopped, SessionEnded:
		return Failure, StatusStopped
	case TimedOut:
		return Failure, StatusTimedOut
	case Lost:
		return Failure, StatusLost
	default:
		return Failure, StatusFailed
	}
}

// Kind says what an execution is for. Only a bash command yields and makes
// a breadcrumb; one-shots, helpers and evals run to their end.
type Kind string

const (
	KindBash    Kind = "bash"
	KindOneShot Kind = "one-shot"
	KindHelper  Kind = "helper"
	KindEval    Kind = "eval"
)

// valid returns k, KindBash for "", or an error for an unknown kind.
func (k Kind) valid() (Kind, error) {
	switch k {
	case "":
		return KindBash, nil
	case KindBash, KindOneShot, KindHelper, KindEval:
		return k, nil
	}
	return "", fault.New(fault.InvalidParams, "kind must be %q, %q, %q or %q, got %q", KindBash, KindOneShot, KindHelper, KindEval, k)
}

// Yields reports whether an execution of kind k may yield.
func (k Kind) Yields() bool { return k == KindBash || k == "" }

// Lane is the scheduling lane an execution runs in.
type Lane string

const (
	LaneRead      Lane = "read"
	LaneExclusive Lane = "exclusive"
)

// Time marshals as RFC 3339 UTC with milliseconds.
type Time struct{ time.Time }

const timeLayout = "2006-01-02T15:04:05.000Z"

func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format(timeLayout) + `"`), nil
}

func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v, err := time.Parse(`"`+timeLayout+`"`, string(b))
	if err != nil {
		v, err = time.Parse(`"`+time.RFC3339Nano+`"`, string(b))
	}
	t.Time = v
	return err
}

func stamp(t time.Time) *Time { return &Time{t} }

// Incarnation is a target's identity and incarnation as its host agent
// or engine said when a command started there (facts' targetIncarnation).
type Incarnation = remote.Incarnation

// ReasonTargetReplaced is the reason of an execution settled lost because
// its host was found again in another boot: it cannot still run there.
const ReasonTargetReplaced = "target-replaced"

// Facts is an immutable snapshot of one execution; it is also the wire
// shape. Booleans are present only when true; exitCode whenever the process
// exited, 0 included.
type Facts struct {
	ExecutionID   string      `json:"executionId"`
	SessionID     string      `json:"sessionId"`
	Owner         string      `json:"owner"`
	Command       string      `json:"command"`
	Argv          []string    `json:"argv,omitempty"`
	Kind          Kind        `json:"kind"`
	Label         string      `json:"label,omitempty"`
	ToolUseID     string      `json:"toolUseId,omitempty"`
	Cwd           string      `json:"cwd"`
	Target        string      `json:"target"`
	TargetMethod  string      `json:"targetMethod,omitempty"` // a remote cwd's TRAMP method as written (the last hop's)
	SupportTier   string      `json:"supportTier,omitempty"`  // "supported" or "experimental"
	State         State       `json:"state"`
	Lane          Lane        `json:"lane"`
	Yielded       bool        `json:"yielded,omitempty"`
	TTY           bool        `json:"tty,omitempty"`
	Termination   Termination `json:"termination,omitempty"`
	ExitCode      *int        `json:"exitCode,omitempty"`
	Signal        string      `json:"signal,omitempty"`
	Outcome       Outcome     `json:"outcome,omitempty"`
	Status        Status      `json:"status,omitempty"`
	Reason        string      `json:"reason,omitempty"`
	QueuedAt      *Time       `json:"queuedAt,omitempty"`
	StartedAt     *Time       `json:"startedAt,omitempty"`
	EndedAt       *Time       `json:"endedAt,omitempty"`
	WallMs        int64       `json:"wallMs"`
	OutputBytes   int64       `json:"outputBytes"`
	OutputLines   int64       `json:"outputLines"`
	OmittedBytes  int64       `json:"omittedBytes"`
	UnreadBytes   int64       `json:"unreadBytes"`
	OutputAddress string      `json:"outputAddress"`
	Pid           int         `json:"pid,omitempty"`
	Pgid          int         `json:"pgid,omitempty"`
	MonitorID     string      `json:"monitorId,omitempty"`
	ScratchDir    string      `json:"scratchDir,omitempty"`
	TimeoutMs     int64       `json:"timeoutMs,omitempty"`
	// PublishedPath is where a remote execution's output is published on
	// its target (target-native path).
	PublishedPath string `json:"publishedPath,omitempty"`
	// RemoteMode is how a remote execution runs on its host: "agent"
	// (the helper's host agent) or "wrapper" (a shell wrapper per
	// command).
	RemoteMode string `json:"remoteMode,omitempty"`
	// TargetIncarnation is the host's name and boot as its host agent
	// said when the command started there: a host found again in another
	// boot was replaced, and what ran there settles lost.
	TargetIncarnation *Incarnation `json:"targetIncarnation,omitempty"`
	// WaitingForInput: every process of the terminal's foreground group
	// is blocked reading it and no output came for waitingAfterMs (tty
	// executions only); Prompt is the last partial line then.
	WaitingForInput bool   `json:"waitingForInput,omitempty"`
	WaitingSince    *Time  `json:"waitingSince,omitempty"`
	Prompt          string `json:"prompt,omitempty"`
	// Ready: the start's readyPattern matched ReadyLine, or its process
	// tree listens on ReadyPort.
	Ready     bool   `json:"ready,omitempty"`
	ReadyLine string `json:"readyLine,omitempty"`
	ReadyPort int    `json:"readyPort,omitempty"`
	// Listening are the TCP ports a live execution's process tree
	// listens on, as of when the facts were taken.
	Listening []process.Listener `json:"listening,omitempty"`
	// Sandbox is the confinement the command runs in, as applied.
	Sandbox *sandbox.Facts `json:"sandbox,omitempty"`
	// SandboxDenials are accesses the sandbox refused, as the final
	// observation of a failed confined command can tell them.
	SandboxDenials []sandbox.Denial `json:"sandboxDenials,omitempty"`
	// Resources are the limits asked for and how each was applied.
	Resources *sandbox.ResourceFacts `json:"resources,omitempty"`
	// Limit names the limit that ended a resource-limit termination.
	Limit string `json:"limit,omitempty"`
	// StoppedByUser: the stop that ended it was requested with user
	// authority (a person: a panel, mevedel-exec stop), not by its owner.
	StoppedByUser bool   `json:"stoppedByUser,omitempty"`
	Version       uint64 `json:"version"`
}

// Growth is what exec/changed says of an execution whose facts changed
// only by growth since it last named it: its output's counters, its
// wall time and its version; every other fact is as it said then. On
// the wire it is an array of GrowthFields in that order, not an object:
// a client parses hundreds a second, and keys would be most of it.
type Growth struct {
	ExecutionID  string `json:"executionId"`
	WallMs       int64  `json:"wallMs"`
	OutputBytes  int64  `json:"outputBytes"`
	OutputLines  int64  `json:"outputLines"`
	OmittedBytes int64  `json:"omittedBytes"`
	UnreadBytes  int64  `json:"unreadBytes"`
	Version      uint64 `json:"version"`
}

func (f *Facts) growth() Growth {
	return Growth{
		ExecutionID: f.ExecutionID, WallMs: f.WallMs, OutputBytes: f.OutputBytes, OutputLines: f.OutputLines,
		OmittedBytes: f.OmittedBytes, UnreadBytes: f.UnreadBytes, Version: f.Version,
	}
}

// Grow returns f with g's counters: the facts a consumer holds after
// merging g into f.
func (f Facts) Grow(g Growth) Facts {
	f.WallMs, f.OutputBytes, f.OutputLines = g.WallMs, g.OutputBytes, g.OutputLines
	f.OmittedBytes, f.UnreadBytes, f.Version = g.OmittedBytes, g.UnreadBytes, g.Version
	return f
}

// grewOnly says whether cur differs from last only in what a Growth
// carries.
func grewOnly(last, cur Facts) bool {
	return reflect.DeepEqual(last.Grow(cur.growth()), cur)
}

// Observation is one answer about an execution: unread output and facts.
// Final is set on every observation that carries the terminal result.
type Observation struct {
	Output string `json:"output"`
	Facts  Facts  `json:"facts"`
	Final  bool   `json:"final,omitempty"`
	// DeliveryID names the pending delivery of this result: the
	// observation shows it without claiming it.
	DeliveryID string `json:"deliveryId,omitempty"`
}

// Defaults are set on top of the login environment for every command; the
// request's own env overrides them.
var Defaults = []string{
	"NO_COLOR=1", "TERM=dumb", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "COLORTERM=",
	"PAGER=cat", "GIT_PAGER=cat", "GH_PAGER=cat", "MEVEDEL_EXECUTION=1",
}

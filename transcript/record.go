package transcript

import (
	"encoding/json"
	"time"
)

// Record types.
const (
	TypeSpawn        = "spawn"        // an execution is about to be spawned: facts, the earliest start of its processes
	TypeRow          = "row"          // an execution started: facts at start, group leader
	TypeSettled      = "settled"      // it settled: final facts
	TypeBreadcrumb   = "breadcrumb"   // the one completion line of a yielded execution
	TypeNotice       = "notice"       // a forwarded completion or a monitor's end
	TypeLost         = "lost"         // no terminal evidence after a restart: final facts
	TypeRetire       = "retire"       // the person retired an owner's attention up to a frontier
	TypeAcknowledged = "acknowledged" // the person acknowledged an execution's unknown outcome
)

// Record is one line of the journal and also the wire shape of
// transcript/records. Booleans are present only when true; exitCode whenever
// it is known, 0 included.
type Record struct {
	Seq         uint64 `json:"seq"`
	Type        string `json:"type"`
	ExecutionID string `json:"executionId,omitempty"`
	ToolUseID   string `json:"toolUseId,omitempty"`
	Owner       string `json:"owner,omitempty"`
	// At is RFC 3339 UTC with milliseconds; Append sets it when empty.
	At string `json:"at"`
	// Facts is the execution's facts object, opaque here: at start on a
	// row, final on settled and lost.
	Facts json.RawMessage `json:"facts,omitempty"`
	// Leader is set on spawns and rows only, for recovery after a crash.
	Leader *Leader `json:"leader,omitempty"`
	// Status is a breadcrumb's completed, failed, stopped, timed-out or lost.
	Status   string `json:"status,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Label    string `json:"label,omitempty"`
	// Text is the one rendered line of a breadcrumb or notice.
	Text string `json:"text,omitempty"`
	// Attrs are the structured attributes a notice was built from. Values
	// are JSON scalars; after a reload numbers come back as float64.
	Attrs map[string]any `json:"attrs,omitempty"`
}

// Leader identifies an execution's process-group leader well enough to tell
// it from a later process that reused its pid. A spawn record's leader
// has no pid yet: its StartTime is the clock when the record was made, and
// no process of the execution started before it.
type Leader struct {
	Pid  int `json:"pid"`
	Pgid int `json:"pgid"`
	// StartTime is field 22 of /proc/PID/stat: clock ticks since boot.
	StartTime uint64 `json:"startTime"`
	Target    string `json:"target,omitempty"`
	// Boot is the host's incarnation when the leader started: its boot
	// id as its host agent said, or for a container
	// "container:<id>@<start>" as its engine said. In another
	// incarnation nothing of it can be left.
	Boot string `json:"boot,omitempty"`
}

// hasFacts reports whether records of type t carry an execution's facts;
// compaction keeps only the latest of them per execution.
func hasFacts(t string) bool {
	return t == TypeSpawn || t == TypeRow || t == TypeSettled || t == TypeLost
}

const timeLayout = "2006-01-02T15:04:05.000Z"

// now is the journal's clock.
var now = time.Now

func stamp(t time.Time) string { return t.UTC().Format(timeLayout) }

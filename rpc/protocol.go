// Package rpc owns the wire: method names, the param and result types,
// framing, the mapping of internal errors to JSON-RPC codes, and the
// dispatcher that hands decoded requests to package execution.
package rpc

import (
	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/sourcegraph/jsonrpc2"
)

// ProtocolVersion is the version of the wire contract this helper speaks.
const ProtocolVersion = 1

// ServerName is what initialize reports.
const ServerName = "mevedel-exec"

// ServerVersion is set at build time (-ldflags "-X ...rpc.ServerVersion=...").
var ServerVersion = "0.1.0-dev"

// Methods: Emacs → helper.
const (
	MethodInitialize    = "initialize"
	MethodShutdown      = "shutdown"
	MethodSessionOpen   = "session/open"
	MethodSessionClose  = "session/close"
	MethodExecStart     = "exec/start"
	MethodExecObserve   = "exec/observe"
	MethodExecStop      = "exec/stop"
	MethodExecInterrupt = "exec/interrupt"
	MethodExecList      = "exec/list"
	MethodExecStopAll   = "exec/stopAll"
	MethodExecAnalyze   = "exec/analyze"
	MethodCancelRequest = "$/cancelRequest"
	MethodSpoolRead     = "spool/read"
	MethodSpoolGrep     = "spool/grep"
	MethodSpoolGlob     = "spool/glob"
	MethodSpoolStat     = "spool/stat"
	MethodMonitorStart  = "monitor/start"
	MethodMonitorStop   = "monitor/stop"
	MethodMonitorList   = "monitor/list"
	MethodOwnerState    = "owner/state"
	MethodOwnerRetire   = "owner/retire"
	MethodOwnerAttend   = "owner/attend"
	MethodMailboxAck    = "mailbox/ack"
	MethodDaemonStatus  = "daemon/status"
)

// Notifications: helper → Emacs.
const (
	NotifyProgress  = "exec/progress"
	NotifyChanged   = "exec/changed"
	NotifySettled   = "exec/settled"
	NotifyDeliver   = "mailbox/deliver"
	NotifyWake      = "session/wake"
	NotifyDelivered = "mailbox/delivered"
	NotifyOutput    = "exec/output"
)

// Authority selects whose executions a request may see: model authority
// for Owner (default "/root"), or user authority with As "user".
type Authority struct {
	Owner string `json:"owner,omitempty"`
	As    string `json:"as,omitempty"`
}

type InitializeParams struct {
	ClientName      string `json:"clientName,omitempty"`
	ClientVersion   string `json:"clientVersion,omitempty"`
	ProtocolVersion int    `json:"protocolVersion,omitempty"`
}

type InitializeResult struct {
	ServerName      string `json:"serverName"`
	ServerVersion   string `json:"serverVersion"`
	ProtocolVersion int    `json:"protocolVersion"`
	InstanceID      string `json:"instanceId"`
	Pid             int    `json:"pid"`
}

type SessionOpenParams struct {
	SessionID         string           `json:"sessionId"`
	StateDir          string           `json:"stateDir"`
	Limits            execution.Limits `json:"limits,omitzero"`
	RemoteArtifactDir string           `json:"remoteArtifactDir,omitempty"`
	// Sandbox and Resources are the defaults of every start in the
	// session; a start's own fields win.
	Sandbox   *sandbox.Policy    `json:"sandbox,omitempty"`
	Resources *sandbox.Resources `json:"resources,omitempty"`
	// Role is "agent" (the default: results and wakes come to this
	// client) or "observer" (user authority, passive events only). It
	// matters on a daemon, where several clients open one session.
	Role string `json:"role,omitempty"`
	// Target names the machine the session works in: a TRAMP name of a
	// host or container ("/ssh:user@host#22:", "/podman:box:/src"), or a
	// local path or nothing for this machine. The answer describes it.
	Target string `json:"target,omitempty"`
}

// Roles of a client in a session it opened.
const (
	RoleAgent    = "agent"
	RoleObserver = "observer"
)

// DaemonStatusResult answers daemon/status: who is attached to the
// helper and what each open session holds.
type DaemonStatusResult struct {
	Pid             int             `json:"pid"`
	ServerVersion   string          `json:"serverVersion"`
	ProtocolVersion int             `json:"protocolVersion"`
	Daemon          bool            `json:"daemon"`
	Clients         int             `json:"clients"`
	Sessions        []DaemonSession `json:"sessions"`
}

// DaemonSession is one open session in daemon/status.
type DaemonSession struct {
	SessionID string `json:"sessionId"`
	StateDir  string `json:"stateDir"`
	IDPrefix  string `json:"idPrefix"`
	Agent     bool   `json:"agent"`     // an agent client is attached
	Observers int    `json:"observers"` // observer clients attached
	Live      int    `json:"live"`      // live executions
	Pending   int    `json:"pending"`   // deliveries waiting for their ack
}

type SessionCloseParams struct {
	SessionID string `json:"sessionId"`
}

type SessionCloseResult struct {
	Discarded int `json:"discarded"`
}

type ExecStartParams struct {
	SessionID string `json:"sessionId"`
	Authority
	Command        string            `json:"command,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Stdin          *string           `json:"stdin,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	YieldMs        *int64            `json:"yieldMs,omitempty"`
	TimeoutMs      *int64            `json:"timeoutMs,omitempty"`
	TTY            bool              `json:"tty,omitempty"`
	Lane           execution.Lane    `json:"lane,omitempty"`
	ReadOnly       *bool             `json:"readOnly,omitempty"`
	Scratch        bool              `json:"scratch,omitempty"`
	Kind           execution.Kind    `json:"kind,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Label          string            `json:"label,omitempty"`
	ToolUseID      string            `json:"toolUseId,omitempty"`
	MaxOutputChars int               `json:"maxOutputChars,omitempty"`
	// ReadyPattern (RE2 over output lines) and ReadyPort (TCP): yield as
	// soon as a line matches or the process tree listens on the port.
	ReadyPattern string `json:"readyPattern,omitempty"`
	ReadyPort    int    `json:"readyPort,omitempty"`
	// Sandbox and Resources are laid over the session's defaults.
	Sandbox   *sandbox.Policy    `json:"sandbox,omitempty"`
	Resources *sandbox.Resources `json:"resources,omitempty"`
	// Follow: followed with output from the start, as by exec/follow
	// with output before its first byte.
	Follow bool `json:"follow,omitempty"`
	// Deliver false: a yielded end makes no delivery; the starter
	// watches it (exec/settled, exec/observe).
	Deliver *bool `json:"deliver,omitempty"`
}

type ExecObserveParams struct {
	SessionID string `json:"sessionId"`
	Authority
	ExecutionID    string `json:"executionId"`
	Chars          string `json:"chars,omitempty"`
	WaitMs         int64  `json:"waitMs,omitempty"`
	MaxOutputChars int    `json:"maxOutputChars,omitempty"`
}

type ExecStopParams struct {
	SessionID string `json:"sessionId"`
	Authority
	ExecutionID    string `json:"executionId"`
	MaxOutputChars int    `json:"maxOutputChars,omitempty"`
}

type ExecInterruptParams struct {
	SessionID string `json:"sessionId"`
	Authority
	ExecutionID string `json:"executionId"`
}

type ExecListParams struct {
	SessionID string `json:"sessionId"`
	Authority
	// All adds the settled executions the session still retains.
	All bool `json:"all,omitempty"`
}

type ExecListResult struct {
	Executions []execution.Facts `json:"executions"`
}

// AppendJSON appends r as JSON, as encoding/json would (see
// execution.Facts.AppendJSON).
func (r ExecListResult) AppendJSON(b []byte) []byte {
	b = append(b, `{"executions":`...)
	return append(execution.AppendFactsJSON(b, r.Executions), '}')
}

// ExecStopAllParams stops live executions: with As "user" and no Owner,
// every one of the session (termination stopped); otherwise only Owner's
// (default "/root"; termination owner-stopped). Under model authority an
// owner can stop only its own.
type ExecStopAllParams struct {
	SessionID string `json:"sessionId"`
	Authority
}

type ExecStopAllResult struct {
	Stopped int `json:"stopped"`
}

type ExecAnalyzeParams struct {
	Command string `json:"command"`
}

type ExecAnalyzeResult struct {
	Class   string   `json:"class"`
	Reasons []string `json:"reasons"`
}

type CancelParams struct {
	ID jsonrpc2.ID `json:"id"`
}

type ProgressParams struct {
	SessionID   string          `json:"sessionId"`
	ExecutionID string          `json:"executionId"`
	ToolUseID   string          `json:"toolUseId"`
	Facts       execution.Facts `json:"facts"`
	Tail        string          `json:"tail"`
}

// OutputParams carries new output of an execution followed with output:
// Length bytes of its log from Offset, as Text.
type OutputParams struct {
	SessionID   string `json:"sessionId"`
	ExecutionID string `json:"executionId"`
	Offset      int64  `json:"offset"`
	Length      int    `json:"length"`
	Text        string `json:"text"`
}

// ChangedParams carries the executions that changed since the last
// exec/changed of the session, not the whole live set: a consumer keeps
// its own table, seeded by exec/list. Those that only grew since it last
// named them are in Grown, a few numbers each.
type ChangedParams struct {
	SessionID string             `json:"sessionId"`
	Changed   []execution.Facts  `json:"changed"`
	Grown     []execution.Growth `json:"grown,omitempty"`
}

// AppendJSON appends p as JSON, as encoding/json would.
func (p ChangedParams) AppendJSON(b []byte) []byte {
	b = append(b, `{"sessionId":`...)
	b = execution.AppendJSONString(b, p.SessionID)
	b = append(b, `,"changed":`...)
	b = execution.AppendFactsJSON(b, p.Changed)
	if len(p.Grown) > 0 {
		b = append(b, `,"grown":`...)
		b = execution.AppendGrowthJSON(b, p.Grown)
	}
	return append(b, '}')
}

type SettledParams struct {
	SessionID string          `json:"sessionId"`
	Facts     execution.Facts `json:"facts"`
}

// AppendJSON appends p as JSON, as encoding/json would.
func (p SettledParams) AppendJSON(b []byte) []byte {
	b = append(b, `{"sessionId":`...)
	b = execution.AppendJSONString(b, p.SessionID)
	b = append(b, `,"facts":`...)
	return append(p.Facts.AppendJSON(b), '}')
}

type SpoolReadParams struct {
	SessionID string `json:"sessionId"`
	Authority
	Address string `json:"address"`
	Offset  int64  `json:"offset,omitempty"`
	Length  int64  `json:"length,omitempty"`
	Line    int64  `json:"line,omitempty"`
	Lines   int64  `json:"lines,omitempty"`
}

type SpoolGrepParams struct {
	SessionID string `json:"sessionId"`
	Authority
	Pattern    string   `json:"pattern"`
	Glob       string   `json:"glob,omitempty"`
	Addresses  []string `json:"addresses,omitempty"`
	MaxMatches int      `json:"maxMatches,omitempty"`
	Context    int      `json:"context,omitempty"`
}

type SpoolGlobParams struct {
	SessionID string `json:"sessionId"`
	Authority
	Pattern string `json:"pattern,omitempty"`
}

type SpoolGlobResult struct {
	Addresses []string `json:"addresses"`
}

type SpoolStatParams struct {
	SessionID string `json:"sessionId"`
	Authority
	Address string `json:"address"`
}

// Empty is the {} result.
type Empty struct{}

type MonitorStartParams struct {
	SessionID string `json:"sessionId"`
	Authority
	Command    string            `json:"command,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Label      string            `json:"label,omitempty"`
	Filter     string            `json:"filter,omitempty"`
	Persistent bool              `json:"persistent,omitempty"`
	TimeoutMs  int64             `json:"timeoutMs,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Sandbox    *sandbox.Policy   `json:"sandbox,omitempty"`
}

type MonitorStopParams struct {
	SessionID string `json:"sessionId"`
	Authority
	MonitorID string `json:"monitorId"`
}

type MonitorListParams struct {
	SessionID string `json:"sessionId"`
	Authority
}

type MonitorListResult struct {
	Monitors []execution.MonitorInfo `json:"monitors"`
}

type OwnerStateParams struct {
	SessionID string `json:"sessionId"`
	Owner     string `json:"owner,omitempty"`
	State     string `json:"state"`
}

// OwnerRetireParams: without Phase, retire at once; "begin" snapshots the
// frontier, "commit" retires up to it, "abort" leaves it owed.
type OwnerRetireParams struct {
	SessionID string  `json:"sessionId"`
	Owner     string  `json:"owner,omitempty"`
	Phase     string  `json:"phase,omitempty"`
	Frontier  *uint64 `json:"frontier,omitempty"`
}

type OwnerRetireResult struct {
	Retired  int    `json:"retired"`
	Frontier uint64 `json:"frontier"`
}

type OwnerAttendParams struct {
	SessionID   string   `json:"sessionId"`
	Owner       string   `json:"owner,omitempty"`
	DeliveryIDs []string `json:"deliveryIds"`
}

type OwnerAttendResult struct {
	Attended int `json:"attended"`
}

// DeliveredParams is mailbox/delivered: a delivery was durably
// acknowledged, for passive listeners.
type DeliveredParams struct {
	SessionID   string `json:"sessionId"`
	DeliveryID  string `json:"deliveryId"`
	ExecutionID string `json:"executionId"`
	Owner       string `json:"owner"`
}

type MailboxAckParams struct {
	SessionID  string `json:"sessionId"`
	DeliveryID string `json:"deliveryId"`
	Durable    bool   `json:"durable,omitempty"`
	Error      string `json:"error,omitempty"`
}

type WakeParams struct {
	SessionID   string   `json:"sessionId"`
	Owner       string   `json:"owner"`
	DeliveryIDs []string `json:"deliveryIds"`
}

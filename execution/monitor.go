package execution

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/transcript"
)

// Monitor tuning: a monitor is for events, not for streaming a log.
const (
	monitorBatchLines   = 200             // lines per MONITOR delivery at most
	monitorLinesPerSec  = 100             // events accepted per second
	monitorQueueLines   = 1000            // events waiting for the batch in flight
	monitorLineBytes    = 4096            // longer lines are cut
	monitorNoisySeconds = 10              // seconds in a row with suppression before a stop
	monitorTimeout      = 5 * time.Minute // a non-persistent monitor's life
	monitorMaxTimeout   = 24 * time.Hour  // bound on an explicit timeoutMs
	monitorWindow       = 1 * time.Second // throttling window
)

// MonitorInfo is the wire shape of a monitor.
type MonitorInfo struct {
	MonitorID   string `json:"monitorId"`
	ExecutionID string `json:"executionId"`
	Owner       string `json:"owner"`
	Label       string `json:"label"`
	Command     string `json:"command"`
	Filter      string `json:"filter,omitempty"`
	Persistent  bool   `json:"persistent,omitempty"`
	State       string `json:"state"` // running, stopping, stopped
	Events      int64  `json:"events"`
	Suppressed  int64  `json:"suppressed"`
	Reason      string `json:"reason,omitempty"`
}

// MonitorParams are the inputs of monitor/start.
type MonitorParams struct {
	Command    string
	Argv       []string
	Cwd        string
	Label      string
	Filter     string
	Persistent bool
	TimeoutMs  int64
	Env        map[string]string
	Sandbox    *sandbox.Policy
}

// Monitor turns a managed command's output lines into events, delivered
// in batches through the mailbox: one batch in flight, later lines join
// the next one, each line delivered once.
type Monitor struct {
	s          *Session
	id         string         // immutable
	e          *Execution     // immutable
	filter     *regexp.Regexp // immutable; nil: every line
	filterText string         // immutable
	persistent bool           // immutable

	mu           sync.Mutex
	partial      []byte   // guarded by mu; an incomplete last line
	queue        []string // guarded by mu; events not yet in a batch
	inFlight     bool     // guarded by mu; a batch waits for its ack
	ended        bool     // guarded by mu; the execution settled
	final        Facts    // guarded by mu; its final facts
	terminal     bool     // guarded by mu; the terminal delivery is made
	events       int64    // guarded by mu; lines accepted as events
	suppressed   int64    // guarded by mu; lines dropped by the throttle
	unreported   int64    // guarded by mu; suppressed since the last batch
	windowStart  time.Time
	windowCount  int  // guarded by mu
	windowDrops  int  // guarded by mu
	noisySeconds int  // guarded by mu
	noisyStopped bool // guarded by mu
}

// StartMonitor starts a monitor/start command.
func (s *Session) StartMonitor(c Caller, p MonitorParams) (*Monitor, error) {
	var re *regexp.Regexp
	if p.Filter != "" {
		var err error
		if re, err = regexp.Compile(p.Filter); err != nil {
			return nil, fault.New(fault.InvalidParams, "filter is not a valid RE2 pattern: %w", err)
		}
	}
	timeout := monitorTimeout
	switch {
	case p.TimeoutMs < 0:
		return nil, fault.New(fault.InvalidParams, "timeoutMs must not be negative")
	case p.TimeoutMs > 0:
		timeout = min(time.Duration(p.TimeoutMs)*time.Millisecond, monitorMaxTimeout)
	}
	label := p.Label
	if label == "" {
		label = p.Command
		if len(p.Argv) > 0 {
			label = shellWords(p.Argv)
		}
	}
	m := &Monitor{s: s, filter: re, filterText: p.Filter, persistent: p.Persistent}
	// A monitor watches; it never holds the exclusive lane.
	e, err := s.start(c, StartParams{Command: p.Command, Argv: p.Argv, Cwd: p.Cwd, Label: label, Lane: LaneRead, Env: p.Env, Sandbox: p.Sandbox}, m)
	if err != nil {
		return nil, err
	}
	e.yield()
	if !p.Persistent {
		s.Go(func() {
			t := time.NewTimer(timeout)
			defer t.Stop()
			select {
			case <-t.C:
				e.cancel(&stopCause{term: TimedOut, reason: fmt.Sprintf("the monitor ran for its timeout of %v (start it with persistent to keep it running)", timeout)})
			case <-e.done:
			}
		})
	}
	return m, nil
}

// Info returns the monitor's wire shape.
func (m *Monitor) Info() MonitorInfo {
	f := m.e.Facts()
	state := "running"
	switch f.State {
	case Stopping:
		state = "stopping"
	case Settled:
		state = "stopped"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return MonitorInfo{
		MonitorID: m.id, ExecutionID: m.e.id, Owner: f.Owner, Label: f.Label, Command: f.Command,
		Filter: m.filterText, Persistent: m.persistent, State: state,
		Events: m.events, Suppressed: m.suppressed, Reason: f.Reason,
	}
}

// feed takes output bytes from the execution's copier; it never blocks on
// the mailbox.
func (m *Monitor) feed(p []byte) {
	m.mu.Lock()
	now := time.Now()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := monitorLineBytes - len(m.partial)
			m.partial = append(m.partial, p[:max(0, min(len(p), room))]...)
			break
		}
		line := append(m.partial, p[:i]...)
		m.partial = nil
		p = p[i+1:]
		m.acceptLocked(line, now)
	}
	stop := m.noisyLocked()
	m.mu.Unlock()
	if stop {
		m.e.cancel(&stopCause{term: Stopped, reason: fmt.Sprintf("the monitor was too noisy: more than %d lines per second for %d seconds; narrow it with a filter", monitorLinesPerSec, monitorNoisySeconds)})
	}
	m.pump()
}

// acceptLocked filters and throttles one complete line.
func (m *Monitor) acceptLocked(line []byte, now time.Time) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > monitorLineBytes {
		line = append(line[:monitorLineBytes:monitorLineBytes], "…"...)
	}
	if m.filter != nil && !m.filter.Match(line) {
		return
	}
	if now.Sub(m.windowStart) >= monitorWindow {
		if m.windowDrops > 0 && now.Sub(m.windowStart) < 2*monitorWindow {
			m.noisySeconds++
		} else {
			m.noisySeconds = 0
		}
		m.windowStart, m.windowCount, m.windowDrops = now, 0, 0
	}
	if m.windowCount >= monitorLinesPerSec || len(m.queue) >= monitorQueueLines {
		m.suppressed++
		m.unreported++
		m.windowDrops++
		return
	}
	m.windowCount++
	m.events++
	m.queue = append(m.queue, string(line))
}

// noisyLocked reports, once, that the monitor stayed too noisy.
func (m *Monitor) noisyLocked() bool {
	if m.noisySeconds >= monitorNoisySeconds && !m.noisyStopped {
		m.noisyStopped = true
		return true
	}
	return false
}

// settle is called at the settlement of the monitor's execution: a last
// line without newline still counts, and the terminal delivery follows
// the last batch.
func (m *Monitor) settle(f Facts) {
	m.mu.Lock()
	if len(m.partial) > 0 {
		m.acceptLocked(m.partial, time.Now())
		m.partial = nil
	}
	m.ended, m.final = true, f
	m.mu.Unlock()
	m.s.changed(m.e)
	m.pump()
}

// pump makes the next delivery when none is in flight: a batch of waiting
// events, or the terminal notice once everything before it is acked.
func (m *Monitor) pump() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight || m.terminal {
		return
	}
	if len(m.queue) == 0 && !m.ended {
		return
	}
	seq := m.s.attentionTick()
	owner := m.e.owner // immutable after start
	wake := owner == RootOwner
	durable := func(d Delivery) {
		m.mu.Lock()
		m.inFlight = false
		m.mu.Unlock()
		m.s.m.events.Delivered(d)
		if wake {
			m.s.owe(owner, d.DeliveryID, seq)
		}
		m.pump()
	}
	switch {
	case len(m.queue) > 0:
		n := min(len(m.queue), monitorBatchLines)
		batch := append([]string(nil), m.queue[:n]...)
		m.queue = m.queue[n:]
		events := m.events
		d := Delivery{Owner: owner, Kind: KindMonitor, Lines: batch, Attrs: DeliveryAttrs{
			MonitorID: m.id, ExecutionID: m.e.id, Label: m.e.label, Events: &events, Suppressed: m.unreported,
		}}
		m.unreported = 0
		if _, ok := m.s.mail.post(d, durable, nil); ok {
			m.inFlight = true
		}
	case m.ended:
		m.terminal = true
		f := m.final
		events := m.events
		attrs := DeliveryAttrs{
			MonitorID: m.id, ExecutionID: m.e.id, Label: f.Label, Command: f.Command, Status: f.Status,
			Termination: f.Termination, ExitCode: f.ExitCode, Signal: f.Signal, Reason: f.Reason,
			Events: &events, Suppressed: m.suppressed,
		}
		text, notice := monitorNotice(attrs)
		d := Delivery{Owner: owner, Kind: KindMonitorTerminal, Attrs: attrs, Text: text}
		notice["monitorId"] = m.id
		m.s.journalNotice(m.e.id, owner, text, notice)
		// A monitor that ended on its own may wake; a stop, whoever made
		// it, never does.
		wake = wake && endedOnItsOwn(f.Termination)
		m.s.mail.post(d, func(d Delivery) {
			m.s.m.events.Delivered(d)
			if wake {
				m.s.owe(owner, d.DeliveryID, seq)
			}
		}, nil)
	}
}

// monitorNotice is the terminal line, built from attributes only, and
// those attributes. A plain stop needs no reason; a timeout or a throttle
// stop says why.
func monitorNotice(a DeliveryAttrs) (string, map[string]any) {
	attrs := map[string]any{
		"kind": string(KindMonitorTerminal), "label": a.Label, "command": a.Command,
		"status": string(a.Status), "signal": a.Signal, "suppressed": a.Suppressed,
	}
	if a.Events != nil {
		attrs["events"] = *a.Events
	}
	if a.ExitCode != nil && a.Status != StatusStopped {
		attrs["exitCode"] = *a.ExitCode
	}
	if a.Status != StatusStopped || strings.Contains(a.Reason, "noisy") {
		attrs["reason"] = a.Reason
	}
	return transcript.Notice(attrs), attrs
}

// lookupMonitor finds a monitor visible to c.
func (s *Session) lookupMonitor(c Caller, id string) (*Monitor, error) {
	s.mu.Lock()
	m, ok := s.monitors[id]
	s.mu.Unlock()
	if !ok || !c.sees(m.e.owner) {
		return nil, fault.New(fault.NotFound, "no monitor %q", id)
	}
	return m, nil
}

// StopMonitor stops a monitor and replies once its command has settled.
// Its end still comes as one MONITOR_TERMINAL delivery.
func (s *Session) StopMonitor(c Caller, id string, reply func(MonitorInfo)) error {
	m, err := s.lookupMonitor(c, id)
	if err != nil {
		return err
	}
	m.e.cancel(&stopCause{term: Stopped, reason: "the monitor was stopped on request"})
	s.Go(func() {
		<-m.e.done
		reply(m.Info())
	})
	return nil
}

// Monitors lists the running monitors visible to c, oldest first.
func (s *Session) Monitors(c Caller) []MonitorInfo {
	s.mu.Lock()
	var ms []*Monitor
	for _, m := range s.monitors {
		if c.sees(m.e.owner) && !m.e.settledNow() {
			ms = append(ms, m)
		}
	}
	s.mu.Unlock()
	out := make([]MonitorInfo, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MonitorID < out[j].MonitorID })
	return out
}

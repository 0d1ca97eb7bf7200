package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mevedel/mevedel-exec/remote/agent"
)

// Readiness. The first use of a target asks it, once per carrier (an
// agent's channel, or for the wrapper an SSH connection; a reconnection
// asks again, so a replaced host is asked anew), which of the programs
// the helper relies on it lacks. What a target's mode cannot run a
// command without is missing, and every start there is refused with
// the list; the rest is reported (session/open's target description)
// and, where it changes what a start gets, in its facts (a bubblewrap
// that cannot confine: confinement's fallback or refusal).

// ProbedPrograms are the programs a target is asked about.
var ProbedPrograms = []string{"bash", "setsid", "bwrap", "rg"}

// needs are the programs a mode cannot run a command without: the host
// agent runs each command with bash, and makes its session itself; the
// wrapper is bash, and re-executes itself through setsid.
var needs = map[string][]string{
	ModeAgent:   {"bash"},
	ModeWrapper: {"bash", "setsid"},
}

// Readiness is what a target's probe found.
type Readiness struct {
	Mode        string      // ModeAgent or ModeWrapper: what runs the target's commands
	Incarnation Incarnation // as the agent's hello, or the wrapper's probe, says
	Lacks       []string    // the ProbedPrograms not found there
	// Missing are the programs of Lacks the mode needs: no command can
	// start there.
	Missing []string
}

// ErrNotReady classifies a start refused because its target lacks what
// its mode needs. It is also ErrUnavailable: the target cannot run it.
var ErrNotReady = errors.New("remote: the target lacks what commands need")

type notReadyError struct{ msg string }

func (e notReadyError) Error() string   { return e.msg }
func (e notReadyError) Unwrap() []error { return []error{ErrNotReady, ErrUnavailable} }

// Err is the refusal of a start on target when the probe found it
// missing something, else nil.
func (rd Readiness) Err(target string) error {
	if len(rd.Missing) == 0 {
		return nil
	}
	return notReadyError{fmt.Sprintf("remote: %s lacks %s, which its commands need (through the %s); install it there: nothing was run",
		target, strings.Join(rd.Missing, " and "), map[string]string{ModeAgent: "host agent", ModeWrapper: "wrapper"}[rd.Mode])}
}

func readiness(mode string, inc Incarnation, lacks []string) Readiness {
	rd := Readiness{Mode: mode, Incarnation: inc, Lacks: lacks}
	for _, n := range needs[mode] {
		if slices.Contains(lacks, n) {
			rd.Missing = append(rd.Missing, n)
		}
	}
	return rd
}

// probeEntry is a target's probe on one carrier.
type probeEntry struct {
	carrier interface{ isDead() bool }
	rd      Readiness
}

// probes are a pool's probes by target key.
type probes struct {
	mu sync.Mutex
	by map[string]probeEntry // guarded by mu
}

// Probed returns t's readiness without waiting when its carrier was
// probed and still runs.
func (p *Pool) Probed(t Target) (Readiness, bool) {
	r, err := p.resolve(t)
	if err != nil {
		return Readiness{}, false
	}
	return p.probed(r)
}

func (p *Pool) probed(r resolved) (Readiness, bool) {
	ps := &p.ready
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e, ok := ps.by[r.key()]
	if !ok || e.carrier.isDead() {
		return Readiness{}, false
	}
	return e.rd, true
}

func (p *Pool) remember(r resolved, carrier interface{ isDead() bool }, rd Readiness) {
	ps := &p.ready
	ps.mu.Lock()
	if ps.by == nil {
		ps.by = map[string]probeEntry{}
	}
	ps.by[r.key()] = probeEntry{carrier, rd}
	ps.mu.Unlock()
}

// Probe connects to t (deploying its agent) and returns its readiness,
// asking the target once per carrier. A target that cannot be reached
// is an ErrUnavailable error; ctx bounds it all.
func (p *Pool) Probe(ctx context.Context, t Target) (Readiness, error) {
	r, err := p.resolve(t)
	if err != nil {
		return Readiness{}, unavailable(err)
	}
	if rd, ok := p.probed(r); ok {
		return rd, nil
	}
	if r.Stream() || (p.cfg.Mode != ModeWrapper && agent.Deployable) {
		for range 2 { // a second time when the agent was lost meanwhile
			cl, err := p.agentFor(ctx, r)
			if cl == nil {
				if ctx.Err() != nil {
					return Readiness{}, context.Cause(ctx)
				}
				if errors.Is(err, errNoAgentHere) {
					return p.probeEngine(ctx, r) // the wrapper serves the container
				}
				if r.Stream() {
					return Readiness{}, err
				}
				break // the wrapper serves the host
			}
			rep, err := cl.request(ctx, agent.Request{Op: agent.OpTools, Tools: ProbedPrograms})
			if errors.Is(err, errAgentLost) {
				continue
			}
			if err != nil {
				return Readiness{}, err
			}
			if !rep.Looked {
				return Readiness{}, fmt.Errorf("remote: %s: the host agent cannot say what the host lacks: %s", r.Target, rep.Err)
			}
			rd := readiness(ModeAgent, cl.inc, rep.Lacks)
			p.remember(r, cl, rd)
			return rd, nil
		}
	}
	c, err := p.anyConn(ctx, r)
	if err != nil {
		return Readiness{}, err
	}
	out, err := p.capture(ctx, r, wrapperProbe, []byte(probeEnd))
	if err != nil {
		return Readiness{}, err
	}
	rd, err := parseWrapperProbe(out)
	if err != nil {
		return Readiness{}, fmt.Errorf("remote: %s: %w", r.Target, err)
	}
	p.remember(r, c, rd)
	return rd, nil
}

// The wrapper's probe: the boot and host names as the agent reads them
// (its test hook included), then a word for each program not found as
// the wrapper looks for it: bash on sshd's PATH, setsid on it and
// /usr/bin and /bin. POSIX sh, so that a host without bash answers.
const (
	probeBegin = "\x00MEVEDEL-PROBE "
	probeEnd   = "\x00MEVEDEL-PROBE-END\x00"
)

var wrapperProbe = "unset SSH_CLIENT SSH2_CLIENT; exec /bin/sh -c " + shq(`f=${`+agent.BootIDFileVar+`:-/proc/sys/kernel/random/boot_id}
b=$(cat "$f" 2>/dev/null) h=$(uname -n 2>/dev/null)
printf '\0MEVEDEL-PROBE %s %s' "${b:--}" "${h:--}"
for t in `+strings.Join(ProbedPrograms, " ")+`; do
  p=$PATH; [ "$t" = setsid ] && p=$PATH:/usr/bin:/bin
  (PATH=$p; command -v "$t") >/dev/null 2>&1 || printf ' %s' "$t"
done
printf '\0MEVEDEL-PROBE-END\0'`+"\n") + " </dev/null 2>/dev/null"

func parseWrapperProbe(out []byte) (Readiness, error) {
	i := bytes.Index(out, []byte(probeBegin))
	if i < 0 {
		return Readiness{}, errors.New("the readiness probe did not answer")
	}
	f := strings.Fields(string(out[i+len(probeBegin):]))
	if len(f) < 2 {
		return Readiness{}, fmt.Errorf("the readiness probe's answer %q is malformed", out[i:])
	}
	undash := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	inc := Incarnation{BootID: undash(f[0]), Hostname: undash(f[1])}
	return readiness(ModeWrapper, inc, f[2:]), nil
}

// probeEngine probes a container whose commands go through the wrapper:
// the wrapper's probe over one engine exec, kept while the container's
// control shell runs (a new incarnation starts another).
func (p *Pool) probeEngine(ctx context.Context, r resolved) (Readiness, error) {
	inc, err := p.engineUp(ctx, r)
	if err != nil {
		return Readiness{}, err
	}
	es, err := p.engine(r)
	if err != nil {
		return Readiness{}, err
	}
	es.ctl.mu.Lock()
	run := es.ctl.run
	es.ctl.mu.Unlock()
	if run == nil {
		return Readiness{}, unavailablef("remote: %s: the control shell ended", r.Target)
	}
	out, errOut, _, err := p.runShort(ctx, p.engineExec(r, false, "/bin/sh", "-c", wrapperProbe))
	if err != nil {
		return Readiness{}, unavailablef("remote: %s: the readiness probe: %v", r.Target, err)
	}
	rd, err := parseWrapperProbe(out)
	if err != nil {
		return Readiness{}, unavailablef("remote: %s: %v (%s)", r.Target, err, bytes.TrimSpace(errOut))
	}
	// The engine's incarnation, with the host's boot and the container's
	// name as the probe read them.
	inc.BootID, inc.Hostname = rd.Incarnation.BootID, rd.Incarnation.Hostname
	rd.Incarnation = inc
	p.remember(r, ctlCarrier{run}, rd)
	return rd, nil
}

// ctlCarrier is a control shell as the carrier a probe is kept with.
type ctlCarrier struct{ run *ctlRun }

func (c ctlCarrier) isDead() bool { return c.run.failed() }

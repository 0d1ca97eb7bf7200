package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/sourcegraph/jsonrpc2"
)

// The soak test: a bounded minute of seeded random work against real
// helpers, three of which are killed with SIGKILL and replaced by a new
// helper on the same state directory. Where the property test
// (property_test.go) decides every ordering question of delivery and
// attention, this one runs volume: many commands, foreground and
// yielded, on pipes and terminals, polled, stopped by their owner and by
// the person, cancelled while a start or an observation waits, their
// results delivered and acknowledged (sometimes refused first). It checks
// what a user would notice after an hour of it: every command's result
// reached its owner exactly once (a start, observation or stop reply, or
// one delivery) or was recovered as lost after a crash; no process
// outlived its helper's successor or the last shutdown; each helper's
// memory stayed bounded.
//
// Like the property test it removes doubt by schedule rather than check:
// a crash comes once every command that ends on its own has ended and its
// result was received and acknowledged, and the journal is checkpointed,
// so what is live at the kill is exactly what the next open must recover.

const (
	soakBudget  = 60 * time.Second
	soakCrashes = 3
	soakLongMax = 8  // commands that only end when stopped or let through
	soakRate    = 40 // steps a second, at most
)

// soakRun is one command the test started.
type soakRun struct {
	id, owner, command string
	i, gen             int
	long               bool   // ends only when stopped, or its gate opens
	gate               string // a long one's gate; "" when it sleeps
	released           bool   // its gate was opened: it ends on its own
	yielded            bool   // it has an id the owner can poll
	noPoll             bool   // a person stopped it: an owner's poll would withdraw its delivery

	// Guarded by soak.mu.
	claims int // replies that handed the owner its result
	final  *execution.Facts
	lost   bool
}

type soakHelper struct {
	c      *client.Client
	home   string
	stderr *testsupport.Buffer
	gen    int
}

type soak struct {
	t        *testing.T
	rng      *rand.Rand
	stateDir string
	env      map[string]string
	gen      int
	h        *soakHelper
	homes    []string
	observes int     // cancelled observations made
	peaks    []int64 // each helper's peak RSS, in MiB

	async sync.WaitGroup // foreground starts in flight

	mu      sync.Mutex
	cond    *sync.Cond
	ackRng  *rand.Rand // guarded by mu: the sink's choices
	runs    []*soakRun
	byID    map[string]*soakRun
	running map[string]string          // command -> id, for commands seen past queued
	deliv   map[string]map[string]bool // execution id -> delivery ids received (a delivery may come before its start's reply)
	finals  map[string]execution.Facts // execution id -> facts of its delivered result
	lostIDs map[string]bool
	acked   map[string]bool // delivery ids whose durable ack was answered
	unacked int             // acks sent and not answered
	counts  map[string]int
}

func (s *soak) count(what string) {
	s.mu.Lock()
	s.counts[what]++
	s.mu.Unlock()
}

// ended reports whether r's result reached its owner; mu is held.
func (s *soak) ended(r *soakRun) bool { return r.claims+len(s.deliv[r.id]) > 0 }

func TestSoak(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MEVEDEL_SOAK_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("MEVEDEL_SOAK_SEED: %v", err)
		}
	}
	t.Logf("seed %d (MEVEDEL_SOAK_SEED=%d reruns its choices; timing still varies)", seed, seed)
	s := &soak{t: t, rng: rand.New(rand.NewPCG(seed, 7)), stateDir: filepath.Join(t.TempDir(), "state"),
		env: map[string]string{"MEVEDEL_E2E": "1"}, byID: map[string]*soakRun{}, running: map[string]string{},
		deliv: map[string]map[string]bool{}, finals: map[string]execution.Facts{}, lostIDs: map[string]bool{},
		acked: map[string]bool{}, counts: map[string]int{}, ackRng: rand.New(rand.NewPCG(seed, 8))}
	s.cond = sync.NewCond(&s.mu)
	s.startHelper()

	began := time.Now()
	var crashAt []time.Duration
	for k := 1; k <= soakCrashes; k++ {
		jitter := time.Duration(s.rng.IntN(int(soakBudget / 10)))
		crashAt = append(crashAt, time.Duration(k)*soakBudget/(soakCrashes+1)+jitter-soakBudget/20)
	}
	// Paced: at most soakRate steps a second, so that what is measured
	// (memory above all) does not depend on how idle the machine is.
	pace := time.NewTicker(time.Second / soakRate)
	defer pace.Stop()
	for time.Since(began) < soakBudget {
		if len(crashAt) > 0 && time.Since(began) >= crashAt[0] {
			crashAt = crashAt[1:]
			s.crash()
			continue
		}
		s.step()
		<-pace.C
	}
	s.finale()
}

// startHelper starts the next helper and opens the session on the state
// directory, returning what its open recovered.
func (s *soak) startHelper() []execution.Facts {
	t := s.t
	s.gen++
	home := t.TempDir()
	h := &soakHelper{home: home, stderr: &testsupport.Buffer{}, gen: s.gen}
	c, err := client.Start(client.Options{Bin: helperBin, Env: baseEnv(home), Stderr: h.stderr},
		func(c *client.Client, n client.Notification) { s.note(c, n) })
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	s.h, s.homes = h, append(s.homes, home)
	t.Cleanup(func() {
		select {
		case <-c.Child().Exited():
		default: // the test stopped midway
			_ = c.Shutdown(waitBound)
		}
		if s := h.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic") || strings.Contains(s, "BUG") {
			t.Errorf("helper %d stderr:\n%s", h.gen, s)
		}
	})
	// Settled commands leave the registry, and their logs are queued for
	// compression, after 1 s rather than a minute: this runs some 40
	// commands a second, and the memory checked is the helper's with a
	// second of them, not a minute (each is held until then by design).
	var info execution.SessionInfo
	opened := time.Now()
	if err := s.call("session/open", map[string]any{"sessionId": "soak", "stateDir": s.stateDir,
		"limits": map[string]any{"ackTimeoutMs": 250, "retryMs": 20, "maxLive": 64, "graceMs": 500,
			"retainMs": 1000, "retireAfterMs": 1000}}, &info); err != nil {
		t.Fatalf("helper %d: session/open: %v\n%s", h.gen, err, h.stderr.String())
	}
	t.Logf("helper %d opened the session in %v, recovering %d", h.gen, time.Since(opened).Round(time.Millisecond), len(info.Recovered))
	return info.Recovered
}

func (s *soak) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s *soak) call(method string, params, result any, opts ...jsonrpc2.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	return s.h.c.Call(ctx, method, params, result, opts...)
}

// note handles a notification on the client's read loop: it never blocks.
func (s *soak) note(c *client.Client, n client.Notification) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.cond.Broadcast()
	switch n.Method {
	case "exec/changed":
		var p struct{ Changed []execution.Facts }
		if json.Unmarshal(n.Params, &p) == nil {
			for _, f := range p.Changed {
				if f.State != execution.Queued {
					s.running[f.Command] = f.ExecutionID
				}
			}
		}
	case "mailbox/deliver":
		var d delivery
		if err := json.Unmarshal(n.Params, &d); err != nil {
			s.t.Errorf("delivery %s: %v", n.Params, err)
			return
		}
		id := d.Attrs.ExecutionID
		if d.Kind != execution.KindExecution || id == "" || d.Observation == nil || !d.Observation.Final {
			s.t.Errorf("delivery of something the test did not start: %s", n.Params)
			return
		}
		if s.lostIDs[id] {
			s.t.Errorf("%s was recovered as lost, yet its result came as %s", id, d.DeliveryID)
		}
		if s.deliv[id] == nil {
			s.deliv[id] = map[string]bool{}
		}
		if !s.deliv[id][d.DeliveryID] {
			s.counts["deliveries"]++
		}
		s.deliv[id][d.DeliveryID] = true
		s.finals[id] = d.Observation.Facts
		// Most are kept at once; some are refused first, so the helper
		// sends them again.
		durable := s.ackRng.IntN(6) > 0
		s.unacked++
		go func() {
			p := map[string]any{"sessionId": "soak", "deliveryId": d.DeliveryID}
			if durable {
				p["durable"] = true
			} else {
				p["error"] = "the soak test refused it"
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			err := c.Call(ctx, "mailbox/ack", p, nil)
			s.mu.Lock()
			defer s.mu.Unlock()
			defer s.cond.Broadcast()
			s.unacked--
			if err == nil && durable {
				s.acked[d.DeliveryID] = true
			}
		}()
	}
}

// claim records a reply that handed the owner r's final result. An
// observation repeating a result already delivered is no claim: the
// delivery came first on the stream.
func (s *soak) claim(r *soakRun, o obs, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.cond.Broadcast()
	if o.DeliveryID != "" || len(s.deliv[r.id]) > 0 {
		return
	}
	r.claims++
	f := o.Facts
	r.final = &f
	s.counts[how]++
}

// waitUntil waits until cond (called under mu) holds, bounded.
func (s *soak) waitUntil(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(waitBound)
	timer := time.AfterFunc(waitBound, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("gave up waiting for %s", what)
		}
		s.cond.Wait()
	}
}

// live is this helper's runs whose result has not reached the owner.
func (s *soak) live() []*soakRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*soakRun
	for _, r := range s.runs {
		if r.gen == s.gen && r.yielded && !s.ended(r) && !r.lost {
			out = append(out, r)
		}
	}
	return out
}

// liveLong is this helper's yielded commands that run until stopped.
func (s *soak) liveLong() []*soakRun {
	var out []*soakRun
	for _, r := range s.live() {
		if r.long && !r.released && !r.noPoll {
			out = append(out, r)
		}
	}
	return out
}

func (s *soak) step() {
	live := s.live()
	var long, gated, pollable []*soakRun
	for _, r := range live {
		if r.long && !r.released && !r.noPoll {
			long = append(long, r)
			if r.gate != "" {
				gated = append(gated, r)
			}
		}
		if !r.noPoll {
			pollable = append(pollable, r)
		}
	}
	switch k := s.rng.IntN(100); {
	case k < 40:
		s.startShort()
	case k < 50 && len(long) < soakLongMax:
		s.startLong()
	case k < 53:
		s.cancelStart()
	case k < 68 && len(pollable) > 0:
		s.poll(pick(s.rng, pollable))
	case k < 72 && len(long) > 0:
		s.cancelObserve(pick(s.rng, long))
	case k < 80 && len(long) > 0:
		s.modelStop(pick(s.rng, long))
	case k < 86 && len(long) > 0:
		s.personStop(pick(s.rng, long))
	case k < 95 && len(gated) > 0:
		s.release(pick(s.rng, gated))
	case k == 95:
		s.stopAll()
	default:
		s.startShort()
	}
}

func (s *soak) owner() string {
	if s.rng.IntN(4) == 0 {
		return "/root/worker"
	}
	return execution.RootOwner
}

// newRun registers a run before its start is sent: its deliveries may
// come before the reply.
func (s *soak) newRun(command string, long bool, gate string) *soakRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &soakRun{owner: s.owner(), command: command, i: len(s.runs), gen: s.gen, long: long, gate: gate}
	s.runs = append(s.runs, r)
	return r
}

func (s *soak) registered(r *soakRun, id string, yielded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.id, r.yielded = id, yielded
	s.byID[id] = r
}

func (s *soak) startParams(r *soakRun, tty bool) map[string]any {
	return map[string]any{"sessionId": "soak", "owner": r.owner, "command": r.command, "tty": tty,
		"readOnly": true, "cwd": s.h.home, "env": s.env, "maxOutputChars": 400}
}

// startShort starts a command that ends on its own: in the foreground
// (its reply is its end), or yielding at once or after a moment.
func (s *soak) startShort() {
	i := len(s.runs)
	r := s.newRun(fmt.Sprintf("echo out-%d; seq %d; exit %d", i, s.rng.IntN(3000), i%3), false, "")
	p := s.startParams(r, s.rng.IntN(4) == 0)
	switch s.rng.IntN(3) {
	case 0: // foreground: the reply comes at the end
		s.count("foreground")
		s.async.Go(func() {
			var o obs
			if err := s.call("exec/start", p, &o); err != nil {
				s.t.Errorf("foreground start: %v", err)
				return
			}
			s.registered(r, o.Facts.ExecutionID, false)
			if !o.Final {
				s.t.Errorf("a foreground start answered before the end: %+v", o.Facts)
			}
			s.claim(r, o, "start replies")
		})
		return
	case 1:
		p["yieldMs"] = 0
	default:
		p["yieldMs"] = 20
	}
	var o obs
	s.must(s.call("exec/start", p, &o))
	s.registered(r, o.Facts.ExecutionID, !o.Final)
	if o.Final {
		s.claim(r, o, "start replies")
	}
}

// startLong starts, yielded, a command that ends only when stopped or
// let through its gate.
func (s *soak) startLong() {
	i := len(s.runs)
	gate := ""
	command := fmt.Sprintf(": long-%d; exec sleep 600", i)
	if s.rng.IntN(2) == 0 {
		gate = fifo(s.t, "gate")
		command = fmt.Sprintf("echo long-%d; read -r _ < %s; echo let through", i, gate)
	}
	r := s.newRun(command, true, gate)
	p := s.startParams(r, s.rng.IntN(3) == 0)
	p["yieldMs"] = 0
	var o obs
	s.must(s.call("exec/start", p, &o))
	if o.Final {
		s.t.Fatalf("%q ended at once: %+v", command, o.Facts)
	}
	s.registered(r, o.Facts.ExecutionID, true)
}

// cancelStart cancels a foreground start while it waits: the command is
// aborted and the reply is its end.
func (s *soak) cancelStart() {
	i := len(s.runs)
	r := s.newRun(fmt.Sprintf(": cancelled-%d; exec sleep 600", i), true, "")
	p := s.startParams(r, s.rng.IntN(3) == 0)
	id := fmt.Sprintf("start-%d-%d", s.gen, i)
	done := make(chan error, 1)
	var o obs
	go func() { done <- s.call("exec/start", p, &o, jsonrpc2.PickID(jsonrpc2.ID{Str: id, IsString: true})) }()
	s.waitUntil("a start to run", func() bool { return s.running[r.command] != "" })
	s.must(s.h.c.Notify(context.Background(), "$/cancelRequest", map[string]any{"id": id}))
	select {
	case err := <-done:
		s.must(err)
	case <-time.After(waitBound):
		s.t.Fatal("a cancelled start got no reply")
	}
	s.registered(r, o.Facts.ExecutionID, false)
	if !o.Final || o.Facts.Termination != execution.Aborted {
		s.t.Fatalf("cancelled start answered %+v", o.Facts)
	}
	s.claim(r, o, "cancelled starts")
}

// poll is the owner's observation, without waiting.
func (s *soak) poll(r *soakRun) {
	var o obs
	s.must(s.call("exec/observe", map[string]any{"sessionId": "soak", "owner": r.owner, "executionId": r.id}, &o))
	s.count("polls")
	if o.Final {
		s.claim(r, o, "final polls")
	}
}

// cancelObserve cancels the owner's waiting observation of a long
// command: it answers at once, not final.
func (s *soak) cancelObserve(r *soakRun) {
	s.observes++
	id := fmt.Sprintf("observe-%d-%d", s.gen, s.observes)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	// Dispatch returns once the request is written: the cancel follows it.
	w, err := s.h.c.Dispatch(ctx, "exec/observe",
		map[string]any{"sessionId": "soak", "owner": r.owner, "executionId": r.id, "waitMs": 60000},
		jsonrpc2.PickID(jsonrpc2.ID{Str: id, IsString: true}))
	s.must(err)
	s.must(s.h.c.Notify(ctx, "$/cancelRequest", map[string]any{"id": id}))
	var o obs
	s.must(w.Wait(ctx, &o))
	if o.Final {
		s.t.Fatalf("cancelled observation of %s answered a final result", r.id)
	}
	s.count("cancelled observations")
}

// modelStop is the owner's stop: its reply is the result.
func (s *soak) modelStop(r *soakRun) {
	var o obs
	s.must(s.call("exec/stop", map[string]any{"sessionId": "soak", "owner": r.owner, "executionId": r.id}, &o))
	if !o.Final || o.Facts.Termination != execution.Stopped {
		s.t.Fatalf("the owner's stop of %s answered %+v", r.id, o.Facts)
	}
	s.claim(r, o, "owner stops")
}

// personStop is the person's stop: the owner gets the result delivered.
func (s *soak) personStop(r *soakRun) {
	s.mu.Lock()
	r.noPoll = true
	s.mu.Unlock()
	var o obs
	s.must(s.call("exec/stop", map[string]any{"sessionId": "soak", "as": "user", "executionId": r.id}, &o))
	if !o.Final || o.Facts.Termination != execution.Stopped {
		s.t.Fatalf("the person's stop of %s answered %+v", r.id, o.Facts)
	}
	s.count("person stops")
}

// release opens a long command's gate: it ends on its own.
func (s *soak) release(r *soakRun) {
	s.mu.Lock()
	r.released = true
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(r.gate, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		s.must(err)
	case <-time.After(waitBound):
		s.t.Fatalf("nobody read the gate of %s", r.id)
	}
	s.count("released")
}

// stopAll is the person stopping everything: each result is delivered.
func (s *soak) stopAll() {
	s.mu.Lock()
	for _, r := range s.runs {
		if r.gen == s.gen {
			r.noPoll = true
		}
	}
	s.mu.Unlock()
	s.must(s.call("exec/stopAll", map[string]any{"sessionId": "soak", "as": "user"}, nil))
	s.count("stop alls")
}

// quiesce waits until every command of this helper that ends on its own
// has ended, every result received is durably acknowledged, and every
// command is past queued (its row, with its group leader, journaled).
func (s *soak) quiesce() {
	s.async.Wait()
	s.waitUntil("results and acks before a crash", func() bool {
		if s.unacked > 0 {
			return false
		}
		for _, r := range s.runs {
			if r.gen != s.gen || r.lost {
				continue
			}
			if r.id == "" || s.running[r.command] == "" && !s.ended(r) {
				return false
			}
			if (!r.long || r.released || r.noPoll) && !s.ended(r) {
				return false
			}
			for id := range s.deliv[r.id] {
				if !s.acked[id] {
					return false
				}
			}
		}
		return true
	})
	s.async.Wait()
}

// crash kills the helper with SIGKILL once quiet, and starts the next on
// the same state directory: its open must recover exactly the commands
// left running, as lost, and kill their processes.
func (s *soak) crash() {
	t := s.t
	// A person's stop may leave its result still to deliver: those end
	// before the crash too.
	s.quiesce()
	// Work for the next open to recover: commands that run until stopped,
	// maybe a foreground start still waiting, maybe the owner waiting on
	// one; each seen running (its row journaled) before the checkpoint.
	for n := 2 + s.rng.IntN(4); len(s.liveLong()) < n; {
		s.startLong()
	}
	var waiting []jsonrpc2.Waiter
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if s.rng.IntN(2) == 0 {
		r := s.newRun(fmt.Sprintf(": waiting-%d; exec sleep 600", len(s.runs)), true, "")
		w, err := s.h.c.Dispatch(ctx, "exec/start", s.startParams(r, s.rng.IntN(2) == 0))
		s.must(err)
		waiting = append(waiting, w)
		s.waitUntil("the waiting start to run", func() bool { return s.running[r.command] != "" })
		s.mu.Lock()
		id := s.running[r.command]
		s.mu.Unlock()
		s.registered(r, id, false)
	}
	if long := s.liveLong(); s.rng.IntN(2) == 0 {
		r := pick(s.rng, long)
		w, err := s.h.c.Dispatch(ctx, "exec/observe", map[string]any{"sessionId": "soak", "owner": r.owner,
			"executionId": r.id, "waitMs": 60000})
		s.must(err)
		waiting = append(waiting, w)
	}
	s.waitUntil("every command running before a crash", func() bool {
		for _, r := range s.runs {
			if r.gen == s.gen && !s.ended(r) && s.running[r.command] == "" {
				return false
			}
		}
		return true
	})
	s.must(s.call("transcript/checkpoint", map[string]any{"sessionId": "soak"}, nil))
	old := s.h
	s.checkRSS()
	var want []string
	s.mu.Lock()
	for _, r := range s.runs {
		if r.gen == old.gen && !s.ended(r) {
			want = append(want, r.id)
		}
	}
	s.mu.Unlock()
	_ = old.c.Child().Kill()
	<-old.c.Child().Exited()
	// What waited gets no answer: the connection is gone.
	for _, w := range waiting {
		var o obs
		if err := w.Wait(ctx, &o); err == nil {
			t.Errorf("a request waiting when the helper was killed was answered: %+v", o.Facts)
		}
	}
	_ = old.c.Close()
	s.count("crashes")

	recovered := s.startHelper()
	var got []string
	s.mu.Lock()
	for _, f := range recovered {
		r := s.byID[f.ExecutionID]
		switch {
		case r == nil || r.gen != old.gen:
			t.Errorf("recovered %s, not one of helper %d's", f.ExecutionID, old.gen)
		case f.Termination != execution.Lost:
			t.Errorf("recovered %s as %s", f.ExecutionID, f.Termination)
		case s.ended(r):
			t.Errorf("recovered %s as lost, yet its result had reached its owner", f.ExecutionID)
		default:
			r.lost, s.lostIDs[r.id] = true, true
			s.counts["lost"]++
		}
		got = append(got, f.ExecutionID)
	}
	s.mu.Unlock()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after crash %d the open recovered %v, want the commands left running %v", old.gen, got, want)
	}
	// The new open killed what the dead helper left running.
	if left := testsupport.UnderHome(old.home, true); len(left) > 0 {
		t.Errorf("processes of helper %d alive after the next open: %v", old.gen, left)
	}
}

// checkRSS checks the running helper's peak resident size.
func (s *soak) checkRSS() {
	rss := peakRSS(s.t, s.h.c.Child().Pid())
	s.peaks = append(s.peaks, rss>>20)
	if rss > rssBound {
		s.t.Errorf("helper %d peak RSS %d MiB, bound %d MiB", s.h.gen, rss>>20, rssBound>>20)
	}
}

// finale stops what still runs, waits for every result, shuts down, and
// checks that each command ended exactly once and nothing was left.
func (s *soak) finale() {
	t := s.t
	s.stopAll()
	s.quiesce()
	s.checkRSS()
	if err := s.h.c.Shutdown(waitBound); err != nil {
		t.Errorf("the last helper did not shut down: %v", err)
	}
	for _, home := range s.homes {
		if left := testsupport.UnderHome(home, true); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		ends := r.claims + len(s.deliv[r.id])
		final := r.final
		if f, ok := s.finals[r.id]; ok {
			final = &f
		}
		switch {
		case r.id == "":
			t.Errorf("run %d (%q) never got an id", r.i, r.command)
		case r.lost && ends != 0:
			t.Errorf("%s was recovered as lost and also reached its owner %d times", r.id, ends)
		case !r.lost && ends != 1:
			t.Errorf("%s (%q) reached its owner %d times (%d replies, deliveries %v), want once",
				r.id, r.command, ends, r.claims, slices.Sorted(maps.Keys(s.deliv[r.id])))
		case !r.long && final != nil && final.Termination == execution.Exited &&
			(final.ExitCode == nil || *final.ExitCode != r.i%3):
			t.Errorf("%s (%q) ended %+v, want exit code %d", r.id, r.command, final.ExitCode, r.i%3)
		}
	}
	t.Logf("%d commands over %d helpers (peak RSS %v MiB): %v", len(s.runs), s.gen, s.peaks, s.counts)
}

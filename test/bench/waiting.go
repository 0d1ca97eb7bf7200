package main

// The waiting benchmark: how soon the helper says a terminal command waits
// for input, how soon a start with readyPort yields once the server
// listens, and what the waiting-for-input detection costs in CPU with 64
// live tty executions.
//
//   - prompt → waitingForInput: the command writes $EPOCHREALTIME, then its
//     prompt, then reads; the figure is the time from that stamp to the
//     exec/changed that first shows it waiting (default waitingAfterMs
//     500, so the floor is half a second by design);
//   - listen() → ready yield: a Python server stamps time.time() right
//     after listen(); the figure is the time from that stamp to the
//     exec/start reply (readyPort, yieldMs 60000);
//   - detection CPU: the helper's CPU time (utime + stime) over a quiet
//     window with 64 live tty executions (32 waiting at a prompt, 32
//     sleeping: both are looked at every 8 s once quiet), against the
//     same window with 64 pipe-mode sleepers, which are never looked at.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
)

const (
	waitingRuns      = 20
	readyRuns        = 20
	cpuExecutions    = 64
	cpuWindow        = 20 * time.Second
	cpuSettle        = 5 * time.Second // after the starts, before the window
	targetWaitingP50 = 600 * time.Millisecond
	targetReadyP50   = 100 * time.Millisecond
	targetCPUShare   = 0.01 // of one core
)

// watcher is a helper whose notifications the benchmark reads: when each
// execution was first shown waiting, and deliveries to acknowledge.
type watcher struct {
	c      *client.Client
	stderr *testsupport.Buffer
	sid    string

	mu      sync.Mutex
	waiting map[string]time.Time // guarded by mu; first exec/changed showing it waiting
	cond    *sync.Cond
}

func startWatcher(ctx context.Context, bin, home string) (*watcher, error) {
	w := &watcher{stderr: &testsupport.Buffer{}, waiting: map[string]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	c, err := client.Start(client.Options{Bin: bin, Env: minimalEnv(home), Dir: home, Stderr: w.stderr, OwnGroup: true},
		func(c *client.Client, n client.Notification) { w.note(c, n) })
	if err != nil {
		return nil, err
	}
	w.c = c
	return w, nil
}

func (w *watcher) note(c *client.Client, n client.Notification) {
	now := time.Now()
	switch n.Method {
	case rpc.NotifyChanged:
		var p rpc.ChangedParams
		if json.Unmarshal(n.Params, &p) != nil {
			return
		}
		w.mu.Lock()
		for _, f := range p.Changed {
			if _, seen := w.waiting[f.ExecutionID]; f.WaitingForInput && !seen {
				w.waiting[f.ExecutionID] = now
			}
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	case rpc.NotifyDeliver:
		// Acknowledged at once, as Emacs would: a delivery left pending is
		// sent again, which is not what is measured.
		var d execution.Delivery
		if json.Unmarshal(n.Params, &d) == nil {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				defer cancel()
				_ = c.Call(ctx, rpc.MethodMailboxAck, rpc.MailboxAckParams{SessionID: d.SessionID, DeliveryID: d.DeliveryID, Durable: true}, nil)
			}()
		}
	}
}

// waitedAt waits for id to be shown waiting and returns when it was.
func (w *watcher) waitedAt(ctx context.Context, id string) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	stop := context.AfterFunc(ctx, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer stop()
	t := time.AfterFunc(30*time.Second, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if at, ok := w.waiting[id]; ok {
			return at, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("%s was not shown waiting within 30 s", id)
		}
		w.cond.Wait()
	}
}

func (w *watcher) call(ctx context.Context, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := w.c.Call(ctx, method, params, result); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

func (w *watcher) start(ctx context.Context, p rpc.ExecStartParams) (execution.Observation, error) {
	p.SessionID = w.sid
	var o execution.Observation
	err := w.call(ctx, rpc.MethodExecStart, p, &o)
	return o, err
}

func (w *watcher) stopAll(ctx context.Context) error {
	return w.call(ctx, rpc.MethodExecStopAll, rpc.ExecStopAllParams{SessionID: w.sid}, nil)
}

// readStamp reads a Unix time in seconds (fractional) from path.
func readStamp(path string) (time.Time, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(strings.TrimSpace(string(b))) > 0 {
			f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("%s: %w", path, err)
			}
			return time.Unix(0, int64(f*1e9)), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no stamp in %s", path)
		}
		time.Sleep(10 * time.Millisecond) // the command writes it; a poll bounded above
	}
}

// cpuTicks returns pid's utime + stime in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st, nil
}

// clockTicks is USER_HZ, 100 on every Linux the helper supports.
const clockTicks = 100

func (b *bench) waiting(ctx context.Context) ([]row, error) {
	home := filepath.Join(b.work, "waiting-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	w, err := startWatcher(ctx, b.bin, home)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.c.Shutdown(30 * time.Second) }()
	w.sid = "bench-waiting"
	var info execution.SessionInfo
	if err := w.call(ctx, rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: w.sid, StateDir: filepath.Join(b.work, "waiting-state")}, &info); err != nil {
		return nil, err
	}
	zero := int64(0)

	// prompt → waitingForInput
	progress("waiting: %d prompts", waitingRuns)
	var prompt []time.Duration
	for i := range waitingRuns {
		stamp := filepath.Join(home, fmt.Sprintf("prompt-%d", i))
		o, err := w.start(ctx, rpc.ExecStartParams{Command: fmt.Sprintf(`echo $EPOCHREALTIME > %s; printf 'Continue? [y/N] '; read x`, stamp), TTY: true, YieldMs: &zero, Cwd: home})
		if err != nil {
			return nil, err
		}
		at, err := w.waitedAt(ctx, o.Facts.ExecutionID)
		if err != nil {
			return nil, err
		}
		t0, err := readStamp(stamp)
		if err != nil {
			return nil, err
		}
		prompt = append(prompt, at.Sub(t0))
		if err := w.stopAll(ctx); err != nil {
			return nil, err
		}
	}

	// listen() → ready yield
	progress("waiting: %d ready yields", readyRuns)
	var ready []time.Duration
	long := int64(60000)
	for i := range readyRuns {
		stamp := filepath.Join(home, fmt.Sprintf("listen-%d", i))
		port, err := freeTCPPort()
		if err != nil {
			return nil, err
		}
		cmd := fmt.Sprintf(`exec python3 -c 'import socket,time
s=socket.socket(); s.bind(("127.0.0.1", %d)); s.listen(); t=time.time()
open(%q, "w").write(repr(t)); time.sleep(100)'`, port, stamp)
		o, err := w.start(ctx, rpc.ExecStartParams{Command: cmd, ReadyPort: port, YieldMs: &long, Cwd: home})
		at := time.Now()
		if err != nil {
			return nil, err
		}
		if !o.Facts.Ready {
			return nil, fmt.Errorf("ready run %d: start returned without ready: %+v", i, o.Facts)
		}
		t0, err := readStamp(stamp)
		if err != nil {
			return nil, err
		}
		ready = append(ready, at.Sub(t0))
		if err := w.stopAll(ctx); err != nil {
			return nil, err
		}
	}

	// CPU of the detection.
	measure := func(tty bool) (float64, error) {
		for i := range cpuExecutions {
			cmd := "sleep 1000"
			if tty && i%2 == 0 {
				cmd = "read -p 'Name? ' x"
			}
			if _, err := w.start(ctx, rpc.ExecStartParams{Command: cmd, TTY: tty, YieldMs: &zero, Cwd: home}); err != nil {
				return 0, err
			}
		}
		if err := sleepCtx(ctx, cpuSettle); err != nil {
			return 0, err
		}
		pid := w.c.Child().Pid()
		c0, err := cpuTicks(pid)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := sleepCtx(ctx, cpuWindow); err != nil {
			return 0, err
		}
		c1, err := cpuTicks(pid)
		if err != nil {
			return 0, err
		}
		share := float64(c1-c0) / clockTicks / time.Since(t0).Seconds()
		return share, w.stopAll(ctx)
	}
	progress("waiting: CPU with %d tty executions over %v", cpuExecutions, cpuWindow)
	ttyShare, err := measure(true)
	if err != nil {
		return nil, err
	}
	progress("waiting: CPU with %d pipe-mode executions over %v", cpuExecutions, cpuWindow)
	pipeShare, err := measure(false)
	if err != nil {
		return nil, err
	}
	cost := max(0, ttyShare-pipeShare)

	pp50, rp50 := median(prompt), median(ready)
	return []row{
		{fmt.Sprintf("prompt → waitingForInput event, p50 (n=%d)", waitingRuns), ms(pp50), "-", "-", "≤ " + ms(targetWaitingP50), verdict(pp50 <= targetWaitingP50)},
		{"the same, p90", ms(percentile(prompt, 90)), "-", "-", "", ""},
		{fmt.Sprintf("listen() → ready yield, p50 (n=%d)", readyRuns), ms(rp50), "-", "-", "≤ " + ms(targetReadyP50), verdict(rp50 <= targetReadyP50)},
		{"the same, p90", ms(percentile(ready, 90)), "-", "-", "", ""},
		{fmt.Sprintf("helper CPU, %d live tty executions (half at a prompt)", cpuExecutions), fmt.Sprintf("%.2f%%", 100*ttyShare), fmt.Sprintf("%.2f%% (pipe mode)", 100*pipeShare), "-", "", ""},
		{"detection's share of one core (the difference)", fmt.Sprintf("%.2f%%", 100*cost), "-", "-", fmt.Sprintf("< %.0f%%", 100*targetCPUShare), verdict(cost < targetCPUShare)},
	}, nil
}

// freeTCPPort returns a TCP port nothing listens on now.
func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package main

// The clients benchmark: two clients of one daemon at once. The agent
// client's command floods output (every change of it an exec/changed to
// both clients) while the agent measures exec/observe round trips of a
// quiet execution; the observer lists every session as `mevedel-exec ps`
// does, as fast as it can. The agent's round trip with the observer at
// work is set beside the same agent alone (the flood running in both),
// in interleaved rounds.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
)

const (
	clientsRounds = 3
	clientsPhase  = 2 * time.Second // of back-to-back observes, per round and phase
	// floodCommand prints 100-byte lines without end; each round restarts
	// it, so its output limit (1 GiB) is never reached.
	floodCommand  = `line=$(printf '%099d' 0); while :; do echo "$line"; done`
	targetClients = 2.0 // the agent's p50 with the observer, over alone
)

// daemonClient is one connection to the daemon.
type daemonClient struct {
	c *client.Client
}

func (d daemonClient) call(ctx context.Context, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := d.c.Call(ctx, method, params, result); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

func (b *bench) clients(ctx context.Context) (rows []row, err error) {
	home, err := b.newHome("clients")
	if err != nil {
		return nil, err
	}
	runtimeDir := filepath.Join(home, "run")
	if err := os.Mkdir(runtimeDir, 0o700); err != nil {
		return nil, err
	}
	env := append(minimalEnv(home), "XDG_RUNTIME_DIR="+runtimeDir)
	progress("clients: starting the daemon")
	start := exec.CommandContext(ctx, b.bin, "daemon")
	start.Env, start.Dir = env, home
	out, err := start.Output()
	if err != nil {
		return nil, fmt.Errorf("mevedel-exec daemon: %w", err)
	}
	sock := strings.TrimSpace(string(out))
	dial := func(h client.Handler) (daemonClient, error) {
		c, err := client.Dial(ctx, sock, h)
		if err != nil {
			return daemonClient{}, err
		}
		d := daemonClient{c}
		return d, d.call(ctx, rpc.MethodInitialize, rpc.InitializeParams{ClientName: "mevedel-bench", ProtocolVersion: rpc.ProtocolVersion}, nil)
	}
	agent, err := dial(func(*client.Client, client.Notification) {})
	if err != nil {
		return nil, err
	}
	var pid int
	defer func() {
		agent.c.Close()
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			if !testsupport.WaitGone(pid, 30*time.Second) {
				err = errors.Join(err, fmt.Errorf("the daemon %d did not exit after SIGTERM", pid))
			}
		}
	}()
	var st rpc.DaemonStatusResult
	if err := agent.call(ctx, rpc.MethodDaemonStatus, nil, &st); err != nil {
		return nil, err
	}
	pid = st.Pid
	sid := "bench-clients"
	stateDir := filepath.Join(home, "state")
	if err := agent.call(ctx, rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: sid, StateDir: stateDir,
		Limits: execution.Limits{OutputLimitBytes: 1 << 30}}, nil); err != nil {
		return nil, err
	}
	zero := int64(0)
	startCmd := func(command string) (string, error) {
		var o execution.Observation
		err := agent.call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{SessionID: sid, Command: command, Cwd: home, YieldMs: &zero}, &o)
		return o.Facts.ExecutionID, err
	}
	quiet, err := startCmd("exec sleep 100000")
	if err != nil {
		return nil, err
	}
	observe := func() (time.Duration, error) {
		t0 := time.Now()
		err := agent.call(ctx, rpc.MethodExecObserve, rpc.ExecObserveParams{SessionID: sid, ExecutionID: quiet}, nil)
		return time.Since(t0), err
	}

	observer, err := dial(func(*client.Client, client.Notification) {})
	if err != nil {
		return nil, err
	}
	defer observer.c.Close()
	if err := observer.call(ctx, rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: sid, StateDir: stateDir, Role: rpc.RoleObserver}, nil); err != nil {
		return nil, err
	}
	// What `mevedel-exec ps --all` asks, over and over, until stop.
	ps := func(stop <-chan struct{}, took *[]time.Duration) error {
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			t0 := time.Now()
			var st rpc.DaemonStatusResult
			if err := observer.call(ctx, rpc.MethodDaemonStatus, nil, &st); err != nil {
				return err
			}
			for _, s := range st.Sessions {
				if err := observer.call(ctx, rpc.MethodExecList, rpc.ExecListParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, All: true}, nil); err != nil {
					return err
				}
			}
			*took = append(*took, time.Since(t0))
		}
	}

	var alone, together, psTook []time.Duration
	var flooded int64
	for round := range clientsRounds {
		flood, err := startCmd(floodCommand)
		if err != nil {
			return nil, err
		}
		for phase := range 2 {
			withObserver := (phase+round)%2 == 1 // interleaved
			progress("clients: round %d, agent %s", round+1, map[bool]string{false: "alone", true: "with the observer"}[withObserver])
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var psErr error
			if withObserver {
				wg.Go(func() { psErr = ps(stop, &psTook) })
			}
			for end := time.Now().Add(clientsPhase); time.Now().Before(end); {
				d, err := observe()
				if err != nil {
					close(stop)
					wg.Wait()
					return nil, err
				}
				if withObserver {
					together = append(together, d)
				} else {
					alone = append(alone, d)
				}
			}
			close(stop)
			wg.Wait()
			if psErr != nil {
				return nil, psErr
			}
		}
		var o execution.Observation
		if err := agent.call(ctx, rpc.MethodExecStop, rpc.ExecStopParams{SessionID: sid, ExecutionID: flood}, &o); err != nil {
			return nil, err
		}
		if o.Facts.Termination != execution.Stopped {
			return nil, fmt.Errorf("the flood ended by itself (%s): it did not flood for the whole round", o.Facts.Termination)
		}
		flooded += o.Facts.OutputBytes
	}
	if len(psTook) == 0 {
		return nil, errors.New("the observer listed nothing")
	}
	a50, t50 := percentile(alone, 50), percentile(together, 50)
	a99, t99 := percentile(alone, 99), percentile(together, 99)
	fmt.Printf("clients: agent exec/observe alone p50 %s p99 %s (%d) | with the observer listing p50 %s p99 %s (%d); observer ps p50 %s p99 %s (%d lists); the flood wrote %s\n",
		ms(a50), ms(a99), len(alone), ms(t50), ms(t99), len(together), ms(percentile(psTook, 50)), ms(percentile(psTook, 99)), len(psTook), mibs(flooded))
	r := t50.Seconds() / a50.Seconds()
	rows = append(rows,
		row{measure: "agent exec/observe p50, flood + observer ps", helper: ms(t50), baseline: ms(a50) + " agent alone (flood)",
			ratio: ratio(t50.Seconds(), a50.Seconds()), target: fmt.Sprintf("<= %.0fx alone", targetClients), result: verdict(r <= targetClients)},
		row{measure: "agent exec/observe p99, flood + observer ps", helper: ms(t99), baseline: ms(a99) + " agent alone (flood)",
			ratio: ratio(t99.Seconds(), a99.Seconds()), target: "-", result: "-"},
		row{measure: "observer ps (status + exec/list) p50", helper: ms(percentile(psTook, 50)), baseline: "-", ratio: "-", target: "-", result: "-"},
	)
	return rows, nil
}

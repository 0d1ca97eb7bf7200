package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/sourcegraph/jsonrpc2"
)

// shutdownBound bounds the wait for the helper to exit after shutdown; a
// helper still running then is killed.
const shutdownBound = 30 * time.Second

// startID is the id of run's exec/start, which a Ctrl-C before the yield
// cancels.
var startID = jsonrpc2.ID{Str: "run-start", IsString: true}

// run is the human client: it starts `mevedel-exec serve` as a child, runs
// one command through the protocol exactly as Emacs would, prints the output
// as it arrives, and exits with the command's exit code. Ctrl-C (or
// SIGTERM, SIGHUP) stops the command: before it yielded by cancelling the
// start (termination aborted), after it by exec/stop.
func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "session state directory (default: a new private temporary one)")
	cwd := fs.String("cwd", "", "working directory (default: the current one)")
	yieldMs := fs.Int64("yield-ms", 1000, "how long the start request waits before the command yields")
	tty := fs.Bool("tty", false, "run the command with a pty")
	verbose := fs.Bool("facts", false, "print the final facts as JSON on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	command := strings.Join(fs.Args(), " ")
	if command == "" {
		fmt.Fprint(os.Stderr, "mevedel-exec run: no command\n")
		return 2
	}
	if *cwd == "" {
		*cwd, _ = os.Getwd()
	}
	if *stateDir == "" {
		dir, err := os.MkdirTemp("", "mevedel-exec-run-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*stateDir = dir
	}
	// Caught before the helper starts: from then on an interrupt must stop
	// the command, never kill this client alone.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(interrupts)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The helper gets its own process group: a Ctrl-C at the terminal
	// would otherwise kill it along with this client before exec/stop
	// could go out, leaving the command running.
	c, err := client.Start(client.Options{Bin: self, Stderr: os.Stderr, OwnGroup: true}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	defer func() { _ = c.Shutdown(shutdownBound) }()

	var sess execution.SessionInfo
	if err := c.Call(ctx, rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: "run", StateDir: absPath(*stateDir)}, &sess); err != nil {
		fmt.Fprintln(os.Stderr, "mevedel-exec run:", err)
		return 1
	}
	var obs execution.Observation
	started, err := c.Dispatch(ctx, rpc.MethodExecStart, rpc.ExecStartParams{
		SessionID: "run", Command: command, Cwd: absPath(*cwd), YieldMs: yieldMs, TTY: *tty, MaxOutputChars: 1 << 20,
	}, jsonrpc2.PickID(startID))
	if err == nil {
		err = awaitStart(ctx, c, started, interrupts, &obs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mevedel-exec run:", err)
		return 1
	}
	for {
		fmt.Print(obs.Output)
		if obs.Final {
			break
		}
		select {
		case <-interrupts:
			err = c.Call(ctx, rpc.MethodExecStop, rpc.ExecStopParams{SessionID: "run", ExecutionID: obs.Facts.ExecutionID, MaxOutputChars: 1 << 20}, &obs)
		default:
			err = c.Call(ctx, rpc.MethodExecObserve, rpc.ExecObserveParams{SessionID: "run", ExecutionID: obs.Facts.ExecutionID, WaitMs: 250, MaxOutputChars: 1 << 20}, &obs)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "mevedel-exec run:", err)
			return 1
		}
	}
	f := obs.Facts
	if *verbose {
		b, _ := json.MarshalIndent(f, "", "  ")
		fmt.Fprintln(os.Stderr, string(b))
	}
	fmt.Fprintf(os.Stderr, "[%s %s: %s", f.ExecutionID, f.Status, f.Termination)
	if f.ExitCode != nil {
		fmt.Fprintf(os.Stderr, " %d", *f.ExitCode)
	}
	if f.Signal != "" {
		fmt.Fprintf(os.Stderr, " %s", f.Signal)
	}
	fmt.Fprintf(os.Stderr, ", %d bytes in %s]\n", f.OutputBytes, filepath.Join(sess.StateDir, "executions", f.ExecutionID+".log"))
	switch {
	case f.ExitCode != nil:
		return *f.ExitCode
	case f.Outcome == execution.Success:
		return 0
	default:
		return 1
	}
}

// awaitStart waits for the start's answer; an interrupt meanwhile cancels
// the start, which then answers with the aborted command's final
// observation.
func awaitStart(ctx context.Context, c *client.Client, started jsonrpc2.Waiter, interrupts <-chan os.Signal, obs *execution.Observation) error {
	answered := make(chan error, 1)
	go func() { answered <- started.Wait(ctx, obs) }()
	select {
	case err := <-answered:
		return err
	case <-interrupts:
		if err := c.Notify(ctx, rpc.MethodCancelRequest, rpc.CancelParams{ID: startID}); err != nil {
			return err
		}
		return <-answered
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

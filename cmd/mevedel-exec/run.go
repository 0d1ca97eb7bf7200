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
)

// run is the human client: it starts `mevedel-exec serve` as a child, runs
// one command through the protocol exactly as Emacs would, prints the output
// as it arrives, and exits with the command's exit code. Ctrl-C stops the
// command through exec/stop.
// shutdownBound bounds the wait for the helper to exit after shutdown; a
// helper still running then is killed.
const shutdownBound = 30 * time.Second

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
	if err := c.Call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{
		SessionID: "run", Command: command, Cwd: absPath(*cwd), YieldMs: yieldMs, TTY: *tty, MaxOutputChars: 1 << 20,
	}, &obs); err != nil {
		fmt.Fprintln(os.Stderr, "mevedel-exec run:", err)
		return 1
	}
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(interrupts)
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

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

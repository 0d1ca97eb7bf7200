package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/sourcegraph/jsonrpc2"
)

// run is the human client: it starts `mevedel-exec serve` as a child, runs
// one command through the protocol exactly as Emacs would, prints the output
// as it arrives, and exits with the command's exit code. Ctrl-C stops the
// command through exec/stop.
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
	helper := exec.Command(self, "serve")
	helper.Stderr = os.Stderr
	in, _ := helper.StdinPipe()
	out, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	conn := jsonrpc2.NewConn(ctx, jsonrpc2.NewBufferedStream(stdio{out, in}, jsonrpc2.VSCodeObjectCodec{}), jsonrpc2.HandlerWithError(
		func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) (any, error) { return nil, nil }))
	defer func() {
		_ = conn.Call(ctx, rpc.MethodShutdown, nil, nil)
		in.Close()
		_ = helper.Wait()
	}()

	var sess execution.SessionInfo
	if err := conn.Call(ctx, rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: "run", StateDir: absPath(*stateDir)}, &sess); err != nil {
		fmt.Fprintln(os.Stderr, "mevedel-exec run:", err)
		return 1
	}
	var obs execution.Observation
	if err := conn.Call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{
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
			err = conn.Call(ctx, rpc.MethodExecStop, rpc.ExecStopParams{SessionID: "run", ExecutionID: obs.Facts.ExecutionID, MaxOutputChars: 1 << 20}, &obs)
		default:
			err = conn.Call(ctx, rpc.MethodExecObserve, rpc.ExecObserveParams{SessionID: "run", ExecutionID: obs.Facts.ExecutionID, WaitMs: 250, MaxOutputChars: 1 << 20}, &obs)
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

type stdio struct {
	io.ReadCloser
	io.WriteCloser
}

func (s stdio) Close() error {
	s.WriteCloser.Close()
	return s.ReadCloser.Close()
}

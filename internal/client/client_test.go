package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/sourcegraph/jsonrpc2"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mevedel-exec-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "mevedel-exec")
	if err := testsupport.BuildHelper(context.Background(), bin, true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bound limits every wait here; none comes close.
const bound = 30 * time.Second

func options(t *testing.T, stderr *testsupport.Buffer, args ...string) client.Options {
	home := t.TempDir()
	return client.Options{Bin: bin, Args: args, Env: []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}, Dir: home, Stderr: stderr}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return c
}

// A started helper answers typed calls, its notifications reach the
// handler with the client they came on, and Shutdown ends it cleanly.
func TestStartCallNotifyShutdown(t *testing.T) {
	var stderr testsupport.Buffer
	type got struct {
		c *client.Client
		n client.Notification
	}
	settled := make(chan got, 16)
	c, err := client.Start(options(t, &stderr), func(c *client.Client, n client.Notification) {
		if n.Method == rpc.NotifySettled {
			settled <- got{c, n}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var info rpc.InitializeResult
	if err := c.Call(ctx(t), rpc.MethodInitialize, rpc.InitializeParams{ClientName: "client-test", ProtocolVersion: rpc.ProtocolVersion}, &info); err != nil {
		t.Fatal(err)
	}
	if info.Pid != c.Child().Pid() {
		t.Fatalf("initialize reports pid %d, started %d", info.Pid, c.Child().Pid())
	}
	if err := c.Call(ctx(t), rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: "s", StateDir: filepath.Join(t.TempDir(), "state")}, nil); err != nil {
		t.Fatal(err)
	}
	var o execution.Observation
	if err := c.Call(ctx(t), rpc.MethodExecStart, rpc.ExecStartParams{SessionID: "s", Command: "echo hi", Cwd: "/"}, &o); err != nil || o.Output != "hi\n" {
		t.Fatalf("exec/start: %+v %v", o, err)
	}
	select {
	case g := <-settled:
		var p rpc.SettledParams
		if err := json.Unmarshal(g.n.Params, &p); err != nil || g.c != c || p.Facts.ExecutionID != o.Facts.ExecutionID {
			t.Fatalf("settled notification %s on %p (want %p): %v", g.n.Params, g.c, c, err)
		}
	case <-time.After(bound):
		t.Fatal("no exec/settled notification")
	}
	if err := c.Shutdown(bound); err != nil {
		t.Fatal(err)
	}
	if code := c.Child().ExitCode(); code != 0 {
		t.Fatalf("exit code %d after shutdown\n%s", code, stderr.String())
	}
}

// A helper serving a socket takes a dialled client; Shutdown on that
// client ends the helper, which its starter waits for.
func TestDialListener(t *testing.T) {
	var stderr testsupport.Buffer
	sock := filepath.Join(t.TempDir(), "helper.sock")
	child, err := client.Spawn(options(t, &stderr, "serve", "--listen", sock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Wait(bound) })
	var c *client.Client
	// The helper announces nothing when it listens: poll for the socket.
	if !testsupport.Poll(bound, func() bool { c, err = client.Dial(ctx(t), sock, nil); return err == nil }) {
		t.Fatalf("dial: %v\n%s", err, stderr.String())
	}
	if c.Child() != nil {
		t.Fatal("a dialled client has a child")
	}
	var info rpc.InitializeResult
	if err := c.Call(ctx(t), rpc.MethodInitialize, rpc.InitializeParams{ClientName: "client-test", ProtocolVersion: rpc.ProtocolVersion}, &info); err != nil || info.Pid != child.Pid() {
		t.Fatalf("initialize: %+v %v (started %d)", info, err, child.Pid())
	}
	if err := c.Shutdown(bound); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(bound); err != nil {
		t.Fatalf("listening helper after shutdown: %v\n%s", err, stderr.String())
	}
}

// Wait kills a helper that outlives its bound and says so.
func TestWaitKillsPastTheBound(t *testing.T) {
	// A listening helper without a client never exits by itself; the
	// bound here is what is tested, not a pause.
	child, err := client.Spawn(options(t, nil, "serve", "--listen", filepath.Join(t.TempDir(), "helper.sock")))
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(10 * time.Millisecond); !errors.Is(err, client.ErrNoExit) {
		t.Fatalf("Wait = %v, want ErrNoExit", err)
	}
	if code := child.ExitCode(); code != -1 {
		t.Fatalf("exit code %d, want -1 (killed)", code)
	}
}

// Results, errors and notifications come through whole, however large:
// the client keeps a result or params out of the library's generic
// decoding and hands them back raw.
func TestLargeResultsErrorsAndNotifications(t *testing.T) {
	var stderr testsupport.Buffer
	changed := make(chan rpc.ChangedParams, 256)
	c, err := client.Start(options(t, &stderr), func(_ *client.Client, n client.Notification) {
		if n.Method == rpc.NotifyChanged {
			var p rpc.ChangedParams
			if err := json.Unmarshal(n.Params, &p); err == nil {
				select {
				case changed <- p:
				default:
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx(t), rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: "s", StateDir: filepath.Join(t.TempDir(), "state")}, nil); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	const n = 40
	for i := range n {
		label := fmt.Sprintf("%02d-%s", i, strings.Repeat("é", 2000))
		if err := c.Call(ctx(t), rpc.MethodExecStart, rpc.ExecStartParams{SessionID: "s", Command: "exec sleep 600", Cwd: "/",
			YieldMs: &zero, Label: label}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var list rpc.ExecListResult
	if err := c.Call(ctx(t), rpc.MethodExecList, rpc.ExecListParams{SessionID: "s", Authority: rpc.Authority{As: "user"}}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Executions) != n {
		t.Fatalf("listed %d, want %d", len(list.Executions), n)
	}
	for i, f := range list.Executions {
		if want := fmt.Sprintf("%02d-%s", i, strings.Repeat("é", 2000)); f.Label != want {
			t.Fatalf("execution %d: label of %d bytes, want %d", i, len(f.Label), len(want))
		}
	}
	select {
	case p := <-changed:
		if p.SessionID != "s" || len(p.Changed) == 0 {
			t.Fatalf("exec/changed %+v", p)
		}
	case <-time.After(bound):
		t.Fatal("no exec/changed")
	}
	err = c.Call(ctx(t), rpc.MethodExecObserve, rpc.ExecObserveParams{SessionID: "s", ExecutionID: "none"}, nil)
	var rerr *jsonrpc2.Error
	if !errors.As(err, &rerr) || rerr.Code != -32001 {
		t.Fatalf("observing an unknown id: %v, want a -32001 error", err)
	}
	var stopped rpc.ExecStopAllResult
	if err := c.Call(ctx(t), rpc.MethodExecStopAll, rpc.ExecStopAllParams{SessionID: "s", Authority: rpc.Authority{As: "user"}}, &stopped); err != nil || stopped.Stopped != n {
		t.Fatalf("stopAll: %+v %v", stopped, err)
	}
	if err := c.Shutdown(bound); err != nil {
		t.Fatal(err)
	}
}

package main

// The list benchmark: exec/list with user authority while 500 executions
// are live, each with a label of 100 bytes.
//
// It talks to the helper with a bare framing client that reads each reply
// as bytes: what is measured is the helper's round trip (reading the
// request, listing, encoding, writing 300 KB down the pipe), not a Go
// JSON-RPC library decoding the reply generically, which costs more than
// the helper's whole answer.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/rpc"
)

const (
	listLive   = 500
	listRuns   = 300
	targetList = 5 * time.Millisecond // p99
)

// framed is a bare client of a helper on stdio.
type framed struct {
	child *client.Child
	in    io.Writer
	out   *bufio.Reader
	next  int
	buf   []byte
}

type framedReply struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct{ Message string }
}

// call sends a request and returns the raw body of its reply, skipping
// the notifications before it.
func (f *framed) call(method string, params any) ([]byte, error) {
	f.next++
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, f.next, method, p)
	if _, err := fmt.Fprintf(f.in, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		return nil, err
	}
	want := strconv.Itoa(f.next)
	for {
		length := -1
		for {
			line, err := f.out.ReadString('\n')
			if err != nil {
				return nil, fmt.Errorf("%s: %w", method, err)
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				break
			}
			if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
				length, _ = strconv.Atoi(v)
			}
		}
		// One buffer for every reply: the collector the client would
		// otherwise run every few listings is no part of the helper's
		// round trip. A reply is valid until the next call.
		if cap(f.buf) < length {
			f.buf = make([]byte, length)
		}
		b := f.buf[:length]
		if _, err := io.ReadFull(f.out, b); err != nil {
			return nil, err
		}
		// The helper writes a result as {"id":N,"result":...}: that one
		// is taken unparsed. Anything else is decoded to tell a
		// notification from an error reply.
		if strings.HasPrefix(string(b[:min(len(b), 64)]), `{"id":`+want+`,"result":`) {
			return b, nil
		}
		var r framedReply
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		if r.Method != "" || string(r.ID) != want {
			continue
		}
		if r.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		return b, nil
	}
}

func (b *bench) list(ctx context.Context) ([]row, error) {
	progress("exec/list: %d live executions, %d lists", listLive, listRuns)
	home, err := b.newHome("list")
	if err != nil {
		return nil, err
	}
	stderr := &testsupport.Buffer{}
	child, err := client.SpawnPiped(client.Options{Bin: b.bin, Env: minimalEnv(home), Dir: home, Stderr: stderr, OwnGroup: true})
	if err != nil {
		return nil, err
	}
	f := &framed{child: child, in: child.Stdin(), out: bufio.NewReaderSize(child.Stdout(), 1<<20)}
	defer func() {
		_, _ = f.call("shutdown", nil)
		_ = child.Stdin().Close()
		_ = child.Wait(time.Minute)
		_ = child.Stdout().Close()
	}()
	stateDir, err := os.MkdirTemp(b.work, "state-")
	if err != nil {
		return nil, err
	}
	if _, err := f.call("initialize", map[string]any{"clientName": "mevedel-bench"}); err != nil {
		return nil, err
	}
	if _, err := f.call("session/open", map[string]any{"sessionId": "list", "stateDir": stateDir,
		"limits": map[string]any{"maxLive": listLive}}); err != nil {
		return nil, err
	}
	label := fmt.Sprintf("%0100d", 0)
	for i := range listLive {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := f.call("exec/start", map[string]any{"sessionId": "list", "command": fmt.Sprintf("echo start %d; exec sleep 600", i),
			"yieldMs": 0, "label": label, "readOnly": true}); err != nil {
			return nil, err
		}
	}
	list := map[string]any{"sessionId": "list", "as": "user"}
	var size int
	for range 20 { // warm up
		raw, err := f.call("exec/list", list)
		if err != nil {
			return nil, err
		}
		size = len(raw)
	}
	progress("exec/list: %d bytes a reply", size)
	ds := make([]time.Duration, 0, listRuns)
	for range listRuns {
		t0 := time.Now()
		if _, err := f.call("exec/list", list); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(t0))
	}
	if _, err := f.call("exec/stopAll", list); err != nil {
		return nil, err
	}
	p50, p99 := median(ds), percentile(ds, 99)
	// The machine's own floor for the same bytes: cat echoing a frame of
	// the reply's size, as many times, interleaved with nothing else.
	floor, err := echoFloor(ctx, size, listRuns)
	if err != nil {
		return nil, err
	}
	rows := []row{{
		measure:  fmt.Sprintf("exec/list, %d live (p50; p99)", listLive),
		helper:   ms(p50) + "; " + ms(p99),
		baseline: ms(median(floor)) + "; " + ms(percentile(floor, 99)) + " (cat echoing the bytes)",
		ratio:    fmt.Sprintf("%.2f", float64(p99)/float64(percentile(floor, 99))),
		target:   "p99 <= " + ms(targetList), result: verdict(p99 <= targetList),
	}}
	// The same through the Go client, decoded into facts: what a Go
	// caller (the tests, `run`) waits.
	viaClient, err := b.listViaClient(ctx)
	if err != nil {
		return nil, err
	}
	return append(rows, row{
		measure:  fmt.Sprintf("exec/list, %d live, Go client, decoded (p50; p99)", listLive),
		helper:   ms(median(viaClient)) + "; " + ms(percentile(viaClient, 99)),
		baseline: "-", ratio: "-", target: "-", result: "-",
	}), nil
}

func (b *bench) listViaClient(ctx context.Context) ([]time.Duration, error) {
	home, err := b.newHome("list-client")
	if err != nil {
		return nil, err
	}
	var ds []time.Duration
	err = b.withHelper(ctx, home, func(h *helper, s *session) error {
		big, err := h.open(ctx, s.stateDir+"-list", execution.Limits{MaxLive: listLive})
		if err != nil {
			return err
		}
		zero := int64(0)
		label := fmt.Sprintf("%0100d", 0)
		for i := range listLive {
			if err := h.call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{SessionID: big.id,
				Command: fmt.Sprintf("echo start %d; exec sleep 600", i), YieldMs: &zero, Label: label}, nil); err != nil {
				return err
			}
		}
		p := rpc.ExecListParams{SessionID: big.id, Authority: rpc.Authority{As: "user"}}
		for i := range listRuns + 20 {
			var res rpc.ExecListResult
			t0 := time.Now()
			if err := h.call(ctx, rpc.MethodExecList, p, &res); err != nil {
				return err
			}
			if i >= 20 { // after a warm-up
				ds = append(ds, time.Since(t0))
			}
			if len(res.Executions) != listLive {
				return fmt.Errorf("listed %d, want %d", len(res.Executions), listLive)
			}
		}
		return h.call(ctx, rpc.MethodExecStopAll, rpc.ExecStopAllParams{SessionID: big.id, Authority: rpc.Authority{As: "user"}}, nil)
	})
	return ds, err
}

// echoFloor times n round trips of size bytes through cat over pipes: what
// moving a reply of that size costs on this machine, with its scheduling
// noise, without any work on it.
func echoFloor(ctx context.Context, size, n int) ([]time.Duration, error) {
	cmd := exec.CommandContext(ctx, "cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = in.Close(); _ = cmd.Wait() }()
	msg := make([]byte, size)
	back := make([]byte, size)
	ds := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		errc := make(chan error, 1)
		go func() { _, err := in.Write(msg); errc <- err }()
		if _, err := io.ReadFull(out, back); err != nil {
			return nil, err
		}
		if err := <-errc; err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(t0))
	}
	return ds, nil
}

package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
)

// BenchmarkExecList lists 500 live executions (real sleeping processes)
// with user authority through a server on pipes: the whole cost of a
// listing as a client sees it, encoding and framing included.
//
//	go test ./rpc -run '^$' -bench ExecList -cpuprofile cpu.out
func BenchmarkExecList(b *testing.B) {
	const live = 500
	b.Setenv("HOME", b.TempDir()) // no user profile in the login shell
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := NewServer(Options{Logger: log.New(io.Discard, "", 0)})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(inR, outW) }()
	rw := struct {
		io.Reader
		io.WriteCloser
	}{outR, inW}
	conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(rw, jsonrpc2.VSCodeObjectCodec{}),
		jsonrpc2.HandlerWithError(func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) (any, error) { return nil, nil }))
	ctx := context.Background()
	call := func(method string, params, result any) {
		if err := conn.Call(ctx, method, params, result); err != nil {
			b.Fatalf("%s: %v", method, err)
		}
	}
	call(MethodInitialize, InitializeParams{ClientName: "bench", ProtocolVersion: ProtocolVersion}, nil)
	call(MethodSessionOpen, map[string]any{"sessionId": "s", "stateDir": b.TempDir(), "limits": map[string]any{"maxLive": live}}, nil)
	zero := int64(0)
	for i := range live {
		call(MethodExecStart, ExecStartParams{SessionID: "s", Command: fmt.Sprintf("echo %d; exec sleep 600", i),
			YieldMs: &zero, Label: fmt.Sprintf("%0100d", i)}, nil)
	}
	var raw json.RawMessage
	list := map[string]any{"sessionId": "s", "as": "user"}
	call(MethodExecList, list, &raw)
	var got ExecListResult
	if err := json.Unmarshal(raw, &got); err != nil || len(got.Executions) != live {
		b.Fatalf("listed %d (%v), want %d", len(got.Executions), err, live)
	}
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for b.Loop() {
		call(MethodExecList, list, &raw)
	}
	b.StopTimer()
	call(MethodShutdown, nil, nil)
	_ = inW.Close()
	if err := <-served; err != nil {
		b.Fatal(err)
	}
	_ = conn.Close()
}

package main

// The list benchmark: exec/list with user authority while 500 executions
// are live, each with a label of 100 bytes and a few bytes of output.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/rpc"
)

const (
	listLive   = 500
	listRuns   = 300
	targetList = 5 * time.Millisecond // p99
)

func (b *bench) list(ctx context.Context) ([]row, error) {
	progress("exec/list: %d live executions, %d lists", listLive, listRuns)
	home, err := b.newHome("list")
	if err != nil {
		return nil, err
	}
	var ds []time.Duration
	err = b.withHelper(ctx, home, func(h *helper, s *session) error {
		// A fresh session with room for them all.
		stateDir := s.stateDir + "-list"
		big, err := h.open(ctx, stateDir, execution.Limits{MaxLive: listLive + 1})
		if err != nil {
			return err
		}
		zero := int64(0)
		label := fmt.Sprintf("%0100d", 0)
		for i := range listLive {
			var o execution.Observation
			if err := h.call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{
				SessionID: big.id, Command: fmt.Sprintf("echo start %d; exec sleep 600", i),
				YieldMs: &zero, Label: label, ReadOnly: new(true),
			}, &o); err != nil {
				return err
			}
		}
		var raw json.RawMessage
		for range 20 { // warm up
			if err := h.call(ctx, rpc.MethodExecList, map[string]any{"sessionId": big.id, "as": "user"}, &raw); err != nil {
				return err
			}
		}
		var n struct{ Executions []json.RawMessage }
		if err := json.Unmarshal(raw, &n); err != nil {
			return err
		}
		if len(n.Executions) != listLive {
			return fmt.Errorf("exec/list listed %d, want %d", len(n.Executions), listLive)
		}
		progress("exec/list: %d bytes a reply", len(raw))
		for range listRuns {
			t0 := time.Now()
			if err := h.call(ctx, rpc.MethodExecList, map[string]any{"sessionId": big.id, "as": "user"}, &raw); err != nil {
				return err
			}
			ds = append(ds, time.Since(t0))
		}
		var stopped rpc.ExecStopAllResult
		return h.call(ctx, rpc.MethodExecStopAll, rpc.ExecStopAllParams{SessionID: big.id, Authority: rpc.Authority{As: "user"}}, &stopped)
	})
	if err != nil {
		return nil, err
	}
	p50, p99 := median(ds), percentile(ds, 99)
	return []row{{
		measure:  fmt.Sprintf("exec/list, %d live (p50; p99)", listLive),
		helper:   ms(p50) + "; " + ms(p99),
		baseline: "-", ratio: "-",
		target: "p99 <= " + ms(targetList), result: verdict(p99 <= targetList),
	}}, nil
}

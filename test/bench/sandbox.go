package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// The sandbox benchmark: exec/start `true` unconfined, confined by
// bubblewrap, and confined with memory and pids limits, interleaved in one
// helper and session so load hits all sides alike; then the same on an
// SSH host under its host agent.

const (
	sandboxRuns = 200
	// targetSandboxDelta is what confinement may add to the p50 round trip.
	targetSandboxDelta = 5 * time.Millisecond
)

func (b *bench) sandbox(ctx context.Context) ([]row, error) {
	home, err := b.newHome("sandbox")
	if err != nil {
		return nil, err
	}
	cwd, err := os.MkdirTemp(b.work, "sandbox-cwd-")
	if err != nil {
		return nil, err
	}
	progress("sandbox: %d exec/start true each, unconfined, confined, confined with limits (interleaved)", sandboxRuns)
	rows, err := b.sandboxSides(ctx, home, cwd, cwd, "", targetSandboxDelta)
	if err != nil {
		return nil, err
	}
	// The same on an SSH host (the private sshd on this machine), under
	// the host agent: the policy is resolved by the agent before each
	// start, and the box and group are built there.
	dir, err := os.MkdirTemp(b.work, "sandbox-sshd-")
	if err != nil {
		return nil, err
	}
	progress("sandbox: the same on a private sshd, under the host agent")
	srv, err := sshd.Launch(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	defer srv.Stop()
	remoteRows, err := b.sandboxSides(ctx, srv.Home, "/ssh:"+sshd.Alias+":"+cwd, cwd, "on an SSH host, ", 0)
	if err != nil {
		return nil, err
	}
	return append(rows, remoteRows...), nil
}

// sandboxSides times exec/start true in cwd unconfined, confined with
// root as the writable root, and confined with limits; target, when set,
// is the goal for what confinement adds to the p50.
func (b *bench) sandboxSides(ctx context.Context, home, cwd, root, where string, target time.Duration) ([]row, error) {
	confined := &sandbox.Policy{Mode: sandbox.Required, WritableRoots: []string{root}}
	sides := []struct {
		name string
		box  *sandbox.Policy
		res  *sandbox.Resources
		took []time.Duration
	}{
		{name: "unconfined"},
		{name: "confined (bubblewrap)", box: confined},
		{name: "confined, 256 MiB and 64 pids", box: confined, res: &sandbox.Resources{MemoryBytes: 256 << 20, Pids: 64}},
	}
	var backend, mode string
	err := b.withHelper(ctx, home, func(h *helper, s *session) error {
		for i := range sandboxRuns + 1 { // the first round warms up
			for j := range sides {
				side := &sides[j]
				var o execution.Observation
				t0 := time.Now()
				err := h.call(ctx, rpc.MethodExecStart, rpc.ExecStartParams{
					SessionID: s.id, Command: "true", Cwd: cwd, MaxOutputChars: 200,
					Sandbox: side.box, Resources: side.res,
				}, &o)
				d := time.Since(t0)
				if err != nil {
					return fmt.Errorf("%s: %w", side.name, err)
				}
				if o.Facts.Outcome != execution.Success {
					return fmt.Errorf("%s: true did not succeed: %s %s", side.name, o.Facts.Termination, o.Facts.Reason)
				}
				if side.box != nil && o.Facts.Sandbox != nil {
					backend = o.Facts.Sandbox.Backend
				}
				mode = o.Facts.RemoteMode
				if i > 0 {
					side.took = append(side.took, d)
				}
				_ = os.Remove(s.spoolPath(o.Facts.ExecutionID))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	base := percentile(sides[0].took, 50)
	fmt.Printf("sandbox %s(backend %s%s): ", strings.TrimSuffix(where, ", ")+map[bool]string{true: " "}[where != ""], backend, map[bool]string{true: ", remoteMode " + mode}[mode != ""])
	for _, side := range sides {
		fmt.Printf("%s p50 %s p90 %s; ", side.name, ms(percentile(side.took, 50)), ms(percentile(side.took, 90)))
	}
	fmt.Println()
	var rows []row
	for i, side := range sides[1:] {
		p50 := percentile(side.took, 50)
		delta := p50 - base
		r := row{
			measure:  "exec/start true, " + where + side.name + ", p50 (n=" + strconv.Itoa(sandboxRuns) + ")",
			helper:   ms(p50),
			baseline: ms(base) + " (unconfined)",
			ratio:    fmt.Sprintf("+%s", ms(delta)),
			target:   "-",
			result:   "-",
		}
		if i == 0 && target > 0 {
			r.target = "added p50 <= " + ms(target)
			r.result = verdict(delta <= target)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

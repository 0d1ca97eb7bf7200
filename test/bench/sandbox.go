package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

const sandboxRuns = 200

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
	rows, err := b.sandboxSides(ctx, home, cwd, cwd, "")
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
	remoteRows, err := b.sandboxSides(ctx, srv.Home, "/ssh:"+sshd.Alias+":"+cwd, cwd, "on an SSH host, ")
	if err != nil {
		return nil, err
	}
	return append(rows, remoteRows...), nil
}

// sandboxSides times exec/start true in cwd unconfined, confined with
// root as the writable root, and confined with limits. Here (where ""),
// what confinement adds is held against bubblewrap's own cost, measured
// in the same run: a time target would say more about the machine.
func (b *bench) sandboxSides(ctx context.Context, home, cwd, root, where string) ([]row, error) {
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
	// The floor, here only: bwrap's own cost, a bare fork+exec of bwrap
	// with the options every box has running true, against a bare true,
	// both from Go without a shell, interleaved with the helper's starts.
	// The plainest box (the whole root read-only, /dev and /proc) is the
	// floor the target is held against; every box's options cost more.
	var bare, bwrapped, plain []time.Duration
	var bwrapArgs, plainArgs []string
	if where == "" {
		if bin, err := exec.LookPath("bwrap"); err == nil {
			bwrapArgs = append([]string{bin}, sandbox.BaseArgs()...)
			bwrapArgs = append(bwrapArgs, "--bind", root, root, "--", "true")
			plainArgs = []string{bin, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"}
		}
	}
	spawn := func(argv ...string) (time.Duration, error) {
		t0 := time.Now()
		err := exec.Command(argv[0], argv[1:]...).Run()
		return time.Since(t0), err
	}
	err := b.withHelper(ctx, home, func(h *helper, s *session) error {
		for i := range sandboxRuns + 1 { // the first round warms up
			if bwrapArgs != nil {
				d0, err := spawn("true")
				if err != nil {
					return err
				}
				d1, err := spawn(bwrapArgs...)
				if err != nil {
					return fmt.Errorf("the floor, bwrap true: %w", err)
				}
				d2, err := spawn(plainArgs...)
				if err != nil {
					return fmt.Errorf("the floor, plain bwrap true: %w", err)
				}
				if i > 0 {
					bare, bwrapped, plain = append(bare, d0), append(bwrapped, d1), append(plain, d2)
				}
			}
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
		rows = append(rows, r)
		if i == 0 && bwrapArgs != nil {
			floor := percentile(bwrapped, 50) - percentile(bare, 50)
			plainFloor := percentile(plain, 50) - percentile(bare, 50)
			fmt.Printf("sandbox floor: true p50 %s; bwrap --ro-bind / / --dev /dev --proc /proc true p50 %s (cost %s); bwrap with every box's options true p50 %s (cost %s)\n",
				ms(percentile(bare, 50)), ms(percentile(plain, 50)), ms(plainFloor), ms(percentile(bwrapped, 50)), ms(floor))
			for _, f := range []struct {
				name  string
				floor time.Duration
			}{
				{"bwrap --ro-bind / / --dev /dev --proc /proc true; minus true", plainFloor},
				{"bwrap with every box's options, true; minus true", floor},
			} {
				rows = append(rows, row{
					measure:  "confinement's added p50 against bubblewrap's own (" + f.name + ")",
					helper:   "+" + ms(delta),
					baseline: "+" + ms(f.floor),
					ratio:    fmt.Sprintf("%.2fx", float64(delta)/float64(max(f.floor, time.Microsecond))),
					target:   "<= 1.3x",
					result:   verdict(float64(delta) <= 1.3*float64(f.floor)),
				})
			}
		}
	}
	return rows, nil
}

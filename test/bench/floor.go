package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The spawn floor: exec/start of `true` against the least any program
// pays to run it, a bare fork+exec of `true` from Go (os/exec, no shell),
// in the same run; once alone and once with several starters at a time,
// where the journal's group commit should share one fsync among the
// starts that wait for it.

const (
	floorRuns        = 200 // alone, each side
	floorConcurrent  = 8   // starters at a time
	floorPerStarter  = 50  // starts each, each side
	targetFloorAlone = 3.0 // helper p50 over bare p50, at most
	targetFloorConc  = 1.5 // helper per start over bare per start, at most
)

func (b *bench) spawnFloor(ctx context.Context) ([]row, error) {
	progress("spawn floor: %d exec/start true and %d bare fork+exec of true, alone and %d at a time", floorRuns, floorRuns, floorConcurrent)
	home, err := b.newHome("floor")
	if err != nil {
		return nil, err
	}
	cwd, err := os.MkdirTemp(b.work, "cwd-")
	if err != nil {
		return nil, err
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		return nil, err
	}
	bare := func() error {
		cmd := exec.Command(truePath)
		cmd.Env, cmd.Dir = minimalEnv(home), cwd
		return cmd.Run()
	}
	// concurrently runs floorConcurrent starters of n calls each and
	// returns the wall time per call.
	concurrently := func(call func() error) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make(chan error, floorConcurrent)
		t0 := time.Now()
		for range floorConcurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range floorPerStarter {
					if err := call(); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		return time.Since(t0) / (floorConcurrent * floorPerStarter), nil
	}

	var helperAlone, bareAlone []time.Duration
	var helperConc, bareConc time.Duration
	var helperCPU, bareCPU cpuUse
	err = b.withHelper(ctx, home, func(h *helper, s *session) error {
		start := func() error {
			o, err := s.startWait(ctx, "true", cwd)
			if err == nil {
				_ = os.Remove(s.spoolPath(o.Facts.ExecutionID))
			}
			return err
		}
		if err := start(); err != nil { // the login environment's capture
			return fmt.Errorf("warm-up: %w", err)
		}
		// Interleaved, so a spell of load falls on both sides.
		for range floorRuns {
			if err := ctx.Err(); err != nil {
				return err
			}
			t0 := time.Now()
			if err := start(); err != nil {
				return err
			}
			helperAlone = append(helperAlone, time.Since(t0))
			t0 = time.Now()
			if err := bare(); err != nil {
				return err
			}
			bareAlone = append(bareAlone, time.Since(t0))
		}
		var err error
		c0 := cpuNow(h.pid())
		if bareConc, err = concurrently(bare); err != nil {
			return err
		}
		c1 := cpuNow(h.pid())
		if helperConc, err = concurrently(start); err != nil {
			return err
		}
		c2 := cpuNow(h.pid())
		bareCPU, helperCPU = c1.sub(c0), c2.sub(c1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spawn floor: %w", err)
	}
	hp50, bp50 := median(helperAlone), median(bareAlone)
	alone := hp50.Seconds() / bp50.Seconds()
	conc := helperConc.Seconds() / bareConc.Seconds()
	fmt.Printf("spawn floor: exec/start true p50 %s p90 %s; bare fork+exec of true p50 %s p90 %s; %d at a time: %s against %s per start\n",
		ms(hp50), ms(percentile(helperAlone, 90)), ms(bp50), ms(percentile(bareAlone, 90)), floorConcurrent, ms(helperConc), ms(bareConc))
	// Where the CPU of a start goes: with both cores busy, the ratio of
	// these totals is about the ratio of the times per start.
	n := time.Duration(floorConcurrent * floorPerStarter)
	fmt.Printf("  CPU per start, %d at a time: helper %s, its children (shim and command) %s, client %s, in all %s; bare: children %s, starter %s, in all %s\n",
		floorConcurrent, ms(helperCPU.helper/n), ms(helperCPU.children/n), ms(helperCPU.self/n), ms(helperCPU.total()/n),
		ms(bareCPU.bareChildren/n), ms(bareCPU.self/n), ms(bareCPU.total()/n))
	return []row{
		{
			measure:  fmt.Sprintf("exec/start true p50, alone (n=%d)", floorRuns),
			helper:   ms(hp50),
			baseline: ms(bp50) + " (fork+exec true)",
			ratio:    fmt.Sprintf("%.2f", alone),
			target:   fmt.Sprintf("<= %.1fx", targetFloorAlone),
			result:   verdict(alone <= targetFloorAlone),
		},
		{
			measure:  fmt.Sprintf("exec/start true per start, %d at a time (n=%d)", floorConcurrent, floorConcurrent*floorPerStarter),
			helper:   ms(helperConc),
			baseline: ms(bareConc) + " (fork+exec true)",
			ratio:    fmt.Sprintf("%.2f", conc),
			target:   fmt.Sprintf("<= %.1fx", targetFloorConc),
			result:   verdict(conc <= targetFloorConc),
		},
	}, nil
}

// cpuUse is CPU time spent, by whom.
type cpuUse struct {
	self         time.Duration // this process: the client, or the bare starter
	bareChildren time.Duration // children this process waited for
	helper       time.Duration // the helper itself
	children     time.Duration // children the helper waited for: shims, commands
}

func (c cpuUse) total() time.Duration { return c.self + c.bareChildren + c.helper + c.children }

func (c cpuUse) sub(o cpuUse) cpuUse {
	return cpuUse{c.self - o.self, c.bareChildren - o.bareChildren, c.helper - o.helper, c.children - o.children}
}

// cpuNow reads the CPU time of this process and its waited-for children,
// and of the helper pid and its waited-for children.
func cpuNow(pid int) cpuUse {
	var u cpuUse
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		u.bareChildren = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return u
	}
	st := string(b)
	f := strings.Fields(st[strings.LastIndexByte(st, ')')+2:])
	tick := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTicks
	}
	u.helper = tick(11) + tick(12)
	u.children = tick(13) + tick(14)
	return u
}

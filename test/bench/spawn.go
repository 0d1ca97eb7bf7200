package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// The spawn benchmarks: exec/start of a trivial command with a private or
// the person's real HOME, and the helper's memory while many run.

func (b *bench) rss(ctx context.Context) ([]row, error) {
	peak := map[int64]int64{}
	for _, size := range []int64{mib, gib} {
		progress("helper peak RSS: fresh helper, %d byte output", size)
		home, err := b.newHome("rss")
		if err != nil {
			return nil, err
		}
		err = b.withHelper(ctx, home, func(h *helper, s *session) error {
			if err := ensureRoom(s.stateDir); err != nil {
				return err
			}
			o, err := s.startWait(ctx, producer(size), home)
			if err != nil {
				return err
			}
			removeAndSync(s.spoolPath(o.Facts.ExecutionID))
			if o.Facts.OutputBytes != size {
				return fmt.Errorf("output of %d bytes, want %d", o.Facts.OutputBytes, size)
			}
			hwm, err := testsupport.PeakRSS(h.pid())
			if err != nil {
				return err
			}
			peak[size] = hwm
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("helper RSS: %w", err)
		}
	}
	small, big := peak[mib], peak[gib]
	ratio := float64(big) / float64(small)
	fmt.Printf("peak RSS: %.1f MiB after 1 MiB, %.1f MiB after 1 GiB (difference %+.1f MiB)\n",
		float64(small)/mib, float64(big)/mib, float64(big-small)/mib)
	return []row{{
		measure:  "helper peak RSS (VmHWM)",
		helper:   fmt.Sprintf("%.1f MiB (1 GiB out)", float64(big)/mib),
		baseline: fmt.Sprintf("%.1f MiB (1 MiB out)", float64(small)/mib),
		ratio:    fmt.Sprintf("%.2f", ratio),
		target:   fmt.Sprintf("1GiB/1MiB <= %.1f", targetRSSRatio),
		result:   verdict(ratio <= targetRSSRatio),
	}}, nil
}

// --- 3. spawn latency ------------------------------------------------------

func (b *bench) spawnPrivate(ctx context.Context) ([]row, error) {
	home, err := b.newHome("spawn")
	if err != nil {
		return nil, err
	}
	return b.spawn(ctx, "private HOME", home, spawnRuns)
}

func (b *bench) spawnRealHome(ctx context.Context) ([]row, error) {
	home := os.Getenv("HOME")
	if home == "" {
		fmt.Println("spawn latency, real HOME: skipped, HOME is not set")
		return nil, nil
	}
	return b.spawn(ctx, "real HOME "+home, home, spawnRunsRealHome)
}

// spawn times n exec/start round trips of `true` (after one warm-up that
// also waits for the login environment), then n runs of `bash -lc true`.
// The baseline is never killed: a login shell killed mid-profile can leave
// locks behind.
func (b *bench) spawn(ctx context.Context, label, home string, n int) ([]row, error) {
	progress("spawn latency, %s: %d exec/start true, %d bash -lc true", label, n, n)
	cwd, err := os.MkdirTemp(b.work, "cwd-")
	if err != nil {
		return nil, err
	}
	var viaHelper, viaBash, viaPlain []time.Duration
	var toStart, toEnd, rest []time.Duration // where a helper round trip goes
	var warm time.Duration
	err = b.withHelper(ctx, home, func(h *helper, s *session) error {
		t0 := time.Now()
		if _, err := s.startWait(ctx, "true", cwd); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		warm = time.Since(t0)
		for range n {
			t0 := time.Now()
			o, err := s.startWait(ctx, "true", cwd)
			if err != nil {
				return err
			}
			d := time.Since(t0)
			viaHelper = append(viaHelper, d)
			if f := o.Facts; f.QueuedAt != nil && f.StartedAt != nil && f.EndedAt != nil {
				toStart = append(toStart, f.StartedAt.Sub(f.QueuedAt.Time))
				toEnd = append(toEnd, f.EndedAt.Sub(f.StartedAt.Time))
				rest = append(rest, d-f.EndedAt.Sub(f.QueuedAt.Time))
			}
			_ = os.Remove(s.spoolPath(o.Facts.ExecutionID))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spawn latency (%s): %w", label, err)
	}
	// The baseline, then the floor: the plain `bash -c true` that the
	// helper itself starts for each command.
	for _, side := range []struct {
		flag string
		into *[]time.Duration
	}{{"-lc", &viaBash}, {"-c", &viaPlain}} {
		for range n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			cmd := exec.Command("bash", side.flag, "true")
			cmd.Env = minimalEnv(home)
			cmd.Dir = cwd
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("bash %s true (%s): %w: %s", side.flag, label, err, strings.TrimSpace(out.String()))
			}
			*side.into = append(*side.into, time.Since(t0))
		}
	}
	hp50, hp90 := percentile(viaHelper, 50), percentile(viaHelper, 90)
	bp50, bp90 := percentile(viaBash, 50), percentile(viaBash, 90)
	fmt.Printf("spawn, %s: warm-up start (with the login capture) %s; helper p50 %s p90 %s; bash -lc p50 %s p90 %s\n",
		label, ms(warm), ms(hp50), ms(hp90), ms(bp50), ms(bp90))
	fmt.Printf("  floor: plain bash -c true via os/exec p50 %s p90 %s\n", ms(median(viaPlain)), ms(percentile(viaPlain, 90)))
	if len(toStart) > 0 {
		fmt.Printf("  helper round trip by facts (ms resolution), medians: queued->started %s, started->ended %s, reply and protocol %s\n",
			ms(median(toStart)), ms(median(toEnd)), ms(median(rest)))
	}
	name := "exec/start true, " + label
	return []row{
		{
			measure:  name + fmt.Sprintf(", p50 (n=%d)", n),
			helper:   ms(hp50),
			baseline: ms(bp50) + " (bash -lc true)",
			ratio:    fmt.Sprintf("%.3f", hp50.Seconds()/bp50.Seconds()),
			target:   "helper p50 <= " + ms(targetSpawnP50),
			result:   verdict(hp50 <= targetSpawnP50),
		},
		{
			measure:  name + fmt.Sprintf(", p90 (n=%d)", n),
			helper:   ms(hp90),
			baseline: ms(bp90) + " (bash -lc true)",
			ratio:    fmt.Sprintf("%.3f", hp90.Seconds()/bp90.Seconds()),
			target:   "-",
			result:   "-",
		},
	}, nil
}

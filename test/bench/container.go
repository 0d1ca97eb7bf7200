package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// The container rows of the remote benchmark: exec/start true in a
// Podman container through the host agent (one exec stream, started
// once) against `podman exec CONTAINER true`, which starts the runtime
// again for every command, interleaved in one run; then the same through
// the wrapper (forced), which pays one engine exec per command itself.

const (
	containerRuns   = 50
	targetContainer = 0.3 // helper p50 over podman exec p50, at most
	targetWrapper   = 1.5 // the wrapper's p50 over podman exec p50, at most
)

func (b *bench) container(ctx context.Context) ([]row, error) {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil, fmt.Errorf("container: podman is needed (scripts/setup.sh installs it): %w", err)
	}
	progress("container: a root file system of this machine's binaries, a Podman container on it")
	rootfs := filepath.Join(b.work, "rootfs")
	if err := testsupport.BuildRootfs(rootfs); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	work, err := os.MkdirTemp(b.work, "box-work-")
	if err != nil {
		return nil, err
	}
	name := "mevedel-bench-" + strconv.Itoa(os.Getpid())
	if err := testsupport.RunContainer(ctx, name, rootfs, work); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	defer func() { _ = testsupport.RemoveContainer(name) }()
	home, err := b.newHome("container")
	if err != nil {
		return nil, err
	}
	cwd := "/podman:" + name + ":/tmp"
	var rows []row
	for _, mode := range []string{"agent", "wrapper"} {
		helperEnv = []string{"MEVEDEL_EXEC_REMOTE_MODE=" + mode}
		var viaHelper, viaExec []time.Duration
		err = b.withHelper(ctx, home, func(h *helper, s *session) error {
			// The first start deploys the agent into the container, or
			// starts the wrapper's control shell.
			if _, err := s.startWait(ctx, "true", cwd); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
			progress("container: %d x (exec/start true in the container through the %s, podman exec %s true)", containerRuns, mode, name)
			for range containerRuns {
				t0 := time.Now()
				o, err := s.startWait(ctx, "true", cwd)
				if err != nil {
					return err
				}
				if o.Facts.ExitCode == nil || *o.Facts.ExitCode != 0 || o.Facts.RemoteMode != mode {
					return fmt.Errorf("exec/start true in the container: %+v", o.Facts)
				}
				viaHelper = append(viaHelper, time.Since(t0))
				t0 = time.Now()
				if out, err := exec.CommandContext(ctx, "podman", "exec", name, "true").CombinedOutput(); err != nil {
					return fmt.Errorf("podman exec: %v: %s", err, out)
				}
				viaExec = append(viaExec, time.Since(t0))
			}
			return nil
		})
		helperEnv = nil
		if err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
		hp50, pp50 := median(viaHelper), median(viaExec)
		ratio := hp50.Seconds() / pp50.Seconds()
		fmt.Printf("container: exec/start true through the %s p50 %s p90 %s; podman exec true p50 %s p90 %s\n",
			mode, ms(hp50), ms(percentile(viaHelper, 90)), ms(pp50), ms(percentile(viaExec, 90)))
		target := targetContainer
		if mode == "wrapper" {
			target = targetWrapper
		}
		rows = append(rows, row{
			measure:  fmt.Sprintf("exec/start true in a Podman container, %s, p50 (n=%d)", mode, containerRuns),
			helper:   ms(hp50),
			baseline: ms(pp50) + " (podman exec CONTAINER true)",
			ratio:    fmt.Sprintf("%.2f", ratio),
			target:   fmt.Sprintf("<= %.1fx", target),
			result:   verdict(ratio <= target),
		})
	}
	return rows, nil
}

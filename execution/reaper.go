package execution

import (
	"log"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The helper can make itself a child subreaper, so that a descendant which
// escapes its execution's group (setsid, double fork) is re-parented to the
// helper instead of init. Such adopted orphans must be reaped by pid: a
// wait4(-1) would steal the children that os/exec is waiting for. Every
// child the helper starts therefore goes through spawn, which records its
// pid under the same lock the reaper scans with, so a child that exits
// before its pid is recorded is never mistaken for an orphan.
var reaper struct {
	mu      sync.Mutex
	started map[int]bool // guarded by mu; pids that os/exec will wait for
}

// spawn starts cmd and records it as a child that os/exec waits for. Call
// forget with its pid once Wait has returned.
func spawn(cmd *exec.Cmd) error {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if reaper.started == nil {
		reaper.started = make(map[int]bool)
	}
	reaper.started[cmd.Process.Pid] = true
	return nil
}

func forget(pid int) {
	reaper.mu.Lock()
	delete(reaper.started, pid)
	reaper.mu.Unlock()
}

// BecomeSubreaper makes this process the child subreaper for everything it
// starts and reaps adopted orphans until stop is closed. The returned
// function waits for the reaping goroutine to end.
func BecomeSubreaper(logger *log.Logger, stop <-chan struct{}) (wait func(), err error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return func() {}, err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(sigs)
		for {
			select {
			case <-stop:
				reapOrphans(logger)
				return
			case <-sigs:
				reapOrphans(logger)
			}
		}
	}()
	return func() { <-done }, nil
}

// reapOrphans collects the zombie children that os/exec is not waiting for.
func reapOrphans(logger *log.Logger) {
	self := os.Getpid()
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	for _, p := range processTable() {
		if p.ppid != self || p.state != 'Z' || reaper.started[p.pid] {
			continue
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); err != nil && err != unix.ECHILD {
			logger.Printf("execution: reaping adopted orphan %d: %v", p.pid, err)
		}
	}
}

package process

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
// child the helper starts therefore goes through Spawn, which records its
// pid under the same lock the reaper scans with, so a child that exits
// before its pid is recorded is never mistaken for an orphan.
var reaper struct {
	mu      sync.Mutex
	started map[int]bool // guarded by mu; pids that os/exec will wait for
	active  bool         // guarded by mu; this process is the subreaper
}

// Spawn starts cmd and records it as a child that os/exec waits for. Call
// Forget with its pid once Wait has returned. Every child of the helper
// must start through Spawn, or the reaper may take its exit status.
func Spawn(cmd *exec.Cmd) error {
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

// Forget drops pid once os/exec has waited for it.
func Forget(pid int) {
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
	reaper.mu.Lock()
	reaper.active = true
	reaper.mu.Unlock()
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

// reapOrphans collects the zombie children that os/exec is not waiting
// for. It asks only about the helper's own children (wait4 with WNOHANG
// on a live child is a no-op), and scans all of /proc only where the
// kernel cannot list children.
func reapOrphans(logger *log.Logger) {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	kids, ok := ownChildren()
	if !ok {
		self := os.Getpid()
		for _, p := range Table() {
			if p.PPid == self && p.State == 'Z' {
				kids = append(kids, p.Pid)
			}
		}
	}
	for _, pid := range kids {
		if reaper.started[pid] {
			continue
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil && err != unix.ECHILD {
			logger.Printf("process: reaping adopted orphan %d: %v", pid, err)
		}
	}
}

// noneLeft reports, cheaply, that nothing of an execution whose shell has
// been reaped can still be alive: its group is empty, and the helper, as
// subreaper, has no live adopted child. Every descendant that outlived the
// shell is in the group or under such an adopted child (an orphan goes to
// the nearest subreaper). False means "look closer", not "alive".
func noneLeft(pgid int) bool {
	if unix.Kill(-pgid, 0) != unix.ESRCH {
		return false
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if !reaper.active {
		return false
	}
	kids, ok := ownChildren()
	if !ok {
		return false
	}
	for _, pid := range kids {
		if reaper.started[pid] {
			continue
		}
		if p, ok := Stat(pid); ok && p.Alive() {
			return false
		}
	}
	return true
}

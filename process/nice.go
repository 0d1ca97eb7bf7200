package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Yielding the CPU to the editor. The commands a helper runs can keep
// every CPU busy (a build, hundreds of watchers); the editor beside them
// is one thread that must answer keystrokes and collect its garbage, and
// when it waits its turn behind them a person feels every pause. With a
// niceness N, every process the helper starts begins at nice N, and its
// descendants inherit it. Where the kernel groups scheduling by session
// (autogroups), a child's nice only orders it against its own session, so
// the helper also sets N on its own session's group when it leads one (an
// editor starts it so), and on the new session of each terminal start.

// niceness is what Yield set: 0, or the nice of every later child.
var niceness atomic.Int32

// MaxNice is the largest niceness Linux knows.
const MaxNice = 19

// Yield makes every child started from now on run at nice n (0 ≤ n ≤
// MaxNice; 0 leaves children at the helper's own), and, when this process
// leads its session, sets n on that session's scheduling autogroup. The
// autogroup's failure is only logged: the kernel may have none, or refuse
// an unprivileged change made within 100 ms of another (it retries).
func Yield(n int) error {
	if err := ValidNice(n); err != nil {
		return err
	}
	niceness.Store(int32(n))
	if sid, err := unix.Getsid(0); n == 0 || err != nil || sid != os.Getpid() {
		return nil
	}
	go func() {
		for try := 0; ; try++ {
			err := setAutogroupNice(os.Getpid(), n)
			if !errors.Is(err, unix.EAGAIN) || try == 10 {
				switch {
				case err == nil:
					logf("this session's scheduling group is at nice %d, as its commands", n)
				case !errors.Is(err, os.ErrNotExist):
					logf("cannot lower the session's scheduling group to nice %d: %v", n, err)
				}
				return
			}
			time.Sleep(110 * time.Millisecond) // the kernel's rate limit
		}
	}()
	return nil
}

// ValidNice says why n cannot be a helper's niceness, or nil.
func ValidNice(n int) error {
	if n < 0 || n > MaxNice {
		return fmt.Errorf("nice %d: must be 0 to %d (a helper cannot raise its priority)", n, MaxNice)
	}
	return nil
}

// reniceChild puts a just started child's process group, which it leads,
// at the niceness Yield set; a terminal start, which leads a session of
// its own, has its autogroup set too (best effort: unprivileged, the kernel
// takes one autogroup change in 100 ms).
func reniceChild(pid int, ownSession bool) {
	n := int(niceness.Load())
	if n == 0 {
		return
	}
	_ = unix.Setpriority(unix.PRIO_PGRP, pid, n) // ESRCH: it has ended
	if ownSession {
		_ = setAutogroupNice(pid, n)
	}
}

// setAutogroupNice writes n to the autogroup of pid's session.
func setAutogroupNice(pid, n int) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/autogroup", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(strconv.Itoa(n))
	return err
}

package process

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// One reaper waits for every child of the helper: a goroutine woken by
// SIGCHLD collects exit statuses with non-blocking wait4 and hands each
// to the waiter of that child. Nothing blocks an OS thread per process,
// as os/exec's Wait would (a blocking wait4 or waitid holds a thread for
// as long as the child lives).
//
// The helper is also the child subreaper of everything it starts
// (BecomeSubreaper), so a descendant whose parent dies is re-parented to
// it rather than to init. The reaper attributes such an adopted orphan to
// the execution it descends from: an adoption by the helper happens when
// a process dies whose orphans have no living subreaper between them and
// the helper — a command's shell (itself a subreaper, see shim.go), or a
// process already adopted and attributed. The reaper reaps that process in
// the same round in which the orphan first shows up among the helper's
// children, so the orphan is recorded in the Tree of every process reaped
// in that round (more than one only when several exit together: then it is
// killed a little early rather than lost).
var reaper struct {
	mu       sync.Mutex
	children map[int]*child   // guarded by mu; started and not yet reaped
	adopted  map[int]*adoptee // guarded by mu; adopted orphans and their trees
	running  bool             // guarded by mu; the reaping goroutine runs
	active   bool             // guarded by mu; this process is the subreaper
	// blind: guarded by mu; the last reap could not list the helper's
	// children, so adopted may miss some.
	blind bool
	// reaped is closed, and replaced, by every reap that collects a
	// process (guarded by mu): what waits for a group to empty wakes then.
	reaped chan struct{}
}

// child is one started process the reaper waits for.
type child struct {
	pid    int
	proc   *os.Process
	tree   *Tree // nil for a process no execution owns
	done   chan struct{}
	status unix.WaitStatus // set before done is closed
}

// adoptee is an adopted orphan and the trees it was attributed to.
type adoptee struct {
	start uint64
	trees []*Tree
}

// Spawn starts cmd, which must make itself a process group leader
// (Setpgid or Setsid), as a child that the reaper waits for, with the
// Tree of its processes: its group, those carrying tag, and those the
// reaper attributes to it. Every child of the helper must start through
// Spawn, and nothing may call cmd.Wait: the reaper takes every exit
// status, and only the returned child's pid may be read: cmd.Process is
// released once the child is reaped.
func Spawn(cmd *exec.Cmd, tag string) (*child, *Tree, error) {
	return spawn(cmd, tag, spawnOpts{})
}

// spawnOpts is what the shim does for one start besides the subreaper.
type spawnOpts struct {
	shield    bool         // shield a sandbox's bwrap (shim_native.go)
	beforeRun func() error // Spec.BeforeRun
}

// maxGateFd is the highest descriptor the shim's gate flag can name.
const maxGateFd = 9

// spawn is Spawn with the shim's options. With beforeRun, the command
// starts gated where the shim can hold it: its process exists, blocked on
// a pipe, while beforeRun runs; then the pipe lets it go on, or, when
// beforeRun fails, closes unread and the shim exits without running it
// (as it does when the helper dies meanwhile). Where the shim cannot,
// beforeRun runs first.
func spawn(cmd *exec.Cmd, tag string, o spawnOpts) (*child, *Tree, error) {
	var gate *os.File
	gateFd := 0
	if o.beforeRun != nil {
		if shimUsable(cmd) && 3+len(cmd.ExtraFiles) <= maxGateFd {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, nil, fmt.Errorf("gate pipe: %w", err)
			}
			defer r.Close()
			gate, gateFd = w, 3+len(cmd.ExtraFiles)
			cmd.ExtraFiles = append(cmd.ExtraFiles, r)
		} else if err := o.beforeRun(); err != nil {
			return nil, nil, err
		}
	}
	c, tree, err := spawnShimmed(cmd, tag, shimFlags(gateFd, o.shield))
	if err == nil {
		// Before a gated command runs, and outside the reaper's lock (a
		// terminal start's autogroup is a file write): what the command
		// starts inherits the nice.
		reniceChild(c.pid, cmd.SysProcAttr != nil && cmd.SysProcAttr.Setsid)
	}
	if gate == nil {
		return c, tree, err
	}
	if err != nil {
		gate.Close()
		return nil, nil, err
	}
	if err := o.beforeRun(); err != nil {
		gate.Close()
		c.wait()
		return nil, nil, err
	}
	// A shim killed meanwhile has nothing left to run: its exit tells.
	_, _ = gate.Write([]byte{1})
	gate.Close()
	return c, tree, nil
}

// spawnShimmed starts cmd through the shim with flags and registers it.
func spawnShimmed(cmd *exec.Cmd, tag string, flags []string) (*child, *Tree, error) {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	startReaper()
	cmd, err := startShimmed(cmd, flags)
	if err != nil {
		return nil, nil, err
	}
	pid := cmd.Process.Pid
	// Not reaped before this returns (the lock), so it is still there.
	start, _ := StartTime(pid)
	c := &child{pid: pid, proc: cmd.Process, tree: NewTree(pid, tag, start), done: make(chan struct{})}
	reaper.children[pid] = c
	return c, c.tree, nil
}

// startReaper starts the reaping goroutine once, before the first child:
// SIGCHLD is asked for before any child can exit. Called with mu held.
func startReaper() {
	if reaper.running {
		return
	}
	reaper.running = true
	reaper.children = make(map[int]*child)
	reaper.adopted = make(map[int]*adoptee)
	reaper.reaped = make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
			reap()
		}
	}()
}

// wait waits for the child's exit.
func (c *child) wait() unix.WaitStatus {
	<-c.done
	return c.status
}

// exited reports without blocking whether the reaper has the exit.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// BecomeSubreaper makes this process the child subreaper for everything it
// starts. Closing stop reaps once more; the returned function waits for
// that.
func BecomeSubreaper(_ *log.Logger, stop <-chan struct{}) (wait func(), err error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return func() {}, err
	}
	reaper.mu.Lock()
	reaper.active = true
	startReaper()
	reaper.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
		reap()
	}()
	return func() { <-done }, nil
}

// reap collects every exited child and attributes new adoptees to the
// trees of what it collected.
func reap() {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	var sources []*Tree
	if !reaper.active {
		// Without adoption only the children started here exist, and
		// another part of this process (a test) may have children of its
		// own: ask by pid.
		n := 0
		for pid, c := range reaper.children {
			var ws unix.WaitStatus
			if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid && err == nil {
				finish(pid, c, ws)
				n++
			}
		}
		if n > 0 {
			announceReaped()
		}
		return
	}
	// An orphan is re-parented in the same step that makes its parent a
	// zombie, so once a listing is followed by a collection that finds
	// nothing, every adoptee in the listing comes from a process collected
	// in this round.
	reaped := reapAll(&sources)
	if reaped == 0 {
		return // nothing to attribute adoptees to
	}
	defer announceReaped()
	for {
		kids, ok := adoptedChildren()
		if n := reapAll(&sources); n > 0 {
			reaped += n
			continue
		}
		reaper.blind = !ok
		if ok {
			attribute(kids, sources)
		}
		return
	}
}

// announceReaped wakes whoever waits for the next reap. Called with mu
// held.
func announceReaped() {
	close(reaper.reaped)
	reaper.reaped = make(chan struct{})
}

// reapAll collects every zombie child; each one's trees join sources.
func reapAll(sources *[]*Tree) int {
	n := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return n
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued: still there
		}
		n++
		if c := reaper.children[pid]; c != nil {
			if c.tree != nil {
				*sources = appendTree(*sources, c.tree)
			}
			finish(pid, c, ws)
		} else if a := reaper.adopted[pid]; a != nil {
			for _, t := range a.trees {
				*sources = appendTree(*sources, t)
			}
			delete(reaper.adopted, pid)
		}
	}
}

func finish(pid int, c *child, ws unix.WaitStatus) {
	delete(reaper.children, pid)
	c.status = ws
	_ = c.proc.Release() // its pidfd; the pid is already reaped
	close(c.done)
}

func appendTree(ts []*Tree, t *Tree) []*Tree {
	if slices.Contains(ts, t) {
		return ts
	}
	return append(ts, t)
}

// attribute records the helper's new adopted children in the trees of
// what was reaped with them. One whose tree is known already (found by a
// scan, or a member of the group) keeps its trees.
func attribute(kids []int, sources []*Tree) {
	for _, pid := range kids {
		if reaper.children[pid] != nil || reaper.adopted[pid] != nil {
			continue
		}
		p, ok := Stat(pid)
		if !ok || !p.Alive() {
			continue
		}
		a := &adoptee{start: p.Start}
		for _, t := range sources {
			if t.claims(p) {
				a.trees = append(a.trees, t)
			}
		}
		if len(a.trees) == 0 {
			a.trees = sources
		}
		if len(a.trees) == 0 {
			// Not from a process reaped now: its parent was a descendant
			// of an orphan adopted earlier, whose tree it shares.
			for _, o := range reaper.adopted {
				for _, t := range o.trees {
					a.trees = appendTree(a.trees, t)
				}
			}
		}
		for _, t := range a.trees {
			t.record(p)
		}
		reaper.adopted[pid] = a
		if len(a.trees) == 0 {
			logf("process: adopted orphan %d (%s) could not be attributed to an execution", pid, comm(pid))
		}
	}
}

// noneLeft reports, cheaply, that nothing of an execution whose shell has
// been reaped can still be alive: its group is empty, and the helper, as
// subreaper, has no adopted child left. Every descendant that outlived the
// shell is in the group or under such an adopted child (an orphan goes to
// the nearest subreaper). No listing is needed: the reap that collected
// the shell listed the helper's children after it (under mu, which this
// waits for) and recorded the new ones in adopted; a later orphan comes to
// the helper either at the death of an adopted child, whose reap lists
// and records it, or at the death of a deeper process, while an ancestor
// that is in adopted is still there (alive, or a zombie not yet reaped).
// False means "look closer", not "alive".
func noneLeft(pgid int) bool {
	if unix.Kill(-pgid, 0) != unix.ESRCH {
		return false
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	return noAdopteeLocked()
}

// noAdopteeLocked is noneLeft's question about adopted orphans: none of
// them is alive, and the reaper knows them all. Called with mu held.
func noAdopteeLocked() bool {
	if !reaper.active || reaper.blind {
		return false
	}
	for pid := range reaper.adopted {
		if _, ok := Stat(pid); ok {
			return false
		}
	}
	return true
}

// quiet waits up to d until noneLeft(pgid) holds, looking again after
// every reap, and reports whether it came to hold. What a shell leaves in
// its group as it exits is mostly on its way out: a sandbox's bwrap ends
// a moment before the init of its pid namespace, which the helper then
// reaps. Waiting for that reap proves the group empty without a scan of
// every process, and spares a lingering check that would find it still
// there; a process that stays is left to the caller's closer look.
func quiet(pgid int, d time.Duration) bool {
	var expired <-chan time.Time
	for {
		// One hold of the lock (which a spawn or a reap may keep for a
		// while on a busy machine) for the question and the next reap.
		reaper.mu.Lock()
		next := reaper.reaped
		none := unix.Kill(-pgid, 0) == unix.ESRCH && noAdopteeLocked()
		reaper.mu.Unlock()
		if none {
			return true
		}
		if next == nil || d <= 0 {
			return false // no reaper yet (nothing was started), or no wait
		}
		if expired == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-next:
		case <-expired:
			return false
		}
	}
}

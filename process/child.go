package process

import (
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// Child is a process of the helper's own that no execution owns: the
// sudo or container engine process a host agent's stream runs through.
// The reaper takes its exit status like any child's.
type Child struct{ c *child }

// StartChild starts cmd, which must make itself a process group leader
// (Setpgid), without a tree. Its stdio must be *os.File (or nil): nothing
// may call cmd.Wait, which is what would end os/exec's own copying
// goroutines. In shim mode it starts through the keeper (runKeeper), so
// what the program leaves behind (an engine's conmon) is never adopted
// by the helper, where an execution's tree could claim it.
func StartChild(cmd *exec.Cmd) (*Child, error) {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	startReaper()
	if exe, _ := shimExe.Load().(string); exe != "" && cmd.Err == nil {
		cmd.Args = append([]string{"mevedel-exec", keeperArg, cmd.Path}, cmd.Args...)
		cmd.Path = exe
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{pid: cmd.Process.Pid, proc: cmd.Process, done: make(chan struct{})}
	reaper.children[c.pid] = c
	// A local target's commands descend from it: they yield as any.
	reniceChild(c.pid, false)
	return &Child{c}, nil
}

// Pid is the child's pid, and its process group's id.
func (c *Child) Pid() int { return c.c.pid }

// Done is closed once the child has been reaped.
func (c *Child) Done() <-chan struct{} { return c.c.done }

// Status is the child's wait status, once Done is closed.
func (c *Child) Status() unix.WaitStatus { return c.c.wait() }

// Kill sends SIGKILL to the child's process group, unless it was reaped
// already (its pid may be another's then).
func (c *Child) Kill() {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if !c.c.exited() {
		_ = unix.Kill(-c.c.pid, unix.SIGKILL)
	}
}

// keeperArg marks a start in keeper mode: os.Args[1], followed by the
// path of the program and its argv.
const keeperArg = "mevedel-exec:keep-exec"

// runKeeper, in keeper mode, is a child subreaper that runs the program
// and reaps it and everything it leaves behind (daemons it forks), then
// exits with the program's status (128+N for a death by signal N). Its
// own copies of the stdio are closed once the program runs, so they end
// with the program's.
func runKeeper() {
	if len(os.Args) < 4 || os.Args[1] != keeperArg {
		return
	}
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	p, err := os.StartProcess(os.Args[2], os.Args[3:], &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mevedel-exec: %s: %v\n", os.Args[2], err)
		os.Exit(127)
	}
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	code := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			os.Exit(code) // ECHILD: nothing is left
		}
		if pid == p.Pid {
			code = ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
	}
}

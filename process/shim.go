package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A command's first process (its shell) is made a child subreaper before
// it runs: the helper starts its own executable in shim mode, which sets
// PR_SET_CHILD_SUBREAPER (kept across execve) and replaces itself with the
// command, keeping its pid. Then a process of the command whose parent dies
// is re-parented to the shell, not to the helper: while the shell lives
// every process of the command descends from it by parent links, whatever
// it did to its group, session or environment. Only when the shell itself
// ends do the rest pass to the helper, which the reaper sees (reaper.go).
//
// A program run directly (argv) becomes the subreaper in the same way; one
// that never waits for children it did not start keeps their zombies until
// it exits, which costs a process table entry, nothing more.

// shimArg marks a start in shim mode: os.Args[1], followed by the path of
// the program and its argv, or by the shim's flags and then those (see
// shim_native.go).
const shimArg = "mevedel-exec:subreaper-exec"

// shimExe is the helper's executable when shim mode is on, else "".
var shimExe atomic.Value

// UseShim starts every later child through the running executable in
// shim mode (which this package's init handles, so any program that links
// it can be the shim).
//
// Where it can, it uses the native shim instead (shim_native.go), which
// does the same without starting a Go runtime; err says why it could not,
// and is no failure: the executable's shim mode then does the work.
func UseShim() (err error) {
	shimExe.Store("/proc/self/exe")
	return startNativeShim()
}

// In shim mode the work is done before the rest of the program initialises
// (a command's start pays for the runtime and this package's imports only).
func init() {
	runShim()
	runKeeper()
}

// runShim makes this process a child subreaper and replaces it with the
// program named in its arguments, when it was started in shim mode; it
// returns otherwise.
func runShim() {
	if len(os.Args) < 4 || os.Args[1] != shimArg {
		return
	}
	args := os.Args[2:]
	if strings.HasPrefix(args[0], "-") {
		flags := args[0][1:]
		args = args[1:]
		for i := 0; i < len(flags); i++ {
			switch flags[i] {
			case 'g':
				if i+1 >= len(flags) || !passGate(int(flags[i+1]-'0')) {
					os.Exit(127)
				}
				i++
			case 'i':
				// Without the copy the box's inner start fails, and says so.
				if err := placeInnerShim(); err != nil {
					fmt.Fprintf(os.Stderr, "mevedel-exec: %v\n", err)
				}
				signal.Ignore(shieldedSignals...)
			}
		}
	}
	// Without it the command still runs; its orphans go to the helper.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "mevedel-exec: %s: %v\n", args[0], err)
	os.Exit(127)
}

// passGate waits for the gate on fd to open (one byte) and closes it; a
// gate closed unread says the command must not run.
func passGate(fd int) bool {
	var b [1]byte
	for {
		n, err := unix.Read(fd, b[:])
		if err == unix.EINTR {
			continue
		}
		unix.Close(fd)
		return n == 1
	}
}

// shieldedSignals are those a stop, an interrupt or a terminal sends to a
// command's process group (the native shim's list too).
var shieldedSignals = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM}

// shimFlags are the shim's flags for a start: the gate on descriptor
// gate (when not 0) and the shield.
func shimFlags(gate int, shield bool) []string {
	f := "-"
	if gate > 0 {
		f += "g" + strconv.Itoa(gate)
	}
	if shield {
		f += "i"
	}
	if f == "-" {
		return nil
	}
	return []string{f}
}

// shimUsable reports whether cmd can start through the shim: shim mode is
// on and the program can be executed (a program that cannot fails in
// cmd.Start, as it would without the shim).
func shimUsable(cmd *exec.Cmd) bool {
	exe, _ := shimExe.Load().(string)
	if exe == "" || cmd.Err != nil || len(cmd.Args) == 0 {
		return false
	}
	fi, err := os.Stat(cmd.Path)
	return err == nil && fi.Mode().IsRegular() && unix.Access(cmd.Path, unix.X_OK) == nil
}

// throughShim returns cmd started through the shim with flags, when
// shimUsable.
func throughShim(cmd *exec.Cmd, flags []string) *exec.Cmd {
	if !shimUsable(cmd) {
		return cmd
	}
	if native := nativeShimPath(); native != "" {
		cmd.Args = append(append(append([]string{"mevedel-exec-subreaper"}, flags...), cmd.Path), cmd.Args...)
		cmd.Path = native
		return cmd
	}
	exe, _ := shimExe.Load().(string)
	return goShim(cmd, exe, flags)
}

// goShim starts cmd through the executable exe in shim mode.
func goShim(cmd *exec.Cmd, exe string, flags []string) *exec.Cmd {
	cmd.Args = append(append(append([]string{"mevedel-exec", shimArg}, flags...), cmd.Path), cmd.Args...)
	cmd.Path = exe
	return cmd
}

// startShimmed starts cmd through the shim. The native shim's memfd is
// opened through /proc/self/fd, which the kernel now and then refuses
// (EACCES) to a child forked while other threads fork; such a start is
// made again, once, through the executable's shim mode.
func startShimmed(cmd *exec.Cmd, flags []string) (*exec.Cmd, error) {
	path, args := cmd.Path, cmd.Args
	cmd = throughShim(cmd, flags)
	err := cmd.Start()
	exe, _ := shimExe.Load().(string)
	if err == nil || !errors.Is(err, unix.EACCES) || cmd.Path != nativeShimPath() || exe == "" {
		return cmd, err
	}
	again := &exec.Cmd{Path: path, Args: args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		ExtraFiles: cmd.ExtraFiles, SysProcAttr: cmd.SysProcAttr}
	again = goShim(again, exe, flags)
	return again, again.Start()
}

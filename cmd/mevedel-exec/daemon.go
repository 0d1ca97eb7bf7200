package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/sandbox"
	"golang.org/x/sys/unix"
)

// The per-user daemon: a helper that outlives the Emacs that started it,
// serving every client of its user on one unix socket.

const (
	socketName = "daemon.sock"
	lockName   = "daemon.lock"
	logName    = "daemon.log"
	// readyBound bounds how long `daemon` waits for the detached daemon
	// to listen (or for another one starting at the same time).
	readyBound = 30 * time.Second
	// DefaultIdleExit is how long a daemon with no client and nothing
	// running or waiting to be delivered stays before it exits.
	defaultIdleExit = 10 * time.Minute
)

// daemonDir returns the daemon's private directory:
// $XDG_RUNTIME_DIR/mevedel-exec, else ~/.cache/mevedel-exec.
func daemonDir() (string, error) {
	if base := os.Getenv("XDG_RUNTIME_DIR"); base != "" && filepath.IsAbs(base) {
		return filepath.Join(base, sandbox.OwnDir), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no XDG_RUNTIME_DIR and no home directory: %w", err)
	}
	return filepath.Join(home, ".cache", sandbox.OwnDir), nil
}

// privateDir creates dir (0700) when missing and checks that it is a
// directory of ours that nobody else may enter: the socket's permission
// alone does not keep others from replacing it.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case st == nil || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to another user", dir)
	case fi.Mode().Perm()&0o022 == 0 && fi.Mode().Perm()&0o077 != 0:
		// Nobody else could have written in it: a mount point a box
		// made for it on the host (0755) is ours to tighten.
		return os.Chmod(dir, 0o700)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is mode %04o: others may enter it; make it 0700", dir, fi.Mode().Perm())
	}
	return nil
}

// openBeneath opens (creating, 0600) the file name right in the checked
// directory dir, never through a symbolic link: neither dir nor name may
// be one, and name must be a regular file of ours.
func openBeneath(dir, name string, flags int) (*os.File, error) {
	d, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_PATH, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(d)
	fd, err := unix.Openat(d, name, flags|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Getuid() {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file of this user", filepath.Join(dir, name))
	}
	// Non-blocking only so that a FIFO planted there could not hold the
	// open; the file is used as a plain one.
	_ = unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), filepath.Join(dir, name)), nil
}

// daemonSocket returns the socket path, its directory made and checked.
func daemonSocket() (string, error) {
	dir, err := daemonDir()
	if err == nil {
		err = privateDir(dir)
	}
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, socketName), nil
}

// answering reports whether a daemon serves on sock: it answers a
// daemon/status, not merely accepts the connection. A daemon being killed
// keeps its listener until its last thread is gone, past the moment its
// process shows as dead; a connect alone would take it for the live one.
func answering(sock string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), answerBound)
	defer cancel()
	c, err := client.Dial(ctx, sock, nil)
	if err != nil {
		return false
	}
	defer c.Close()
	var st rpc.DaemonStatusResult
	return c.Call(ctx, rpc.MethodDaemonStatus, nil, &st) == nil
}

// answerBound bounds answering's exchange; a live daemon answers status
// from its read loop at once.
const answerBound = 2 * time.Second

// daemon starts the per-user daemon detached, unless one answers already,
// and prints its socket's path once it listens. With --foreground it is
// the daemon.
func daemon(args []string) int {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	foreground := fs.Bool("foreground", false, "serve in this process, logging to stderr, instead of detaching")
	idle := fs.Duration("idle-exit", defaultIdleExit, "exit after this long with no client and nothing running or waiting to be delivered (0: never)")
	stall := fs.Duration("stall-timeout", rpc.DefaultStallTimeout, "disconnect a client that takes no output for this long while some waits for it")
	readyFD := fs.Int("ready-fd", 0, "(internal) write \"ready\" or why not to this descriptor")
	nice := niceFlag(fs)
	if err := parseHelperFlags(fs, args, nice); err != nil {
		return 2
	}
	sock, err := daemonSocket()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mevedel-exec daemon: %v\n", err)
		return 1
	}
	if *foreground {
		var ready io.WriteCloser
		if *readyFD > 0 {
			ready = os.NewFile(uintptr(*readyFD), "ready")
		}
		return serveDaemon(sock, *idle, *stall, *nice, ready)
	}
	if answering(sock) {
		fmt.Println(sock)
		return 0
	}
	if err := detach(sock, *idle, *stall, *nice); err != nil {
		fmt.Fprintf(os.Stderr, "mevedel-exec daemon: %v (its log: %s)\n", err, filepath.Join(filepath.Dir(sock), logName))
		return 1
	}
	fmt.Println(sock)
	return 0
}

// detach starts `daemon --foreground` in a session of its own, its output
// in the log file, and waits until it says it listens.
func detach(sock string, idle, stall time.Duration, nice int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := openBeneath(filepath.Dir(sock), logName, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return err
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(self, "daemon", "--foreground", "--ready-fd", "3",
		"--idle-exit", idle.String(), "--stall-timeout", stall.String(), "--nice", strconv.Itoa(nice))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Dir = "/"
	// Its own session: no terminal, and no signal meant for the caller's
	// process group reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	said := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		said <- strings.TrimSpace(line)
	}()
	select {
	case line := <-said:
		if line == "ready" {
			return nil
		}
		if line == "" {
			line = "the daemon exited before it listened"
		}
		return errors.New(line)
	case <-time.After(readyBound):
		return fmt.Errorf("the daemon did not listen within %v", readyBound)
	}
}

// serveDaemon is the daemon itself. One holds the lock at a time; one that
// finds it held waits for the holder to listen and leaves it the work.
func serveDaemon(sock string, idle, stall time.Duration, nice int, ready io.WriteCloser) int {
	say := func(s string) {
		if ready != nil {
			_, _ = io.WriteString(ready, s+"\n")
			ready.Close()
			ready = nil
		}
	}
	defer say("the daemon exited before it listened")
	logger := log.New(os.Stderr, fmt.Sprintf("mevedel-exec daemon[%d]: ", os.Getpid()), log.LstdFlags|log.Lmicroseconds)
	lock, err := openBeneath(filepath.Dir(sock), lockName, os.O_RDWR)
	if err != nil {
		say(err.Error())
		return 1
	}
	defer lock.Close()
	// Another daemon holding the lock serves, once it answers; one on its
	// way out lets go of the lock, and this one takes over.
	for deadline := time.Now().Add(readyBound); unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil; {
		if answering(sock) {
			say("ready")
			return 0
		}
		if time.Now().After(deadline) {
			say("another daemon holds " + lock.Name() + " but does not answer")
			return 1
		}
		time.Sleep(20 * time.Millisecond) // another process's lock and socket: nothing to wait on
	}
	// Holding the lock, a socket left here is a dead daemon's.
	if fi, err := os.Lstat(sock); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			say(sock + " exists and is not a socket")
			return 1
		}
		_ = os.Remove(sock)
	}
	signals, done := helperProcess(logger, nice)
	defer done()
	old := syscall.Umask(0o177) // private from its creation, not after a chmod
	l, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		say(err.Error())
		return 1
	}
	defer os.Remove(sock)
	srv := rpc.NewServer(rpc.Options{Logger: logger, StallTimeout: stall, Daemon: true})
	go onSignals(srv, signals, logger)
	logger.Printf("serving uid %d on %s (version %s, idle exit %v)", os.Getuid(), sock, rpc.ServerVersion, idle)
	say("ready")
	return exitCode(srv.ServeDaemon(l, idle), logger)
}

// startProfile starts profiling the helper and returns what ends it:
// nothing but in a build for the benchmarks (profile.go).
var startProfile = func() (stop func()) { return func() {} }

// helperProcess makes this process a helper: its logging, the signals
// that shut it down, the niceness of its commands (valid), the native
// shim and the child subreaper. done stops the reaper once everything has
// ended.
func helperProcess(logger *log.Logger, nice int) (signals chan os.Signal, done func()) {
	stopProfile := startProfile()
	execution.SetLogger(logger)
	process.SetLogger(logger)
	_ = process.Yield(nice)
	// Caught from the start, so none of them kills the helper before its
	// executions are stopped. A caught signal, unlike an ignored one, is
	// reset to its default in the commands the helper starts.
	signals = make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// A client that went away is a failed write, which ends the connection
	// as EOF does; the signal must not kill the helper first.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go dumpStacksOn(syscall.SIGUSR1, logger)
	// Before the reaper starts: the shim's check runs a child of its own.
	if err := process.UseShim(); err != nil {
		logger.Printf("no native subreaper shim, the helper's executable serves instead: %v", err)
	}
	stop := make(chan struct{})
	waitReaper, err := process.BecomeSubreaper(logger, stop)
	if err != nil {
		logger.Printf("cannot become a child subreaper (escaped descendants are still traced by tag): %v", err)
	}
	return signals, func() {
		close(stop)
		waitReaper()
		stopProfile()
	}
}

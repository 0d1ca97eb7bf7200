// Command mevedel-exec is the execution helper of mevedel: `serve` speaks
// JSON-RPC on stdio (or a unix socket) to Emacs; `run` is a small human
// client that starts a helper and runs one command through it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/mevedel/mevedel-exec/rpc"
)

const usage = `usage:
  mevedel-exec serve [--listen PATH] [--nice N]   speak the protocol on stdio (or a unix socket)
  mevedel-exec run [flags] -- COMMAND   run COMMAND through a helper, print its output
  mevedel-exec daemon [--idle-exit D] [--nice N]   start the per-user daemon (detached) unless it runs
  mevedel-exec ps|logs|stop|grep|attach|wait ...   the daemon's executions, for a person at a shell
  mevedel-exec host                    the host agent an SSH host runs for a helper (stdio)
  mevedel-exec --version
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	agent.Version, agent.Deployable = rpc.ServerVersion, true
	keepInheritedFromChildren()
	switch os.Args[1] {
	case "host":
		os.Exit(agent.Main(os.Args[2:]))
	case "--version", "-version", "version":
		fmt.Printf("mevedel-exec %s (protocol %d)\n", rpc.ServerVersion, rpc.ProtocolVersion)
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "run":
		os.Exit(run(os.Args[2:]))
	case "daemon":
		os.Exit(daemon(os.Args[2:]))
	case "ps", "logs", "stop", "grep", "attach", "wait":
		os.Exit(cli(os.Args[1], os.Args[2:]))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "mevedel-exec: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "", "serve one client on this unix socket (mode 0600) instead of stdio")
	linger := fs.Duration("linger", 0, "with --listen: after a client leaves without shutdown, keep its sessions this long for the next client")
	stall := fs.Duration("stall-timeout", rpc.DefaultStallTimeout, "disconnect a client that takes no output for this long while some waits for it")
	nice := niceFlag(fs)
	if err := parseHelperFlags(fs, args, nice); err != nil {
		return 2
	}
	logger := log.New(os.Stderr, "mevedel-exec: ", log.LstdFlags|log.Lmicroseconds)
	signals, done := helperProcess(logger, *nice)
	defer done()
	o := rpc.Options{Logger: logger, StallTimeout: *stall}
	if *listen != "" {
		abs, err := filepath.Abs(*listen)
		if err != nil {
			logger.Print(err)
			return 1
		}
		*listen = abs
		o.Hidden = []string{abs}
	}
	srv := rpc.NewServer(o)
	go onSignals(srv, signals, logger)
	if *listen == "" {
		widenPipe(os.Stdout)
		return exitCode(srv.Serve(os.Stdin, os.Stdout), logger)
	}
	// Replace a stale socket, never anything else.
	if fi, err := os.Lstat(*listen); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			logger.Printf("%s exists and is not a socket", *listen)
			return 1
		}
		_ = os.Remove(*listen)
	}
	// The socket is private from its creation, not after a chmod.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", *listen)
	syscall.Umask(old)
	if err != nil {
		logger.Print(err)
		return 1
	}
	defer os.Remove(*listen)
	return exitCode(srv.ServeListener(l, *linger), logger)
}

// niceFlag is the helper's --nice: how far its commands yield the CPU.
func niceFlag(fs *flag.FlagSet) *int {
	return fs.Int("nice", 0, "run every command at this niceness (0 to 19), and the helper's session too when it leads one, so that an editor beside them stays responsive")
}

// parseHelperFlags parses a helper's flags; an error has been said.
func parseHelperFlags(fs *flag.FlagSet, args []string, nice *int) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := process.ValidNice(*nice); err != nil {
		fmt.Fprintf(os.Stderr, "mevedel-exec %s: %v\n", fs.Name(), err)
		return err
	}
	return nil
}

func exitCode(err error, logger *log.Logger) int {
	if err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// widenPipe gives a pipe to the client room for a whole listing (a
// listing of 500 executions is 300 KB; through the default 64 KiB the
// writer and the reader take turns five times over). Where the kernel
// refuses (past its pipe-max-size for the user), it stays as it is.
func widenPipe(f *os.File) {
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	if rc, err := f.SyscallConn(); err == nil { // Fd would make it blocking
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
}

// keepInheritedFromChildren marks every descriptor past stdio that this
// process inherited close-on-exec: whatever the parent left open (a
// shell's job pipe, an editor's socket) is this process's to use, never
// the commands'. Only stdio and what a start passes on purpose reach them.
func keepInheritedFromChildren() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11: one by one.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range fds {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

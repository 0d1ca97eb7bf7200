package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/mevedel/mevedel-exec/internal/envlist"
	"golang.org/x/sys/unix"
)

// Local runs commands on this machine with bash, each in its own process
// group (pipe mode) or session with a pty (tty mode).
type Local struct {
	Bash string // path of bash; if empty, looked up on PATH
	// Env, when set, is the login environment a command's Spec.Env is laid
	// over; without it the command gets Spec.Env alone.
	Env *LoginEnv
	// Direct runs a command that bash would only exec without bash
	// (direct.go). Off for an SSH host's agent.
	Direct bool
}

// pipeSize is the capacity asked of the output pipe: fewer, larger reads
// keep spooling close to the speed of a plain file copy.
const pipeSize = 1 << 20

// Start starts spec once the login environment is known.
func (l *Local) Start(ctx context.Context, spec Spec) (Process, error) {
	env := spec.Env
	if l.Env != nil {
		env = MergeEnv(l.Env.Get(ctx), spec.Env)
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	bash := l.Bash
	if bash == "" {
		var err error
		if bash, err = LookBash(); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Stat(spec.Dir); err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("working directory %s is not a directory", spec.Dir)
	}
	cmd := exec.Command(bash, "-c", spec.Command)
	if len(spec.Command) >= maxArgString {
		// The kernel takes no longer string to exec: bash reads the
		// command from a memfd on descriptor 3, which it closes for the
		// command itself (expansion comes before the redirection).
		text, err := commandFile(spec.Command)
		if err != nil {
			return nil, err
		}
		defer text.Close()
		cmd = exec.Command(bash, "-c", `eval "$(< /dev/fd/3)" 3<&-`)
		cmd.ExtraFiles = []*os.File{text}
	}
	if len(spec.Argv) > 0 {
		path, err := lookPathIn(spec.Argv[0], envlist.Value(env, "PATH"), spec.Dir)
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(path, spec.Argv[1:]...)
		cmd.Args[0] = spec.Argv[0]
	} else if l.Direct && !spec.TTY && spec.Resources == nil {
		// What bash would only exec runs without it (direct.go); in a
		// box, only a system program the box shows as it is.
		if path, argv, denv, ok := directCommand(bash, spec.Command, env, spec.Dir); ok &&
			(spec.Sandbox == nil || spec.Sandbox.ShowsProgram(path)) {
			cmd = &exec.Cmd{Path: path, Args: argv}
			env = denv
		}
	}
	cmd.Dir = spec.Dir
	cmd.Env = append(env[:len(env):len(env)], spec.Tag)
	p := &localProcess{tty: spec.TTY}
	if spec.TTY {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("opening a pty: %w", err)
		}
		_ = pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 200})
		if ptmx, err = pollable(ptmx); err != nil {
			tty.Close()
			return nil, fmt.Errorf("pty: %w", err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A new session with the pty as controlling terminal; its leader
		// is also the group leader.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		p.child, p.tree, err = spawnConfined(cmd, spec)
		tty.Close()
		if err != nil {
			ptmx.Close()
			return nil, err
		}
		p.out = ptmx
	} else {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		_, _ = unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, pipeSize)
		in, feed, err := stdinFor(spec.Stdin)
		if err != nil {
			pr.Close()
			pw.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = in, pw, pw
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		p.child, p.tree, err = spawnConfined(cmd, spec)
		pw.Close()
		in.Close()
		if err != nil {
			pr.Close()
			if feed != nil {
				feed.Close()
			}
			return nil, err
		}
		p.out = pr
		if feed != nil {
			p.feed = feed
			p.fed = make(chan struct{})
			go p.writeStdin(spec.Stdin)
		}
	}
	p.pid = p.child.pid
	p.start = p.tree.notBefore
	return p, nil
}

// pollable returns f as a non-blocking file on Go's poller. creack/pty
// switches the master to blocking mode (through File.Fd); a blocking write
// to a terminal whose command never reads could then not be interrupted by
// Close, and its goroutine would never end.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

type localProcess struct {
	child *child   // immutable once set; the reaper's record of the shell
	tree  *Tree    // immutable once set; what is known of its processes
	pid   int      // immutable once set
	tty   bool     // immutable
	start uint64   // immutable; the shell's start time, clock ticks
	out   *os.File // pipe read end or pty master
	// feed is the write end of a stdin pipe with data to write, or nil;
	// fed is closed once the writer goroutine is done with it.
	feed *os.File
	fed  chan struct{}
}

func (p *localProcess) Pid() int            { return p.pid }
func (p *localProcess) Pgid() int           { return p.pid }
func (p *localProcess) LeaderStart() uint64 { return p.start }
func (p *localProcess) Output() io.Reader   { return ptyReader{p.out} }

// OutputPipe is the output's pipe (nil for a terminal): the host agent
// frames what it holds (FIONREAD) rather than reading it through Output.
func (p *localProcess) OutputPipe() *os.File {
	if p.tty {
		return nil
	}
	return p.out
}

func (p *localProcess) Wait() (Exit, error) {
	st := p.child.wait()
	if st.Signaled() {
		return Exit{Signaled: true, Signal: st.Signal()}, nil
	}
	return Exit{Code: st.ExitStatus()}, nil
}

// Ended is closed once the reaper has the shell's exit status (Wait then
// returns at once).
func (p *localProcess) Ended() <-chan struct{} { return p.child.done }

func (p *localProcess) Exited() bool {
	if p.child.exited() {
		return true
	}
	// Peek without reaping: the reaper takes the status.
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return true // already reaped by Wait
	}
	return err == nil && info.Signo != 0 // zero when nothing was waitable
}

func (p *localProcess) Signal(sig syscall.Signal) error {
	// The members first, while the shell still links its descendants: one
	// that left the group and its environment is found through its
	// parents, which the group's signal may kill before a scan after it.
	members := p.tree.Members()
	_ = unix.Kill(-p.pid, sig)
	for _, m := range members {
		_ = unix.Kill(m.Pid, sig)
		if sig == unix.SIGTERM {
			// A stopped process acts on TERM only once continued.
			_ = unix.Kill(m.Pid, unix.SIGCONT)
		}
	}
	return nil
}

func (p *localProcess) Interrupt() error {
	if p.tty {
		// What the terminal would do for ^C, without needing room in a
		// terminal input queue that a busy command may have filled: SIGINT
		// to the terminal's foreground group.
		fg := 0
		if sc, err := p.out.SyscallConn(); err == nil {
			_ = sc.Control(func(fd uintptr) { fg, _ = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) })
		}
		if fg > 0 {
			return unix.Kill(-fg, unix.SIGINT)
		}
	}
	return unix.Kill(-p.pid, unix.SIGINT)
}

func (p *localProcess) Alive() bool {
	if p.child.exited() && noneLeft(p.pid) {
		return false // the common end: no scan of /proc
	}
	return len(p.tree.Members()) > 0
}

// Quiet waits up to d, once the shell has exited, for the reaper to
// collect what was left of its group (see quiet), and reports whether
// nothing is: Alive is then false without a scan.
func (p *localProcess) Quiet(d time.Duration) bool {
	return p.child.exited() && quiet(p.pid, d)
}

func (p *localProcess) Write(b []byte) (int, error) {
	if !p.tty {
		return 0, errors.New("stdin is closed in pipe mode")
	}
	n, err := p.out.Write(b)
	if errors.Is(err, syscall.EIO) {
		err = os.ErrClosed // the terminal's last holder is gone
	}
	return n, err
}

// CloseOutput also ends a stdin write the command never read to its end
// (an escaped process may hold stdin open forever).
func (p *localProcess) CloseOutput() error {
	if p.feed != nil {
		p.feed.Close()
		<-p.fed
	}
	return p.out.Close()
}

// writeStdin writes data to the command's stdin and closes it; a command
// that exits without reading it all ends the write (EPIPE), as does
// CloseOutput.
func (p *localProcess) writeStdin(data []byte) {
	defer close(p.fed)
	_, _ = p.feed.Write(data)
	p.feed.Close()
}

// stdinFor returns the command's stdin: /dev/null, or the read end of a
// pipe whose write end (feed) is returned for data.
func stdinFor(data []byte) (in, feed *os.File, err error) {
	if data == nil {
		in, err = os.Open(os.DevNull)
		return in, nil, err
	}
	in, feed, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stdin pipe: %w", err)
	}
	return in, feed, nil
}

// lookPathIn finds an argv's program the way the command's own shell
// would: a name with a slash as it is (relative to dir), else on path.
func lookPathIn(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		c := filepath.Join(d, name)
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s: not found on PATH", name)
}

// ptyReader turns the EIO a pty master returns once the terminal's last
// holder is gone into EOF, and a read on a closed file into EOF as well.
type ptyReader struct{ f *os.File }

func (r ptyReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		err = io.EOF
	}
	return n, err
}

// maxArgString is the kernel's bound on one string passed to exec
// (MAX_ARG_STRLEN, 32 pages), its terminating NUL included.
const maxArgString = 32 * 4096

// commandFile returns a memfd holding text, for a command too long to be
// an argument.
func commandFile(text string) (*os.File, error) {
	fd, err := unix.MemfdCreate("mevedel-exec-command", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("a file for the command's text: %w", err)
	}
	f := os.NewFile(uintptr(fd), "mevedel-exec-command")
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return nil, fmt.Errorf("a file for the command's text: %w", err)
	}
	return f, nil
}

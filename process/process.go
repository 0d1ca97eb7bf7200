package process

import (
	"context"
	"io"
	"syscall"

	"github.com/mevedel/mevedel-exec/sandbox"
)

// Runner starts a command on some target: Local on this machine, a
// remote.Runner on an SSH host.
type Runner interface {
	// Start starts spec. ctx bounds the start (login environment,
	// connection, spawn), not the command; when ctx ends first, Start
	// returns context.Cause(ctx).
	Start(ctx context.Context, spec Spec) (Process, error)
}

// Spec is what a runner needs to start one command.
type Spec struct {
	Command string // run as bash -c Command, unless Argv is set
	// Argv, when set, is run directly: Argv[0] looked up on the
	// command's own PATH, no shell.
	Argv []string
	// Stdin, when not nil, is written to the command's stdin, which is
	// then closed (pipe mode; a tty command's input goes through Write).
	// Without it stdin is /dev/null.
	Stdin []byte
	Dir   string // working directory on the target
	// Env is laid over the target's login environment, KEY=value.
	Env []string
	TTY bool   // give the command a pty; stdin stays writable
	Tag string // statedir.TagVar=value, marking every descendant of this execution
	// Sandbox, when set, confines the command (local only).
	Sandbox *sandbox.Box
	// Resources, when set, is the group the command starts in (local only).
	Resources *sandbox.Group
	// BeforeRun, when set, must succeed before the command runs (the
	// journal's durable record of the start): the runner calls it while
	// the command's first process, where it can, already exists but
	// waits; when it fails nothing of the command runs and Start returns
	// its error. A start made again (a remote agent lost meanwhile) calls
	// it again, so it must be idempotent.
	BeforeRun func() error
}

// Exit is how the shell process ended.
type Exit struct {
	Code   int            // valid when !Signaled and Lost is empty
	Signal syscall.Signal // valid when Signaled
	// Signaled is true when a signal ended the process.
	Signaled bool
	// Lost says why no exit status could be had (a remote command whose
	// transport was lost); then Code and Signal mean nothing.
	Lost string
}

// Process is one started command: the shell, its process group and any
// descendant that escaped the group.
type Process interface {
	Pid() int
	Pgid() int
	// LeaderStart is the group leader's start time in clock ticks since
	// its machine's boot: with the pid, the identity recovery checks
	// before it signals anything.
	LeaderStart() uint64
	// Output is the merged stdout/stderr stream. It reaches EOF when every
	// holder of the write side is gone (or after CloseOutput).
	Output() io.Reader
	// Wait waits for the shell process itself.
	Wait() (Exit, error)
	// Exited reports, without blocking or reaping, whether the shell has
	// exited.
	Exited() bool
	// Signal sends sig to the group and to every escaped descendant.
	Signal(sig syscall.Signal) error
	// Interrupt delivers Ctrl-C: SIGINT to the terminal's foreground group
	// in tty mode, to the process group otherwise.
	Interrupt() error
	// Alive reports whether any member of the group or escaped descendant
	// is still alive; zombies do not count.
	Alive() bool
	// Write sends input to the terminal; it fails in pipe mode. It may
	// block while the terminal's input queue is full. A terminal whose
	// command has ended reports os.ErrClosed.
	Write(p []byte) (int, error)
	// CloseOutput unblocks a reader of Output for good.
	CloseOutput() error
}

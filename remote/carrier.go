package remote

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"golang.org/x/sys/unix"
)

// The process a stream target's bytes go through (sudo, or a container
// engine's exec) is a child of the helper's own (process.StartChild):
// pipes on its stdio, our ends the agent's channel, its exit collected
// by the one reaper.

// exitWords describes a wait status.
func exitWords(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

// carrier is the process a stream agent's bytes go through (sudo, or the
// engine's exec) and our ends of its pipes: the agent's channel.
type carrier struct {
	child   *process.Child
	argv0   string
	in, out *os.File // our ends: its stdin (nil when given a file), its stdout
	errR    *os.File // its stderr, read by the pool until EOF or Close
	errDone chan struct{}
	stderr  capped

	closeOnce sync.Once
}

// startCarrier starts argv with pipes on its stdout and stderr, and on
// its stdin unless given one.
func startCarrier(p *Pool, argv []string, stdin *os.File) (*carrier, error) {
	c := &carrier{argv0: argv[0], errDone: make(chan struct{})}
	cmd := exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var theirs []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	pipe := func() (*os.File, *os.File, error) {
		rd, wr, err := os.Pipe()
		if err == nil {
			theirs = append(theirs, rd, wr)
		}
		return rd, wr, err
	}
	if stdin == nil {
		inR, inW, err := pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, c.in = inR, inW
	} else {
		cmd.Stdin = stdin
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr, c.out, c.errR = outW, errW, outR, errR
	child, err := process.StartChild(cmd)
	if err != nil {
		return nil, err
	}
	c.child = child
	// Ours stay open; the child's ends close with the deferred loop.
	keep := map[*os.File]bool{c.in: true, c.out: true, c.errR: true}
	kept := theirs[:0]
	for _, f := range theirs {
		if !keep[f] {
			kept = append(kept, f)
		}
	}
	theirs = kept
	if !p.spawn(func() {
		defer close(c.errDone)
		var b [4096]byte
		for {
			n, err := c.errR.Read(b[:])
			_, _ = c.stderr.Write(b[:n])
			if err != nil {
				return
			}
		}
	}) {
		close(c.errDone)
		c.Close()
		return nil, errClosed
	}
	return c, nil
}

func (c *carrier) Read(b []byte) (int, error) { return c.out.Read(b) }

func (c *carrier) Write(b []byte) (int, error) {
	if c.in == nil {
		return 0, os.ErrClosed
	}
	return c.in.Write(b)
}

// Close ends the channel: its stdin closes, so the agent reads EOF and
// goes (what it started keeps running), and our reading ends close once
// the transport has gone. They stay open until then: an engine's command
// line killed by a write to a closed stdout leaves its exec's monitor
// (podman's conmon) waiting minutes for a client that never reads the
// exit. A transport still there a grace later is killed with its group.
func (c *carrier) Close() error {
	c.closeOnce.Do(func() {
		if c.in != nil {
			c.in.Close()
		}
		go func() {
			select {
			case <-c.child.Done():
			case <-time.After(carrierGrace):
				c.child.Kill()
			}
			c.out.Close()
			c.errR.Close() // a descendant may hold its stderr open
		}()
	})
	return nil
}

// carrierGrace is how long a closed carrier's process has to go.
const carrierGrace = 5 * time.Second

// lostWhy says why the carrier went, "" while its process runs.
func (c *carrier) lostWhy() string {
	select {
	case <-c.child.Done():
	default:
		return ""
	}
	msg := strings.TrimSpace(string(c.stderr.Bytes()))
	if msg == "" {
		return fmt.Sprintf("%s ended (%s)", c.argv0, exitWords(c.child.Status()))
	}
	return fmt.Sprintf("%s ended (%s): %s", c.argv0, exitWords(c.child.Status()), msg)
}

// runShort runs argv to its end (killed at ctx's end) and returns its
// stdout and stderr.
func (p *Pool) runShort(ctx context.Context, argv []string) (stdout, stderr []byte, ws unix.WaitStatus, err error) {
	car, err := startCarrier(p, argv, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	car.in.Close()
	car.in = nil
	stop := context.AfterFunc(ctx, car.child.Kill)
	defer stop()
	var out bytes.Buffer
	_, _ = out.ReadFrom(car.out)
	<-car.child.Done()
	<-car.errDone
	car.Close()
	if ctx.Err() != nil {
		return nil, nil, 0, fmt.Errorf("no answer: %w", context.Cause(ctx))
	}
	return out.Bytes(), car.stderr.Bytes(), car.child.Status(), nil
}

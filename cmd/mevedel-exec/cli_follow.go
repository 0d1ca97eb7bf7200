package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/spool"
	"golang.org/x/sys/unix"
)

// The command line's commands that follow one execution: logs (-f),
// wait and attach.

// read reads the log of f from offset (or its last tail lines, when tail
// is positive) to its current end, writing it to w; it returns where the
// next read starts.
func (k *cliConn) read(s rpc.DaemonSession, f execution.Facts, offset, tail int64, w io.Writer) (int64, error) {
	p := rpc.SpoolReadParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, Address: f.OutputAddress, Offset: offset}
	if tail > 0 {
		p.Offset, p.Line, p.Lines = 0, max(1, f.OutputLines-tail+1), tail
	}
	for {
		var res spool.ReadResult
		if err := k.call(rpc.MethodSpoolRead, p, &res); err != nil {
			return offset, err
		}
		if _, err := io.WriteString(w, res.Text); err != nil {
			return offset, err
		}
		offset = res.Offset + res.Length
		if res.EOF || res.Length == 0 {
			return offset, nil
		}
		p.Offset, p.Line, p.Lines = offset, 0, 0
	}
}

func (k *cliConn) logs(id string, follow bool, tail int64) (int, error) {
	s, f, err := k.find(id)
	if err != nil {
		// One the session no longer holds has its log still: read it
		// by its address, in whichever session has it.
		for _, s := range k.sessions {
			addr := statedir.LogAddress(id)
			if k.open(s) != nil || k.call(rpc.MethodSpoolStat, rpc.SpoolStatParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, Address: addr}, nil) != nil {
				continue
			}
			var text strings.Builder
			if _, err := k.read(s, execution.Facts{OutputAddress: addr}, 0, 0, &text); err != nil {
				return 1, err
			}
			out := text.String()
			if tail > 0 {
				lines := strings.SplitAfter(out, "\n")
				if lines[len(lines)-1] == "" {
					lines = lines[:len(lines)-1]
				}
				out = strings.Join(lines[max(0, len(lines)-int(tail)):], "")
			}
			_, err := io.WriteString(os.Stdout, out)
			return 0, err
		}
		return 1, err
	}
	offset, err := k.read(s, f, 0, tail, os.Stdout)
	for err == nil && follow && f.State != execution.Settled {
		final := k.next(id)
		if final != nil {
			f = *final
		} else if cur, ok, ferr := k.facts(s, id); ferr != nil || !ok {
			err = ferr
			break
		} else {
			f = cur
		}
		offset, err = k.read(s, f, offset, 0, os.Stdout)
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// exitStatus is the shell's status for an execution's end: its exit
// code, 128 plus a signal's number, or 1.
func exitStatus(f execution.Facts) int {
	switch {
	case f.ExitCode != nil:
		return *f.ExitCode
	case f.Signal != "":
		if n := unix.SignalNum(f.Signal); n != 0 {
			return 128 + int(n)
		}
	}
	return 1
}

func (k *cliConn) wait(id string, asJSON bool) (int, error) {
	s, f, err := k.find(id)
	for err == nil && f.State != execution.Settled {
		if final := k.next(id); final != nil {
			f = *final
			break
		}
		var ok bool
		if f, ok, err = k.facts(s, id); err == nil && !ok {
			err = fmt.Errorf("execution %s is no longer held; its end was not seen", id)
		}
	}
	if err != nil {
		return 1, err
	}
	if asJSON {
		printJSON(f)
	} else if f.ExitCode == nil || *f.ExitCode != 0 {
		fmt.Fprintf(os.Stderr, "%s: %s\n", id, state(f))
	}
	return exitStatus(f), nil
}

// detachByte parses a key like ^\ or ^] into its control byte.
func detachByte(key string) (byte, error) {
	if len(key) == 2 && key[0] == '^' && key[1] >= '@' && key[1] <= '_' {
		return key[1] - '@', nil
	}
	if len(key) == 2 && key[0] == '^' && key[1] >= 'a' && key[1] <= 'z' {
		return key[1] - 'a' + 1, nil
	}
	return 0, fmt.Errorf("detach key %q: give it as ^X", key)
}

func (k *cliConn) attach(id, key string) (int, error) {
	detach, err := detachByte(key)
	if err != nil {
		return 2, err
	}
	s, f, err := k.find(id)
	if err != nil {
		return 1, err
	}
	if !f.TTY {
		return 1, fmt.Errorf("execution %s runs without a terminal: `mevedel-exec logs -f %s` follows its output", id, id)
	}
	if f.State == execution.Settled {
		return 1, fmt.Errorf("execution %s has ended: %s", id, state(f))
	}
	in := int(os.Stdin.Fd())
	if old, err := unix.IoctlGetTermios(in, unix.TCGETS); err == nil {
		raw := *old
		raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		raw.Oflag &^= unix.OPOST
		raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		raw.Cflag &^= unix.CSIZE | unix.PARENB
		raw.Cflag |= unix.CS8
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
		if err := unix.IoctlSetTermios(in, unix.TCSETS, &raw); err == nil {
			defer unix.IoctlSetTermios(in, unix.TCSETS, old)
		}
	}
	fmt.Fprintf(os.Stderr, "[attached to %s; %s detaches]\r\n", id, key)
	detached := make(chan struct{})
	inputErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, rerr := os.Stdin.Read(buf)
			chunk := buf[:n]
			stop := false
			if i := strings.IndexByte(string(chunk), detach); i >= 0 {
				chunk, stop = chunk[:i], true
			}
			if len(chunk) > 0 {
				if err := k.call(rpc.MethodExecObserve, rpc.ExecObserveParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, ExecutionID: id, Chars: string(chunk)}, nil); err != nil {
					inputErr <- err
					return
				}
			}
			if stop || rerr != nil {
				close(detached)
				return
			}
		}
	}()
	offset := max(0, f.OutputBytes-attachTail)
	for {
		if offset, err = k.read(s, f, offset, 0, os.Stdout); err != nil {
			return 1, err
		}
		if f.State == execution.Settled {
			fmt.Fprintf(os.Stderr, "\r\n[%s ended: %s]\r\n", id, state(f))
			return exitStatus(f), nil
		}
		select {
		case <-detached:
			fmt.Fprintf(os.Stderr, "\r\n[detached from %s; it goes on]\r\n", id)
			return 0, nil
		case err := <-inputErr:
			return 1, err
		default:
		}
		if final := k.next(id); final != nil {
			f = *final
		}
	}
}

package execution

import (
	"errors"
	"os"
	"syscall"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/process"
)

// maxPendingInput bounds terminal input waiting for a command to read it.
const maxPendingInput = 64

// inputReq is one write to the terminal.
type inputReq struct {
	data []byte
	done chan error // buffered; receives the outcome once
}

// input queues chars for the command and returns a channel that yields
// the outcome of the write. In tty mode characters go to the terminal, in
// order, from the execution's input goroutine (a write can block while the
// command does not read, and must never block a request). A lone Ctrl-C is
// sent as SIGINT in either mode; other input in pipe mode is refused.
func (e *Execution) input(chars string) (<-chan error, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	proc, state, closed := e.st.proc, e.st.facts.State, e.st.inputClosed
	if !e.spec.TTY && chars != "\x03" {
		return nil, fault.New(fault.Refused, "execution %s runs without a terminal: its stdin is closed, and only Ctrl-C (\\u0003) is accepted as input; rerun it with tty to send input", e.id)
	}
	if state == Settled || e.settledNow() || closed {
		return nil, fault.New(fault.Refused, "execution %s has already ended; input was not delivered", e.id)
	}
	if proc == nil {
		return nil, fault.New(fault.Refused, "execution %s has not started yet (it is queued); input was not delivered", e.id)
	}
	done := make(chan error, 1)
	if chars == "\x03" {
		if err := proc.Interrupt(); err != nil && !errors.Is(err, syscall.ESRCH) {
			return nil, fault.New(fault.IO, "execution %s: interrupt: %w", e.id, err)
		}
		done <- nil
		return done, nil
	}
	// Queued under the lock, so writeInput's drain at the end cannot miss
	// it: input closed and a queued request are decided in one order.
	select {
	case e.inputs <- inputReq{data: []byte(chars), done: done}:
		return done, nil
	default:
		return nil, fault.New(fault.Limit, "execution %s has %d inputs waiting for the command to read; input was not delivered", e.id, cap(e.inputs))
	}
}

// writeInput writes queued input in order until quiet; what is left then
// fails with a clear error.
func (e *Execution) writeInput(proc process.Process, quiet <-chan struct{}) {
	for {
		select {
		case req := <-e.inputs:
			_, err := proc.Write(req.data)
			if err == nil {
				e.inputArrived()
			}
			switch {
			case errors.Is(err, os.ErrClosed):
				err = fault.New(fault.Refused, "execution %s ended before it read the input", e.id)
			case err != nil:
				err = fault.New(fault.IO, "execution %s: writing input: %w", e.id, err)
			}
			req.done <- err
		case <-quiet:
			e.update(func(st *execState) { st.inputClosed = true })
			for {
				select {
				case req := <-e.inputs:
					req.done <- fault.New(fault.Refused, "execution %s ended before it read the input", e.id)
				default:
					return
				}
			}
		}
	}
}

// interrupt sends Ctrl-C.
func (e *Execution) interrupt() error {
	var proc process.Process
	e.update(func(st *execState) { proc = st.proc })
	if e.settledNow() {
		return fault.New(fault.Refused, "execution %s has already ended", e.id)
	}
	if proc == nil {
		return fault.New(fault.Refused, "execution %s has not started yet (it is queued)", e.id)
	}
	if err := proc.Interrupt(); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fault.New(fault.IO, "execution %s: interrupt: %w", e.id, err)
	}
	return nil
}

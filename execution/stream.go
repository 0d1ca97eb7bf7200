package execution

import "github.com/mevedel/mevedel-exec/spool"

// A followed execution's new output can go to the client in exec/output,
// so an output buffer shows it without asking for it (a spool/read round
// trip after each exec/changed). While a follow with output holds, the
// output copier keeps what it spools, and the sink takes it when it
// writes the notification: the first bytes go at once and later ones at
// most ten times a second, on windows of their own (run.go's pace); the
// growth they make is said in exec/changed once a second, as any
// execution's, since the chunks already carry it. What is
// kept is bounded: past maxStreamBytes it is dropped, and the client,
// which sees the gap in the offsets, reads the log instead. Every chunk
// says where in the log it starts, so a client never adds bytes twice.

// maxStreamBytes bounds one execution's output waiting for exec/output:
// more than that between two notifications is a command a buffer shows
// by reading its log's last page.
const maxStreamBytes = 64 << 10

// keepOutput keeps b, spooled at log offset at, for exec/output. b is
// copied: the caller reuses it.
func (e *Execution) keepOutput(at int64, b []byte) {
	e.outMu.Lock()
	defer e.outMu.Unlock()
	if len(e.outBuf) > 0 && e.outOff+int64(len(e.outBuf)) != at {
		e.outBuf = e.outBuf[:0] // not contiguous: start again here
	}
	if len(e.outBuf)+len(b) > maxStreamBytes {
		e.outBuf = e.outBuf[:0]
		e.outGap = true
		if len(b) > maxStreamBytes {
			e.outOff = at + int64(len(b))
			return
		}
	}
	if len(e.outBuf) == 0 {
		e.outOff = at
	}
	e.outBuf = append(e.outBuf, b...)
}

// TakeOutput returns the output kept since the last call and forgets it:
// the log offset of its first byte, how many bytes of the log it is, and
// those bytes as text (invalid UTF-8 shown as U+FFFD, as spool/read shows
// it). After a drop it may be no bytes at all: its offset, past the
// dropped ones, still shows the client the gap. ok is false when there
// is nothing to say. An incomplete UTF-8 character at the end stays for
// the next call.
func (e *Execution) TakeOutput() (offset int64, n int, text string, ok bool) {
	e.outMu.Lock()
	defer e.outMu.Unlock()
	n = len(e.outBuf) - spool.PartialLen(e.outBuf)
	if n <= 0 && !e.outGap {
		return 0, 0, "", false
	}
	e.outGap = false
	offset, text = e.outOff, string(e.outBuf[:n])
	e.outOff += int64(n)
	rest := copy(e.outBuf, e.outBuf[n:])
	e.outBuf = e.outBuf[:rest]
	if rest == 0 && cap(e.outBuf) > copyMin {
		e.outBuf = nil // an idle followed execution keeps no large buffer
	}
	return offset, n, text, true
}

// SessionID returns the id of the execution's session.
func (e *Execution) SessionID() string { return e.s.id }

// announceOutput has the sink send the kept output, if any is followed.
func (e *Execution) announceOutput() {
	if e.streamed.Load() {
		e.s.m.events.Output(e)
	}
}

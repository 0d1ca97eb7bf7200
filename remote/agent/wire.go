// Package agent is the helper on an SSH host: `mevedel-exec host` runs,
// signals, probes and reports the processes of every execution on that
// host with package process, the local runner's own code, and speaks to
// the helper over one SSH channel (its stdin and stdout). This file is
// the wire both sides share; host.go is the host's side. The helper's
// side (deployment, the multiplexing client) is in package remote.
//
// After a text line that says hello (so that whatever a login shell
// prints before it can be skipped), both directions carry frames: a type
// byte, a 32-bit id and a 32-bit length, big-endian, then the payload.
// The id names an execution (start, output, credit, exit) or a request
// (request, reply). Output is flow-controlled per execution: the host
// sends no more than the credit the helper granted, so one flooding
// command cannot fill the channel that every other one's input, signals
// and probes share.
package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// Version is the helper's version, set by the program at start. A host
// agent of another version is never used.
var Version = "dev"

// Deployable is set by a program whose executable runs `host` (the
// helper's): only such a program deploys itself to hosts. Any other (a
// test binary) runs remote commands through the wrapper.
var Deployable bool

// Frame types. Upper case goes to the host, lower case comes from it.
const (
	MsgStart   byte = 'S' // id: execution; payload: StartSpec
	MsgCredit  byte = 'C' // id: execution; payload: uint32 more bytes of output
	MsgRequest byte = 'R' // id: request; payload: Request
	MsgStarted byte = 's' // id: execution; payload: Started
	MsgOutput  byte = 'o' // id: execution; payload: output bytes
	MsgEOF     byte = 'e' // id: execution; the output ended
	MsgExit    byte = 'x' // id: execution; payload: ExitStatus
	MsgReply   byte = 'r' // id: request; payload: Reply
	MsgGo      byte = 'g' // id: execution; payload: one byte, 1 to let a gated start run, 0 to abort it
)

// Hello starts the host's first line, followed by its version.
const Hello = "\x00MEVEDEL-AGENT-HELLO "

// headerSize is a frame's header: type, id, length.
const headerSize = 9

// MaxPayload bounds a frame: a start carries the command and the whole
// environment.
const MaxPayload = 64 << 20

// Window is the output an execution may have in flight before the helper
// grants more: enough to keep a fast command streaming.
const Window = 8 << 20

// ChunkSize is the largest output frame: small enough that a reply or an
// exit behind it waits little.
const ChunkSize = 1 << 20

// StartSpec is a command to start. Dir is absolute, "~", "~/...",
// relative to the home directory, or empty for the home directory. Env
// is the complete environment, or, with Overlay, what goes on top of the
// host agent's own (sshd's).
type StartSpec struct {
	Command string   `json:"command,omitempty"`
	Argv    []string `json:"argv,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Env     []string `json:"env,omitempty"`
	Overlay bool     `json:"overlay,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Tag     string   `json:"tag,omitempty"`
	// Gated: the command's first process waits, once spawned, until a
	// MsgGo lets it run; an abort, or the agent's end, and it never does.
	Gated bool `json:"gated,omitempty"`
	// Sandbox, when set, is the policy as this host applies it (the
	// answer to OpConfine): the command runs under bubblewrap or not at
	// all.
	Sandbox *sandbox.Policy `json:"sandbox,omitempty"`
	// Resources, when set, are the limits of the command's group.
	Resources *sandbox.Resources `json:"resources,omitempty"`
}

// Started answers a start: the leader's identity, or why nothing started.
type Started struct {
	Pid   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
	Err   string `json:"err,omitempty"`
	// Resources says how the start's limits were applied on this host.
	Resources *sandbox.ResourceFacts `json:"resources,omitempty"`
}

// ExitStatus is how the shell ended, and whether anything of the
// execution was alive right after (when nothing was, nothing can be
// later: only a live member starts another).
type ExitStatus struct {
	Code     int  `json:"code"`
	Signaled bool `json:"signaled,omitempty"`
	Signal   int  `json:"signal,omitempty"`
	Alive    bool `json:"alive,omitempty"`
	// Limit names the resource limit that ended the command, as the
	// group's counters on the host tell it.
	Limit string `json:"limit,omitempty"`
}

// Request operations.
const (
	OpSignal  = "signal"  // Exec, Sig
	OpInt     = "int"     // Exec: Ctrl-C
	OpAlive   = "alive"   // Exec
	OpInput   = "input"   // Exec, Data: written to the terminal
	OpWaiting = "waiting" // Exec: is the terminal's foreground group reading it
	OpPorts   = "ports"   // Exec: the tree's listening TCP ports
	OpClose   = "close"   // Exec: close the output; the host forgets it after its exit
	OpGroup   = "group"   // Identity, Act (probe, signal, int), Sig: a group known by identity alone
	OpConfine = "confine" // Sandbox: the policy resolved against this host, and whether bwrap works here
	OpDenials = "denials" // Sandbox (applied), Dir, Data (output): the denials the output shows
	OpRelease = "release" // Exec: remove its group and box mount points now (nothing of it is alive); Limit
	OpPublish = "publish" // Path, Offset, Data: a published output's copy here (publish.go)
	OpTools   = "tools"   // Tools: which of them this host lacks (Lacks)
)

// Request is one request to the host.
type Request struct {
	Op   string `json:"op"`
	Exec uint32 `json:"exec,omitempty"`
	Sig  int    `json:"sig,omitempty"`
	Data []byte `json:"data,omitempty"`
	// A group known by identity (OpGroup).
	Act   string `json:"act,omitempty"`
	Pid   int    `json:"pid,omitempty"`
	Pgid  int    `json:"pgid,omitempty"`
	Start uint64 `json:"start,omitempty"`
	Tag   string `json:"tag,omitempty"`
	TTY   bool   `json:"tty,omitempty"`
	// OpConfine, OpDenials.
	Sandbox *sandbox.Policy `json:"sandbox,omitempty"`
	Dir     string          `json:"dir,omitempty"`
	// OpPublish.
	Path   string `json:"path,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	// OpTools: programs to look for as the agent's commands would.
	Tools []string `json:"tools,omitempty"`
}

// Reply answers a request. Errno carries a system error (ESRCH from an
// interrupt of an empty group), Err any other failure.
type Reply struct {
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
	N     int    `json:"n,omitempty"`
	Alive bool   `json:"alive,omitempty"`
	// Ambiguous: the shell's pid is another process's now; nothing was
	// signalled.
	Ambiguous bool               `json:"ambiguous,omitempty"`
	Waiting   bool               `json:"waiting,omitempty"`
	Listening []process.Listener `json:"listening,omitempty"`
	// OpGroup: State is live, dead or ambiguous; Leader live, zombie,
	// gone or other (another process holds the pid now).
	State  string `json:"state,omitempty"`
	Leader string `json:"leader,omitempty"`
	// OpConfine and OpDenials.
	Confine *Confinement     `json:"confine,omitempty"`
	Denials []sandbox.Denial `json:"denials,omitempty"`
	// OpRelease: the limit that ended the command, read once all of it
	// was gone.
	Limit string `json:"limit,omitempty"`
	// OpPublish: the copy's absolute path and its size now.
	Path string `json:"path,omitempty"`
	Size int64  `json:"size,omitempty"`
	// OpTools: the programs asked for that are not found; Looked is set
	// so that an agent that does not know the op is told apart.
	Lacks  []string `json:"lacks,omitempty"`
	Looked bool     `json:"looked,omitempty"`
}

// Confinement answers OpConfine: the policy as this host applies it (its
// home's ~/.ssh and ~/.gnupg, the .git of a repository holding a writable
// root) and whether bubblewrap confines here, probed once per agent.
type Confinement struct {
	Facts sandbox.Facts `json:"facts"`
	// Invalid says why the policy cannot apply here (a writable root
	// that does not exist): the start's parameters are wrong.
	Invalid string `json:"invalid,omitempty"`
}

// Writer writes whole frames; it may be shared by goroutines.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte // guarded by mu
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// inlineMax is the largest payload copied behind its header, so that the
// frame is one write (over SSH, one packet rather than two).
const inlineMax = 64 << 10

// Write sends one frame.
func (w *Writer) Write(typ byte, id uint32, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("agent: frame of %d bytes", len(payload))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.header(typ, id, len(payload))
	if len(payload) <= inlineMax {
		w.buf = append(w.buf, payload...)
		_, err := w.w.Write(w.buf)
		return err
	}
	if _, err := w.w.Write(w.buf); err != nil {
		return err
	}
	_, err := w.w.Write(payload)
	return err
}

// WriteAll sends small frames in one write: over SSH one packet, and one
// wakeup of the reader.
func (w *Writer) WriteAll(frames ...Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = w.buf[:0]
	for _, f := range frames {
		w.buf = append(w.buf, f.Type, 0, 0, 0, 0, 0, 0, 0, 0)
		h := w.buf[len(w.buf)-headerSize:]
		binary.BigEndian.PutUint32(h[1:], f.ID)
		binary.BigEndian.PutUint32(h[5:], uint32(len(f.Payload)))
		w.buf = append(w.buf, f.Payload...)
	}
	_, err := w.w.Write(w.buf)
	return err
}

func (w *Writer) header(typ byte, id uint32, n int) {
	w.buf = append(w.buf[:0], typ, 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(w.buf[1:], id)
	binary.BigEndian.PutUint32(w.buf[5:], uint32(n))
}

// Frame is one frame read.
type Frame struct {
	Type    byte
	ID      uint32
	Payload []byte
}

// ReadFrame reads the next frame; its payload is a fresh slice.
func ReadFrame(r *bufio.Reader) (Frame, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[5:])
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("agent: frame of %d bytes", n)
	}
	f := Frame{Type: h[0], ID: binary.BigEndian.Uint32(h[1:]), Payload: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}

// Reader reads frames as the helper takes them: an output frame's
// payload goes from the stream straight into a pooled buffer (Release
// gives it back), without passing through the reader's own buffer; the
// headers and small frames come through that buffer, many in one read.
type Reader struct {
	br  *bufio.Reader
	raw io.Reader // the stream after what br holds
}

// smallFrame is the largest payload read through the buffer.
const smallFrame = 4 << 10

// NewReader reads frames from r, which follows buffered (what an earlier
// reader of the same stream took but did not use).
func NewReader(buffered []byte, r io.Reader) *Reader {
	raw := r
	if len(buffered) > 0 {
		raw = io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), r)
	}
	return &Reader{br: bufio.NewReaderSize(raw, 16<<10), raw: raw}
}

// Next reads the next frame. An output frame's payload is a buffer from
// OutputBuffer; any other's a fresh slice.
func (r *Reader) Next() (Frame, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return Frame{}, err
	}
	n := int(binary.BigEndian.Uint32(h[5:]))
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("agent: frame of %d bytes", n)
	}
	f := Frame{Type: h[0], ID: binary.BigEndian.Uint32(h[1:])}
	if f.Type == MsgOutput {
		f.Payload = OutputBuffer(n)
	} else {
		f.Payload = make([]byte, n)
	}
	k := 0
	if b := min(n, r.br.Buffered()); b > 0 {
		k, _ = r.br.Read(f.Payload[:b])
	}
	var err error
	if n-k <= smallFrame {
		_, err = io.ReadFull(r.br, f.Payload[k:])
	} else {
		_, err = io.ReadFull(r.raw, f.Payload[k:])
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}

// Output buffers come in sizes of 4 KiB times a power of four, up to
// ChunkSize: a frame takes at most four times its size while queued, and
// a stream of output allocates nothing once its buffers come back.
var outputPools [6]sync.Pool

func outputClass(n int) int {
	c, size := 0, 4<<10
	for size < n {
		c, size = c+1, size*4
	}
	return c
}

// OutputBuffer returns a buffer of n bytes for an output frame.
func OutputBuffer(n int) []byte {
	c := outputClass(n)
	if c >= len(outputPools) {
		return make([]byte, n)
	}
	if b, ok := outputPools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, (4<<10)<<(2*c))
}

// Release gives back a buffer from OutputBuffer once nothing refers to
// it.
func Release(b []byte) {
	c := outputClass(cap(b))
	if c < len(outputPools) && cap(b) == (4<<10)<<(2*c) {
		b = b[:0]
		outputPools[c].Put(&b)
	}
}

// Credit is a credit frame's payload.
func Credit(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// CreditOf reads a credit frame's payload.
func CreditOf(p []byte) (uint32, bool) {
	if len(p) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(p), true
}

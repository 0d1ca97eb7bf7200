package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
	"golang.org/x/sys/unix"
)

// quietWait bounds the wait, as a shell exits, for what it left in its
// group to be reaped (as the helper's own run does).
const quietWait = 20 * time.Millisecond

// Main is `mevedel-exec host`: the host agent on its stdin and stdout,
// until the channel ends. What it started keeps running then, as a
// command of the wrapper path would: the helper decides its end over a
// new connection (unknown, then a stop by identity), and recovery after
// a helper's crash finds it the same way. It keeps no state on disk.
func Main(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: mevedel-exec host")
		return 2
	}
	logger = log.New(os.Stderr, "mevedel-exec host: ", log.LstdFlags|log.Lmicroseconds)
	process.SetLogger(logger)
	// A lost channel is a failed write or EOF, never a death by signal.
	// Caught, not ignored: a caught signal is reset to its default in the
	// commands the agent starts, which an ignored one would stay.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE, syscall.SIGHUP)
	if err := process.UseShim(); err != nil {
		logger.Printf("no native subreaper shim, the executable serves instead: %v", err)
	}
	stop := make(chan struct{})
	waitReaper, err := process.BecomeSubreaper(logger, stop)
	if err != nil {
		logger.Printf("cannot become a child subreaper: %v", err)
	}
	err = Serve(os.Stdin, os.Stdout)
	close(stop)
	waitReaper()
	if err != nil && !errors.Is(err, io.EOF) {
		logger.Print(err)
		return 1
	}
	return 0
}

// logger is where the agent says what went wrong (its stderr).
var logger = log.Default()

// host is one channel's agent.
type host struct {
	w    *Writer
	home string
	// own is the agents' directory (~/.cache/mevedel-exec), hidden from
	// confined commands as the helper's state directory is; exeDir holds
	// the empty stand-in for hidden files. Either may be "".
	own, exeDir string

	probeOnce sync.Once
	probe     sandbox.Probe // set by probeOnce

	tunnels *Tunnels // forwarded connections (tunnel.go)

	mu    sync.Mutex
	execs map[uint32]*hostExec // guarded by mu
	gates map[uint32]chan bool // guarded by mu: a gated start's go (true) or abort
	ended chan struct{}        // closed when the channel from the helper ends
	wg    sync.WaitGroup       // starts and requests in flight
}

// hostExec is one execution's process on this host.
type hostExec struct {
	proc  process.Process
	box   *sandbox.Box   // its confinement, released once; may be nil
	group *sandbox.Group // its resource group, closed once; may be nil
	exit  process.Exit   // guarded by mu; valid once waited
	// waited: guarded by mu; the shell's exit is known (set before the
	// exit frame goes out).
	waited  bool
	relOnce sync.Once // runs release's work once
	limit   string    // written in relOnce: the limit hit read then

	mu     sync.Mutex
	cond   *sync.Cond // on mu: credit came, or the output was closed
	credit int64      // guarded by mu; output bytes the helper can take
	closed bool       // guarded by mu; OpClose came
	exited bool       // guarded by mu; the exit status is known (its frame is out or on its way)
	ended  bool       // guarded by mu; the output ended before the exit: its EOF frame goes with the exit's
}

// Serve runs the agent on one stream pair until in ends.
func Serve(in io.Reader, out io.Writer) error {
	h := &host{w: NewWriter(out), execs: map[uint32]*hostExec{}, gates: map[uint32]chan bool{}, ended: make(chan struct{})}
	if f, ok := out.(*os.File); ok {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			// Room for a whole frame: the agent moves on while sshd sends.
			_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, ChunkSize)
		}
	}
	h.home, _ = os.UserHomeDir()
	if exe, err := os.Executable(); err == nil {
		h.exeDir = filepath.Dir(exe)
		// Deployed as ~/.cache/mevedel-exec/bin/<version>/mevedel-exec.
		if bin := filepath.Dir(h.exeDir); filepath.Base(bin) == "bin" {
			h.own = filepath.Dir(bin)
		}
	}
	if _, err := io.WriteString(out, HelloLine(ReadIncarnation())); err != nil {
		return err
	}
	br := bufio.NewReaderSize(in, 64<<10)
	h.tunnels = NewTunnels(h.w, true)
	defer h.tunnels.CloseAll()
	defer h.wg.Wait()
	defer close(h.ended) // first: gated starts give up before the wait
	for {
		f, err := ReadFrame(br)
		if err != nil {
			return err
		}
		switch f.Type {
		case MsgStart:
			h.mu.Lock()
			h.gates[f.ID] = make(chan bool, 1) // before its MsgGo can come
			h.mu.Unlock()
			h.wg.Go(func() { h.start(f.ID, f.Payload) })
		case MsgCredit:
			n, ok := CreditOf(f.Payload)
			if e := h.exec(f.ID); e != nil && ok {
				e.mu.Lock()
				e.credit += int64(n)
				e.cond.Broadcast()
				e.mu.Unlock()
			}
		case MsgRequest:
			h.wg.Go(func() { h.request(f.ID, f.Payload) })
		case MsgGo:
			h.mu.Lock()
			g := h.gates[f.ID]
			h.mu.Unlock()
			if g != nil { // else its start has already ended
				select {
				case g <- len(f.Payload) == 1 && f.Payload[0] == 1:
				default: // a second word for the same start
				}
			}
		case MsgDial:
			go h.dial(f.ID, string(f.Payload))
		default:
			if !h.tunnels.Handle(f) {
				return fmt.Errorf("unknown frame type %q", f.Type)
			}
		}
	}
}

// dialTimeout bounds a tunnel's connect to an address where the host
// runs.
const dialTimeout = 10 * time.Second

// dial connects tunnel id to addr and says whether it could.
func (h *host) dial(id uint32, addr string) {
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		_ = h.w.Write(MsgDialed, id, []byte(err.Error()))
		return
	}
	tu, err := h.tunnels.Register(id, conn)
	if err != nil {
		conn.Close()
		return // the stream has ended
	}
	// Said before either pump sends: the helper runs its side on it.
	if h.w.Write(MsgDialed, id, nil) != nil {
		tu.Abort()
		conn.Close()
		return
	}
	tu.Run()
}

// waitGate is a gated start's BeforeRun: the helper's go, else why not.
func (h *host) waitGate(id uint32) error {
	h.mu.Lock()
	g := h.gates[id]
	h.mu.Unlock()
	select {
	case ok := <-g:
		if !ok {
			return errors.New("the helper withdrew the start")
		}
		return nil
	case <-h.ended:
		return errors.New("the channel from the helper ended before the start was let run")
	}
}

func (h *host) exec(id uint32) *hostExec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.execs[id]
}

func (h *host) send(typ byte, id uint32, v any) {
	b, _ := json.Marshal(v)
	_ = h.w.Write(typ, id, b)
}

// dir resolves a start's directory against the home directory.
func (h *host) dir(d string) string {
	switch {
	case d == "" || d == "~":
		return h.home
	case strings.HasPrefix(d, "~/"):
		return filepath.Join(h.home, d[2:])
	case !filepath.IsAbs(d):
		return filepath.Join(h.home, d)
	}
	return d
}

// sshdOnly are sshd's variables that would make bash read ~/.bashrc.
var sshdOnly = map[string]bool{"SSH_CLIENT": true, "SSH2_CLIENT": true}

func (h *host) start(id uint32, payload []byte) {
	defer func() {
		h.mu.Lock()
		delete(h.gates, id)
		h.mu.Unlock()
	}()
	var s StartSpec
	if err := json.Unmarshal(payload, &s); err != nil {
		h.send(MsgStarted, id, Started{Err: "malformed start: " + err.Error()})
		return
	}
	env := s.Env
	if s.Overlay {
		var own []string
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); !sshdOnly[k] {
				own = append(own, kv)
			}
		}
		env = process.MergeEnv(own, s.Env)
	}
	spec := process.Spec{Command: s.Command, Argv: s.Argv, Dir: h.dir(s.Dir), Env: env, TTY: s.TTY, Tag: s.Tag}
	if s.Gated {
		spec.BeforeRun = func() error { return h.waitGate(id) }
	}
	e := &hostExec{credit: Window}
	if err := h.confine(id, s, &spec, e); err != nil {
		h.send(MsgStarted, id, Started{Err: err.Error()})
		return
	}
	var l process.Local
	proc, err := l.Start(context.Background(), spec)
	if err != nil {
		e.release()
		h.send(MsgStarted, id, Started{Err: err.Error()})
		return
	}
	e.proc = proc
	e.cond = sync.NewCond(&e.mu)
	h.mu.Lock()
	h.execs[id] = e
	h.mu.Unlock()
	started := Started{Pid: proc.Pid(), Start: proc.LeaderStart()}
	if e.group != nil {
		rf := e.group.Facts()
		started.Resources = &rf
	}
	h.send(MsgStarted, id, started)
	h.wg.Go(func() { h.copyOutput(id, e) })
	h.wg.Go(func() {
		ex, _ := proc.Wait()
		e.mu.Lock()
		e.exit, e.waited = ex, true
		e.mu.Unlock()
		// What the shell left that ends by itself (a sandbox's init) is
		// reaped first: the helper then has no lingering tree to probe.
		if q, ok := proc.(interface{ Quiet(time.Duration) bool }); ok {
			q.Quiet(quietWait)
		}
		st := ExitStatus{Code: ex.Code, Signaled: ex.Signaled, Signal: int(ex.Signal), Alive: proc.Alive()}
		// Read as the shell ends: the group's counters already hold what
		// ended it.
		st.Limit = e.group.LimitHit(ex.Code, ex.Signaled, ex.Signal, e.box != nil)
		b, _ := json.Marshal(st)
		e.mu.Lock()
		withEOF := e.ended
		e.exited = true
		done := e.closed
		e.mu.Unlock()
		if withEOF {
			_ = h.w.WriteAll(Frame{Type: MsgEOF, ID: id}, Frame{Type: MsgExit, ID: id, Payload: b})
		} else {
			_ = h.w.Write(MsgExit, id, b)
		}
		if done {
			h.forget(id)
		}
	})
}

// copyOutput sends the output as the helper's credit allows; without
// credit it stops reading, and the command blocks on a full pipe as it
// would on a slow local reader.
func (h *host) copyOutput(id uint32, e *hostExec) {
	r := e.proc.Output()
	var rc syscall.RawConn
	if p, ok := e.proc.(interface{ OutputPipe() *os.File }); ok {
		if f := p.OutputPipe(); f != nil {
			rc, _ = f.SyscallConn()
		}
	}
	var buf []byte
	if rc != nil {
		buf = make([]byte, 64<<10) // only for what comes while the pipe looks empty
	} else {
		buf = make([]byte, ChunkSize)
	}
	for {
		e.mu.Lock()
		for e.credit <= 0 && !e.closed {
			e.cond.Wait()
		}
		n := int(min(e.credit, ChunkSize))
		closed := e.closed
		e.mu.Unlock()
		if closed {
			// The helper no longer reads: drain, so the command never
			// blocks on its output.
			_, _ = io.CopyBuffer(io.Discard, r, buf[:cap(buf)])
			break
		}
		var k int
		var rerr, werr error
		if rc != nil {
			k, rerr, werr = h.pipeOutput(id, rc, n, buf)
		} else {
			k, rerr = r.Read(buf[:min(n, len(buf))])
			if k > 0 {
				werr = h.w.Write(MsgOutput, id, buf[:k])
			}
		}
		if werr != nil {
			return // the channel is gone
		}
		if k > 0 {
			e.mu.Lock()
			e.credit -= int64(k)
			e.mu.Unlock()
		}
		if rerr != nil {
			break
		}
	}
	// Output ends as the command exits, as a rule: the end goes out with
	// the exit status, in one write, unless that went first.
	e.mu.Lock()
	e.ended = !e.exited
	exited := e.exited
	e.mu.Unlock()
	if exited {
		_ = h.w.Write(MsgEOF, id, nil)
	}
}

// pipeOutput sends at most n bytes of the output in one frame: the
// frame is what the command's pipe holds (FIONREAD, and only this process
// reads it), read at once into a buffer of the pool, which goes back as
// soon as the frame is written, so a quiet command holds none. A pipe that
// looks empty is read (into buf) instead, which tells its end from nothing
// yet.
//
// The bytes are copied, not spliced from pipe to pipe: a page spliced on
// is freed by sshd's read and allocated anew by the command's next write,
// where a copy leaves each pipe its own pages to reuse; on a 6.18 kernel
// the host's CPU per MiB (sshd, the agent and the command) was 0.96-1.16
// ms copied against 1.05-1.29 ms spliced.
func (h *host) pipeOutput(id uint32, rc syscall.RawConn, n int, buf []byte) (sent int, rerr, werr error) {
	var avail, k int
	err := rc.Read(func(fd uintptr) bool {
		if avail, rerr = unix.IoctlGetInt(int(fd), unix.TIOCINQ); rerr != nil || avail > 0 {
			return true
		}
		for {
			k, rerr = unix.Read(int(fd), buf[:min(n, len(buf))])
			if rerr != unix.EINTR {
				break
			}
		}
		return rerr != unix.EAGAIN
	})
	switch {
	case err != nil: // closed by OpClose
		return 0, io.EOF, nil
	case rerr != nil:
		return 0, rerr, nil
	case avail == 0 && k <= 0:
		return 0, io.EOF, nil
	case avail == 0:
		return k, nil, h.w.Write(MsgOutput, id, buf[:k])
	}
	frame := frameBuffer()
	defer frameBuffers.Put(frame)
	m := min(avail, n, len(*frame))
	var got int
	err = rc.Control(func(fd uintptr) {
		for got < m {
			k, err := unix.Read(int(fd), (*frame)[got:m])
			switch {
			case err == unix.EINTR:
			case err != nil:
				rerr = err
				return
			case k == 0:
				rerr = io.ErrUnexpectedEOF
				return
			default:
				got += k
			}
		}
	})
	if err != nil {
		return 0, io.EOF, nil
	}
	if got > 0 {
		werr = h.w.Write(MsgOutput, id, (*frame)[:got])
	}
	return got, rerr, werr
}

// frameBuffers are the buffers of output frames, ChunkSize each: taken
// only while a frame is read and written.
var frameBuffers sync.Pool

func frameBuffer() *[]byte {
	if b, ok := frameBuffers.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, ChunkSize)
	return &b
}

// forget drops an execution that has exited and whose output the helper
// closed (it closes it once nothing of the execution is alive): its group
// and the mount points its box made go first, so an OpRelease that no
// longer finds it knows they are gone.
func (h *host) forget(id uint32) {
	h.mu.Lock()
	e := h.execs[id]
	h.mu.Unlock()
	if e == nil {
		return
	}
	e.release()
	h.mu.Lock()
	delete(h.execs, id)
	h.mu.Unlock()
}

func (h *host) request(id uint32, payload []byte) {
	var r Request
	if err := json.Unmarshal(payload, &r); err != nil {
		h.send(MsgReply, id, Reply{Err: "malformed request: " + err.Error()})
		return
	}
	switch r.Op {
	case OpGroup:
		h.send(MsgReply, id, groupOp(r))
		return
	case OpConfine:
		c := h.confinement(r.Sandbox)
		h.send(MsgReply, id, Reply{Confine: &c})
		return
	case OpRelease:
		// The helper's settlement: nothing of the execution is alive.
		var rep Reply
		if e := h.exec(r.Exec); e != nil {
			e.release()
			rep.Limit = e.limit
		}
		h.send(MsgReply, id, rep)
		return
	case OpTools:
		h.send(MsgReply, id, Reply{Lacks: Lacking(r.Tools), Looked: true})
		return
	case OpPublish:
		h.send(MsgReply, id, h.publish(r))
		return
	case OpDenials:
		var rep Reply
		if r.Sandbox != nil {
			rep.Denials = sandbox.Denials(string(r.Data), h.dir(r.Dir), *r.Sandbox)
		}
		h.send(MsgReply, id, rep)
		return
	}
	e := h.exec(r.Exec)
	if e == nil {
		h.send(MsgReply, id, Reply{Err: fmt.Sprintf("no execution %d on this host agent", r.Exec)})
		return
	}
	var rep Reply
	if (r.Op == OpSignal || r.Op == OpInt || r.Op == OpAlive) && reused(e.proc) {
		// As on the wrapper path: a group whose leader's pid is someone
		// else's now is never signalled again, and counts as not alive.
		h.send(MsgReply, id, Reply{Ambiguous: true})
		return
	}
	switch r.Op {
	case OpSignal:
		rep = errReply(e.proc.Signal(syscall.Signal(r.Sig)))
	case OpInt:
		rep = errReply(e.proc.Interrupt())
	case OpAlive:
		rep.Alive = e.proc.Alive()
	case OpInput:
		n, err := e.proc.Write(r.Data)
		rep = errReply(err)
		rep.N = n
	case OpWaiting:
		rep.Waiting = process.WaitingForInput(e.proc.Pid())
	case OpPorts:
		rep.Listening = process.Listening(e.proc.Pid())
	case OpClose:
		rep = errReply(e.proc.CloseOutput())
		e.mu.Lock()
		e.closed = true
		e.cond.Broadcast()
		done := e.exited
		e.mu.Unlock()
		if done {
			h.forget(r.Exec)
		}
	default:
		rep.Err = fmt.Sprintf("unknown operation %q", r.Op)
	}
	h.send(MsgReply, id, rep)
}

// reused reports whether proc's shell has exited and another process
// holds its pid: the group's number may then be another's too.
func reused(proc process.Process) bool {
	if !proc.Exited() {
		return false
	}
	p, ok := process.Stat(proc.Pid())
	return ok && p.Start != proc.LeaderStart()
}

func errReply(err error) Reply {
	var errno syscall.Errno
	switch {
	case err == nil:
		return Reply{}
	case errors.As(err, &errno):
		return Reply{Errno: int(errno), Err: err.Error()}
	case errors.Is(err, os.ErrClosed):
		return Reply{Errno: -1, Err: err.Error()}
	}
	return Reply{Err: err.Error()}
}

// groupOp probes or signals a group known only by its leader's identity
// and its tag, as recovery does here (process.Members): the group counts
// as ours while its leader holds the pid with the same start time, or
// when a member carries the tag; tagged processes that started no
// earlier than the leader are ours wherever they are, and so is what
// descends from anything proven. A leader's pid held by another process
// is never signalled; a group with survivors none of which is proven
// ours is ambiguous.
func groupOp(r Request) Reply {
	rep := Reply{Leader: "gone"}
	if p, ok := process.Stat(r.Pid); ok {
		switch {
		case p.Start != r.Start:
			rep.Leader = "other"
		case p.Alive():
			rep.Leader = "live"
		default:
			rep.Leader = "zombie"
		}
	}
	if rep.Leader == "other" {
		rep.State = "ambiguous"
		return rep
	}
	proven := 0
	if rep.Leader != "gone" {
		proven = r.Pgid
	}
	members := process.Members(proven, r.Tag, r.Start)
	grp := 0
	if proven == 0 {
		for _, p := range process.Table() {
			if p.Pgrp == r.Pgid && p.Alive() {
				grp++
			}
		}
		for _, m := range members {
			if m.Pgrp == r.Pgid {
				// A tagged member vouches for its group.
				proven = r.Pgid
				members = process.Members(proven, r.Tag, r.Start)
				break
			}
		}
	}
	switch {
	case len(members) > 0:
		rep.State = "live"
	case grp > 0 && proven == 0:
		rep.State = "ambiguous"
		return rep
	default:
		rep.State = "dead"
	}
	if r.Act == "probe" || rep.State != "live" {
		return rep
	}
	sig := syscall.Signal(r.Sig)
	if r.Act == "int" {
		sig = unix.SIGINT
		if proven > 0 {
			_ = unix.Kill(-proven, sig)
			return rep
		}
	} else if proven > 0 {
		_ = unix.Kill(-proven, sig)
	}
	for _, m := range members {
		_ = unix.Kill(m.Pid, sig)
		if sig == unix.SIGTERM {
			_ = unix.Kill(m.Pid, unix.SIGCONT)
		}
	}
	if sig == unix.SIGTERM && proven > 0 {
		_ = unix.Kill(-proven, unix.SIGCONT)
	}
	return rep
}

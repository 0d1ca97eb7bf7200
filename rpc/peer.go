package rpc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Who may use a helper's socket: a process of the helper's own uid that
// runs outside every box. A confined command has the same uid, and a
// connect() is neither network nor a write, so neither network: deny nor
// a read-only mount stops it; left in, it could open a session and start
// unconfined commands. Every box mevedel-exec makes has a pid namespace
// of its own (sandbox.boxBase), and that is the mark looked for here: a
// client whose pid namespace is not the helper's runs in a box (ours, or
// another sandbox's) and is refused.

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5): a pidfd of the peer, which
// keeps its pid from being reused while its namespace is read.
const soPeerPidfd = 77

// peerCred is what the kernel recorded of the process that connected.
type peerCred struct {
	uid   uint32
	pid   int32 // in this helper's pid namespace; 0 when not visible here
	pidfd int   // -1 when the kernel has no SO_PEERPIDFD
}

func credOf(c net.Conn) (peerCred, error) {
	pc := peerCred{pidfd: -1}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return pc, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return pc, err
	}
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); cerr == nil {
			pc.uid, pc.pid = cred.Uid, cred.Pid
		}
		if pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
			pc.pidfd = pfd
		}
	}); err != nil {
		return pc, err
	}
	return pc, cerr
}

// peerRefusal says why the client at the other end of c may not use this
// helper, or "" when it may.
func peerRefusal(c net.Conn) string {
	pc, err := credOf(c)
	if pc.pidfd >= 0 {
		defer unix.Close(pc.pidfd)
	}
	self := os.Getuid()
	switch {
	case err != nil:
		return fmt.Sprintf("cannot tell who connected (%v); only uid %d may use this helper", err, self)
	case int64(pc.uid) != int64(self):
		return fmt.Sprintf("uid %d may not use this helper: it serves uid %d only", pc.uid, self)
	}
	return boxedRefusal(pc)
}

// ownPidNS is this helper's pid namespace, read once.
var ownPidNS = sync.OnceValues(func() (string, error) { return os.Readlink("/proc/self/ns/pid") })

// boxedRefusal says why a client of the helper's uid runs in a box, or
// "" when it runs in the helper's own pid namespace.
func boxedRefusal(pc peerCred) string {
	const why = "a confined command (it runs in a sandbox's box) may not use the helper that could start it unconfined commands"
	if pc.pid <= 0 {
		return "the client's pid is not visible in this helper's pid namespace, so it runs in a box of its own: " + why
	}
	mine, err := ownPidNS()
	if err != nil {
		return fmt.Sprintf("cannot read this helper's pid namespace (%v), so no client can be told apart from a confined command", err)
	}
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(int(pc.pid)) + "/ns/pid")
	// The pid read was the client's only if it is still alive: its
	// pidfd holds its pid until then.
	if pc.pidfd >= 0 && unix.PidfdSendSignal(pc.pidfd, 0, nil, 0) != nil {
		return fmt.Sprintf("client pid %d exited before its pid namespace could be read", pc.pid)
	}
	switch {
	case err != nil:
		return fmt.Sprintf("cannot read the pid namespace of client pid %d (%v), so it may be a confined command", pc.pid, err)
	case theirs != mine:
		return fmt.Sprintf("client pid %d runs in pid namespace %s, not this helper's %s: %s", pc.pid, theirs, mine, why)
	}
	return ""
}

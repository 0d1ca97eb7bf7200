package process

import (
	"encoding/binary"
	"fmt"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// The helper's own executable as the shim costs a Go runtime's start on
// every command (3.5 ms on an idle machine, several times that on a busy
// one). Where a native shim exists for the architecture, a tiny ELF
// program in a sealed memfd does the same two system calls instead, for
// the cost of one more execve.

// The native shim's arguments are the program's path and its argv, after
// optional flags in one word: "-g3i", say. "g" and a digit waits until
// one byte can be read from that descriptor (a gate: closed unread, the
// shim exits 127 and the command never runs) and closes it. "i" ignores
// SIGHUP, SIGINT, SIGQUIT and SIGTERM and leaves an inherited copy of the
// shim at descriptor innerShimFd (a sandbox's bwrap, the group's leader,
// then lives through a stop meant for the command); "d", run from that
// copy inside the box, closes it and sets those signals back to their
// defaults (the command gets them as it would outside). Each costs one
// tiny execve where env(1) costs a dynamic one.

// innerShimFd is where the "i" flag leaves the copy of the shim.
const innerShimFd = 200

// InnerShim is the path a shielded start's descendants run the shim by
// ("-d" mode), or "" when there is no native shim to shield with.
func InnerShim() string {
	if nativeShimFd < 0 {
		return ""
	}
	return "/proc/self/fd/" + strconv.Itoa(innerShimFd)
}

// placeInnerShim is the Go shim's "i": a copy of the native shim,
// inherited at innerShimFd.
func placeInnerShim() error {
	if subreaperCode == nil {
		return fmt.Errorf("no native shim for this architecture")
	}
	fd, err := unix.MemfdCreate("mevedel-exec-subreaper", unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	if _, err := unix.Write(fd, subreaperELF()); err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	if fd != innerShimFd {
		if err := unix.Dup3(fd, innerShimFd, 0); err != nil {
			return fmt.Errorf("memfd: %w", err)
		}
		unix.Close(fd)
	}
	return nil
}

// nativeShimFd is the memfd of the native shim, or -1. It sits at a high
// descriptor number, so a child's stdio and extra files, which the fork
// places at 0, 1, 2, 3..., never overwrite it before the execve that
// opens it.
var nativeShimFd = -1

// nativeShimMinFd is the lowest descriptor the memfd is moved to.
const nativeShimMinFd = 200

// subreaperELF wraps subreaperCode in a minimal static ELF executable:
// its header, one loadable segment (the whole file, read and execute),
// and the code.
func subreaperELF() []byte {
	const base, ehsize, phsize = 0x400000, 64, 56
	le := binary.LittleEndian
	b := make([]byte, ehsize+phsize, ehsize+phsize+len(subreaperCode))
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1}) // 64-bit, little-endian, version 1
	le.PutUint16(b[16:], 2)                       // ET_EXEC
	le.PutUint16(b[18:], elfMachine)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+ehsize+phsize) // entry: the code
	le.PutUint64(b[32:], ehsize)             // program headers
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1)
	p := b[ehsize:]
	size := uint64(ehsize + phsize + len(subreaperCode))
	le.PutUint32(p[0:], 1) // PT_LOAD
	le.PutUint32(p[4:], 5) // PF_R | PF_X
	le.PutUint64(p[16:], base)
	le.PutUint64(p[24:], base)
	le.PutUint64(p[32:], size)
	le.PutUint64(p[40:], size)
	le.PutUint64(p[48:], 0x1000)
	return append(b, subreaperCode...)
}

// startNativeShim makes the native shim's memfd and checks that it runs
// (a kernel may refuse to execute memfds); on any failure the Go shim
// stays in use.
func startNativeShim() error {
	if subreaperCode == nil {
		return fmt.Errorf("no native shim for this architecture")
	}
	fd, err := unix.MemfdCreate("mevedel-exec-subreaper", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if err != nil {
		// Kernels before 6.3 know no MFD_EXEC; their memfds are executable.
		fd, err = unix.MemfdCreate("mevedel-exec-subreaper", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, subreaperELF()); err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		return fmt.Errorf("sealing the memfd: %w", err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, nativeShimMinFd)
	if err != nil {
		return fmt.Errorf("memfd: %w", err)
	}
	// The proof that this kernel executes it: it runs true.
	truePath, err := exec.LookPath("true")
	if err != nil {
		unix.Close(high)
		return err
	}
	if err := exec.Command("/proc/self/fd/"+strconv.Itoa(high), truePath, "true").Run(); err != nil {
		unix.Close(high)
		return fmt.Errorf("running the native shim: %w", err)
	}
	nativeShimFd = high
	return nil
}

// nativeShimPath is the path a child execs to run the native shim, or ""
// when there is none.
func nativeShimPath() string {
	if nativeShimFd < 0 {
		return ""
	}
	return "/proc/self/fd/" + strconv.Itoa(nativeShimFd)
}

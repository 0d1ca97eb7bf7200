package process

import (
	"bytes"
	"encoding/binary"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Whether a terminal command waits for someone to type is read from the
// kernel, not guessed from its output: every process of the terminal's
// foreground group is asleep in a read (or a select or poll) of the
// terminal, or in a wait for a child that does. A process asleep in
// anything else (nanosleep, a futex, a socket) or running makes the group
// busy. Only the main thread of each process is looked at.

// devTTY is /dev/tty's device number (5, 0): opened by sudo, ssh and
// passwd to ask for a password, it always means the controlling terminal.
var devTTY = unix.Mkdev(5, 0)

// termStat is what /proc/PID/stat says of a process's terminal.
type termStat struct {
	state   byte
	pgrp    int
	ttyNr   uint64 // the controlling terminal, kernel encoding; 0 for none
	tpgid   int    // the terminal's foreground group; -1 for none
	threads int
}

func readTermStat(pid int, buf []byte) (termStat, bool) {
	b, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/stat", buf)
	if !ok {
		return termStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return termStat{}, false
	}
	// state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice num_threads
	f := bytes.Fields(b[i+2:])
	if len(f) < 18 || len(f[0]) == 0 {
		return termStat{}, false
	}
	var t termStat
	t.state = f[0][0]
	t.pgrp, _ = strconv.Atoi(string(f[2]))
	tty, _ := strconv.ParseInt(string(f[4]), 10, 64)
	t.ttyNr = uint64(uint32(tty))
	t.tpgid, _ = strconv.Atoi(string(f[5]))
	t.threads, _ = strconv.Atoi(string(f[17]))
	return t, true
}

// ttyDev turns the kernel's tty_nr encoding into a device number.
func ttyDev(nr uint64) uint64 {
	major := (nr >> 8) & 0xfff
	minor := (nr & 0xff) | ((nr >> 12) & 0xfff00)
	return unix.Mkdev(uint32(major), uint32(minor))
}

// Descendants returns pid and its descendants, by the kernel's children lists
// (no scan of /proc); when the kernel has none, by a scan of the process
// table.
func Descendants(pid int) []int {
	out := []int{}
	seen := map[int]bool{}
	queue := []int{pid}
	buf := make([]byte, 4096)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		kids, ok := childrenOf(p, buf)
		if !ok {
			return treeByTable(pid)
		}
		queue = append(queue, kids...)
	}
	return out
}

// childrenOf lists pid's children from /proc/PID/task/*/children. ok is
// false only when the kernel does not provide those files; a process that
// is gone has no children.
func childrenOf(pid int, buf []byte) (kids []int, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	d, err := os.Open(dir)
	if err != nil {
		return nil, true
	}
	tasks, _ := d.Readdirnames(-1)
	d.Close()
	for _, t := range tasks {
		b, ok := readProcFile(dir+"/"+t+"/children", buf)
		if !ok {
			if _, err := os.Stat(dir + "/" + t + "/children"); os.IsNotExist(err) {
				if _, err := os.Stat(dir + "/" + t); err == nil {
					return nil, false
				}
			}
			continue
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				kids = append(kids, c)
			}
		}
	}
	return kids, true
}

func treeByTable(pid int) []int {
	table := Table()
	children := map[int][]int{}
	for _, p := range table {
		children[p.PPid] = append(children[p.PPid], p.Pid)
	}
	out := []int{}
	seen := map[int]bool{}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// What one process of the foreground group is doing.
type blockedOn int

const (
	busy     blockedOn = iota // running, or asleep in anything else
	reading                   // asleep reading the terminal
	awaiting                  // asleep waiting for a child
)

// WaitingForInput reports whether the command whose shell is leader waits
// for terminal input: the terminal's foreground group has at least one
// process reading the terminal, and every other one waits for a child.
// A command without a controlling terminal never waits.
//
// The tree is walked from the leader down and the walk stops at the first
// busy process, so the common answer (a command at work: the leader, or
// its first child, is not reading) costs a few small reads.
func WaitingForInput(leader int) bool {
	buf := make([]byte, 1024)
	ls, ok := readTermStat(leader, buf)
	if !ok || ls.ttyNr == 0 || ls.tpgid <= 0 {
		return false
	}
	tty := ttyDev(ls.ttyNr)
	read := false
	seen := map[int]bool{}
	queue := []int{leader}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		st, ok := readTermStat(pid, buf)
		if !ok {
			continue
		}
		if st.pgrp == ls.tpgid {
			switch st.state {
			case 'Z', 'X', 'x':
			case 'S':
				switch blockedIn(pid, tty, buf) {
				case busy:
					return false
				case reading:
					read = true
				}
			default:
				return false // running, in disk sleep, stopped
			}
		}
		if st.threads == 1 {
			// One thread: its own children file lists every child.
			if b, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/task/"+strconv.Itoa(pid)+"/children", buf); ok {
				for _, f := range bytes.Fields(b) {
					if c, err := strconv.Atoi(string(f)); err == nil {
						queue = append(queue, c)
					}
				}
				continue
			}
		}
		kids, ok := childrenOf(pid, buf)
		if !ok {
			kids = treeByTable(pid)[1:]
		}
		queue = append(queue, kids...)
	}
	return read
}

// blockedIn says what sleeping pid waits for, from /proc/PID/syscall
// (the system call and its arguments), falling back to /proc/PID/stack
// where that cannot be read.
func blockedIn(pid int, tty uint64, buf []byte) blockedOn {
	b, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/syscall", buf)
	if !ok {
		return blockedByStack(pid)
	}
	f := bytes.Fields(b)
	if len(f) < 4 {
		return busy // "running", or -1 (not in a system call)
	}
	nr, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return busy
	}
	arg := func(i int) uint64 {
		v, _ := strconv.ParseUint(string(bytes.TrimPrefix(f[i+1], []byte("0x"))), 16, 64)
		return v
	}
	switch {
	case nr == unix.SYS_WAIT4 || nr == unix.SYS_WAITID:
		return awaiting
	case nr == unix.SYS_READ || nr == unix.SYS_READV:
		if isTerminal(pid, int(arg(0)), tty) {
			return reading
		}
	case nr == unix.SYS_PSELECT6 || nr == sysSelect:
		if selectsTerminal(pid, int(arg(0)), arg(1), tty) {
			return reading
		}
	case nr == unix.SYS_PPOLL || nr == sysPoll:
		if pollsTerminal(pid, arg(0), int(arg(1)), tty) {
			return reading
		}
	}
	return busy
}

// blockedByStack reads the kernel stack (readable by root only).
func blockedByStack(pid int) blockedOn {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stack")
	switch {
	case err != nil:
		return busy
	case bytes.Contains(b, []byte("n_tty_read")):
		return reading
	case bytes.Contains(b, []byte("do_wait")):
		return awaiting
	}
	return busy
}

// isTerminal reports whether fd of pid is the terminal tty (or /dev/tty).
func isTerminal(pid, fd int, tty uint64) bool {
	if fd < 0 {
		return false
	}
	var st unix.Stat_t
	if unix.Stat("/proc/"+strconv.Itoa(pid)+"/fd/"+strconv.Itoa(fd), &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && (st.Rdev == tty || st.Rdev == devTTY)
}

// maxWatchedFds bounds what is read of a select or poll's sets.
const maxWatchedFds = 1024

// selectsTerminal reads the read set of a select from the process's
// memory and reports whether it holds the terminal.
func selectsTerminal(pid, nfds int, readfds uint64, tty uint64) bool {
	if readfds == 0 || nfds <= 0 {
		return false
	}
	nfds = min(nfds, maxWatchedFds)
	set := make([]byte, (nfds+63)/64*8)
	if !readMem(pid, readfds, set) {
		return false
	}
	for fd := range nfds {
		word := binary.LittleEndian.Uint64(set[fd/64*8:])
		if word&(1<<(fd%64)) != 0 && isTerminal(pid, fd, tty) {
			return true
		}
	}
	return false
}

// pollsTerminal reads a poll's array (struct pollfd: int fd, short
// events, short revents) and reports whether it waits to read the
// terminal.
func pollsTerminal(pid int, fds uint64, nfds int, tty uint64) bool {
	if fds == 0 || nfds <= 0 {
		return false
	}
	nfds = min(nfds, maxWatchedFds)
	arr := make([]byte, nfds*8)
	if !readMem(pid, fds, arr) {
		return false
	}
	for i := range nfds {
		fd := int(int32(binary.LittleEndian.Uint32(arr[i*8:])))
		events := binary.LittleEndian.Uint16(arr[i*8+4:])
		if events&(unix.POLLIN|unix.POLLPRI) != 0 && isTerminal(pid, fd, tty) {
			return true
		}
	}
	return false
}

// readMem reads len(b) bytes of pid's memory at addr.
func readMem(pid int, addr uint64, b []byte) bool {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	n, err := unix.Pread(fd, b, int64(addr))
	return err == nil && n == len(b)
}

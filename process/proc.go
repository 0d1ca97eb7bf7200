package process

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Info is what /proc/PID/stat says of one process.
type Info struct {
	Pid, PPid, Pgrp int
	State           byte   // R, S, D, Z, T, ...
	Start           uint64 // start time in clock ticks since boot
}

// readProcFile reads a small /proc file into buf with three system calls
// (os.ReadFile costs more, and scans read hundreds of these).
func readProcFile(path string, buf []byte) ([]byte, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], true
}

// Stat parses /proc/PID/stat. The command name may contain spaces and
// parentheses, so fields are counted from the last ')'.
func Stat(pid int) (Info, bool) {
	var buf [1024]byte
	return parseStat(pid, buf[:])
}

func parseStat(pid int, buf []byte) (Info, bool) {
	b, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/stat", buf)
	if !ok {
		return Info{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Info{}, false
	}
	// After the name: state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime ...
	var f [20][]byte
	if fields(b[i+2:], f[:]) < len(f) || len(f[0]) == 0 {
		return Info{}, false
	}
	p := Info{Pid: pid, State: f[0][0]}
	p.PPid = atoi(f[1])
	p.Pgrp = atoi(f[2])
	p.Start = uint64(atoi(f[19]))
	return p, true
}

// fields fills f with the first space-separated fields of b (a line of
// /proc) and returns how many it found; unlike bytes.Fields it allocates
// nothing.
func fields(b []byte, f [][]byte) int {
	n := 0
	for n < len(f) {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\n') {
			b = b[1:]
		}
		if len(b) == 0 {
			break
		}
		end := bytes.IndexAny(b, " \n")
		if end < 0 {
			end = len(b)
		}
		f[n], b = b[:end], b[end:]
		n++
	}
	return n
}

// atoi reads a decimal number of /proc; anything else is 0.
func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' || n > (1<<62)/10 {
			return 0
		}
		n = 10*n + int(c-'0')
	}
	return n
}

// Alive reports whether the process can still run: zombies (and dead
// entries) do not count.
func (p Info) Alive() bool { return p.State != 'Z' && p.State != 'X' && p.State != 'x' }

// StartTime returns the start time of pid in clock ticks since boot, the
// identity that tells a process from a later one that reused its pid.
func StartTime(pid int) (uint64, bool) {
	p, ok := Stat(pid)
	return p.Start, ok
}

// Table reads every process visible in /proc.
func Table() []Info {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]Info, 0, len(names))
	buf := make([]byte, 1024)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, buf); ok {
			out = append(out, p)
		}
	}
	return out
}

// Environ returns the initial environment of pid, KEY=value, all of it.
func Environ(pid int) ([]string, bool) {
	var buf []byte
	b, ok := readEnviron(pid, &buf)
	if !ok {
		return nil, false
	}
	var out []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			out = append(out, string(kv))
		}
	}
	return out, true
}

// adoptedChildren lists this process's children among which are all the
// orphans it adopted as subreaper: the kernel gives an orphan to the
// first live thread of its subreaper (find_new_reaper), the main thread,
// which lives as long as the process. Children that other threads
// started are left out; the reaper knows those already. One read instead
// of one per thread; every thread's when the main one's cannot be read.
func adoptedChildren() (pids []int, ok bool) {
	b, ok := readProcFile(mainChildren, childrenBuf[:])
	if !ok {
		return ownChildren()
	}
	pid := 0
	for _, c := range append(b, ' ') {
		switch {
		case '0' <= c && c <= '9':
			pid = 10*pid + int(c-'0')
		case pid > 0:
			pids = append(pids, pid)
			pid = 0
		}
	}
	return pids, true
}

// mainChildren lists the main thread's children; childrenBuf is where
// adoptedChildren reads it, under the reaper's lock.
var (
	mainChildren = "/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"
	childrenBuf  [4096]byte
)

// ownChildren lists this process's children from
// /proc/self/task/*/children (each thread lists the children it forked).
// ok is false when the kernel does not provide those files.
func ownChildren() (pids []int, ok bool) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, false
	}
	buf := make([]byte, 4096)
	for _, t := range tasks {
		b, ok := readProcFile("/proc/self/task/"+t.Name()+"/children", buf)
		if !ok {
			if _, err := os.Stat("/proc/self/task/" + t.Name()); err != nil {
				continue // the thread is gone
			}
			return nil, false
		}
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, true
}

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
	n := 0
	for _, field := range bytes.Fields(b[i+2:]) {
		if n == len(f) {
			break
		}
		f[n] = field
		n++
	}
	if n < 20 || len(f[0]) == 0 {
		return Info{}, false
	}
	p := Info{Pid: pid, State: f[0][0]}
	p.PPid, _ = strconv.Atoi(string(f[1]))
	p.Pgrp, _ = strconv.Atoi(string(f[2]))
	p.Start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	return p, true
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

// hasEnv reports whether the initial environment of pid holds entry
// (KEY=value) exactly.
func hasEnv(pid int, entry string, buf []byte) bool {
	b, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/environ", buf)
	if !ok {
		return false
	}
	want := []byte(entry)
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		if bytes.Equal(b[:i], want) {
			return true
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return false
}

// Members returns the live processes that belong to an execution: members
// of its process group, processes carrying its tag in their environment
// (which is how a descendant that left the group with setsid or a double
// fork is traced back), and every descendant of those by parent links (which
// catches a tagged process's children that replaced their environment).
// Only processes started no earlier than notBefore (clock ticks since
// boot; the shell's start) can carry the tag, so older ones are not read.
func Members(pgid int, tag string, notBefore uint64) []Info {
	self := os.Getpid()
	table := Table()
	children := make(map[int][]int, len(table))
	byPid := make(map[int]Info, len(table))
	var roots []int
	var env []byte
	for _, p := range table {
		byPid[p.Pid] = p
		children[p.PPid] = append(children[p.PPid], p.Pid)
		if p.Pid == self {
			continue
		}
		if pgid > 0 && p.Pgrp == pgid {
			roots = append(roots, p.Pid)
			continue
		}
		if tag != "" && p.Alive() && p.Start >= notBefore {
			if env == nil {
				env = make([]byte, 256<<10)
			}
			if hasEnv(p.Pid, tag, env) {
				roots = append(roots, p.Pid)
			}
		}
	}
	seen := make(map[int]bool)
	var out []Info
	for len(roots) > 0 {
		pid := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if seen[pid] || pid == self {
			continue
		}
		seen[pid] = true
		if p := byPid[pid]; p.Alive() {
			out = append(out, p)
		}
		roots = append(roots, children[pid]...)
	}
	return out
}

// Environ returns the initial environment of pid, KEY=value, as far as
// /proc shows it (the first 256 KiB).
func Environ(pid int) ([]string, bool) {
	buf := make([]byte, 256<<10)
	b, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/environ", buf)
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

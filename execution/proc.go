package execution

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procInfo is what /proc/PID/stat says of one process.
type procInfo struct {
	pid, ppid, pgrp int
	state           byte   // R, S, D, Z, T, ...
	start           uint64 // start time in clock ticks since boot
}

// readStat parses /proc/PID/stat. The command name may contain spaces and
// parentheses, so fields are counted from the last ')'.
func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0]=state f[1]=ppid f[2]=pgrp ... f[19]=starttime
	if len(f) < 20 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, state: f[0][0]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

// alive reports whether the process can still run: zombies (and dead
// entries) do not count.
func (p procInfo) alive() bool { return p.state != 'Z' && p.state != 'X' && p.state != 'x' }

// StartTime returns the start time of pid in clock ticks since boot, the
// identity that tells a process from a later one that reused its pid.
func StartTime(pid int) (uint64, bool) {
	p, ok := readStat(pid)
	return p.start, ok
}

// processTable reads every process visible in /proc.
func processTable() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := readStat(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// hasEnv reports whether the initial environment of pid holds entry
// (KEY=value) exactly.
func hasEnv(pid int, entry string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		if string(b[:i]) == entry {
			return true
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return false
}

// members returns the live processes that belong to an execution: members
// of its process group, processes carrying its tag in their environment
// (which is how a descendant that left the group with setsid or a double
// fork is traced back), and every descendant of those by parent links (which
// catches a tagged process's children that replaced their environment).
func members(pgid int, tag string) []procInfo {
	self := os.Getpid()
	table := processTable()
	children := make(map[int][]int, len(table))
	byPid := make(map[int]procInfo, len(table))
	var roots []int
	for _, p := range table {
		byPid[p.pid] = p
		children[p.ppid] = append(children[p.ppid], p.pid)
		if p.pid == self {
			continue
		}
		if (pgid > 0 && p.pgrp == pgid) || (p.alive() && tag != "" && hasEnv(p.pid, tag)) {
			roots = append(roots, p.pid)
		}
	}
	seen := make(map[int]bool)
	var out []procInfo
	for len(roots) > 0 {
		pid := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if seen[pid] || pid == self {
			continue
		}
		seen[pid] = true
		if p := byPid[pid]; p.alive() {
			out = append(out, p)
		}
		roots = append(roots, children[pid]...)
	}
	return out
}

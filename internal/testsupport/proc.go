package testsupport

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"

	"github.com/mevedel/mevedel-exec/process"
)

// Alive reports whether pid is a process that can still run (not a
// zombie, not gone).
func Alive(pid int) bool {
	p, ok := process.Stat(pid)
	return ok && p.Alive()
}

// Proc is a live process a scan found, for a report.
type Proc struct {
	Pid     int
	Cmdline string
}

func (p Proc) String() string { return fmt.Sprintf("%d %q", p.Pid, p.Cmdline) }

// tagVar is the variable every process of an execution inherits.
const tagVar = statedir.TagVar + "="

// UnderHome lists the live processes whose environment has HOME=home,
// and with tagged only those that also carry an execution tag. Tests give
// each helper a private HOME, so after that helper (or everything a test
// started with that HOME) is gone, any of them is a leak, and tests
// running at the same time elsewhere do not count.
func UnderHome(home string, tagged bool) []Proc {
	var out []Proc
	for _, p := range process.Table() {
		if !p.Alive() {
			continue
		}
		env, ok := process.Environ(p.Pid)
		if !ok || !slices.Contains(env, "HOME="+home) {
			continue
		}
		if tagged && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, tagVar) }) {
			continue
		}
		out = append(out, Proc{p.Pid, Cmdline(p.Pid)})
	}
	return out
}

// Cmdline is pid's command line, arguments joined by spaces ("" when
// gone or a zombie).
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '}))
}

// Exe is the path of pid's executable.
func Exe(pid int) (string, bool) {
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return p, err == nil
}

// PeakRSS is pid's peak resident set size in bytes (VmHWM).
func PeakRSS(pid int) (int64, error) { return StatusField(pid, "VmHWM") }

// StatusField reads a numeric field of /proc/PID/status ("Threads",
// "VmRSS", ...); kB become bytes.
func StatusField(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if len(f) == 2 && f[1] == "kB" {
				n <<= 10
			}
			return n, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// Poll checks done until it holds or bound passes, and reports whether it
// held. Only for what nothing announces (a pid leaving /proc, a process
// exiting that is not ours to wait for): the pause between checks grows
// to 50 ms, and bound only limits the wait.
func Poll(bound time.Duration, done func() bool) bool {
	deadline := time.Now().Add(bound)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay) // polling, bounded by deadline
	}
}

// WaitGone waits up to bound for pid to leave /proc: exited and reaped,
// not merely a zombie, unless pid 1 is the one to reap it: an orphan's
// reaping is init's (here a slow one, up to 1.5 s late), not the process
// under test's, while a zombie of a helper's is a helper's leak.
func WaitGone(pid int, bound time.Duration) bool {
	return Poll(bound, func() bool {
		p, ok := process.Stat(pid)
		return !ok || (p.State == 'Z' && p.PPid == 1)
	})
}

// RaceExit is the GORACE setting of every race-built helper the tests
// start: the race runtime waits a second at exit by default for late
// reports, which would be a second of every helper's shutdown. Reports of
// races that happened are printed at once either way.
const RaceExit = "GORACE=atexit_sleep_ms=50"

// ConnectedTo lists, one entry per connection, the pids that hold an
// established TCP connection to 127.0.0.1:port (IPv4), by matching
// /proc/net/tcp's socket inodes to the processes' descriptors: who
// dialled a server and how often, the helper itself or a jump host's
// sshd.
func ConnectedTo(port int) []int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st ... uid timeout inode
		f := strings.Fields(line)
		if len(f) > 9 && f[2] == want && f[3] == "01" {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	var out []int
	if len(inodes) == 0 {
		return out
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		seen := map[string]bool{} // a socket a process holds twice counts once
		for _, fd := range fds {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[l] && !seen[l] {
				seen[l] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

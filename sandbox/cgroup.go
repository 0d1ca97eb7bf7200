package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Resources is the wire shape of the resources object of exec/start and
// session/open. Zero is no limit.
type Resources struct {
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
	CPUSeconds  int64 `json:"cpuSeconds,omitempty"`
}

// Over lays r over a default: each limit r sets wins.
func (r *Resources) Over(def *Resources) Resources {
	var out Resources
	if def != nil {
		out = *def
	}
	if r == nil {
		return out
	}
	if r.MemoryBytes != 0 {
		out.MemoryBytes = r.MemoryBytes
	}
	if r.Pids != 0 {
		out.Pids = r.Pids
	}
	if r.CPUSeconds != 0 {
		out.CPUSeconds = r.CPUSeconds
	}
	return out
}

// Check refuses negative limits.
func (r Resources) Check() error {
	if r.MemoryBytes < 0 || r.Pids < 0 || r.CPUSeconds < 0 {
		return errors.New("resources: limits must not be negative")
	}
	return nil
}

// Zero reports whether no limit is asked for.
func (r Resources) Zero() bool { return r == Resources{} }

// Limit names, as in the facts' limit and applied/notApplied.
const (
	LimitMemory = "memory"
	LimitPids   = "pids"
	LimitCPU    = "cpu"
)

// How a limit is applied.
const (
	ViaCgroupV2 = "cgroup-v2"
	ViaCgroupV1 = "cgroup-v1"
	ViaRlimit   = "rlimit"
)

// ResourceFacts is what the facts say about the limits: what was asked,
// how each was applied, and why one could not be.
type ResourceFacts struct {
	Resources
	Applied    map[string]string `json:"applied,omitempty"`
	NotApplied map[string]string `json:"notApplied,omitempty"`
}

// machine is how this machine's cgroups can hold a child: the directories
// under which the helper may make groups, per controller.
type machine struct {
	v2     string // the helper's own cgroup v2 directory, when usable
	memory string // v1: the helper's own memory cgroup directory
	pids   string // v1: the helper's own pids cgroup directory
	reason string // why no cgroup can be used, when none can
}

var (
	cgroupRoot = "/sys/fs/cgroup"
	selfCgroup = "/proc/self/cgroup"
	probed     struct {
		once sync.Once
		m    machine
	}
)

func thisMachine() machine {
	probed.once.Do(func() {
		probed.m = detect(cgroupRoot, selfCgroup)
		for _, dir := range []string{probed.m.v2, probed.m.memory, probed.m.pids} {
			if dir != "" {
				sweep(dir)
			}
		}
	})
	return probed.m
}

// groupPrefix starts the name of every group the helper makes; the
// helper's pid follows, so a group a dead helper left is known.
const groupPrefix = "mevedel-exec-"

// GroupName is the name of execution id's group.
func GroupName(id string) string { return groupPrefix + strconv.Itoa(os.Getpid()) + "-" + id }

// sweep removes the empty groups of helpers that are gone (a crash leaves
// them; settlement removes its own).
func sweep(parent string) {
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), groupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		_ = unix.Rmdir(filepath.Join(parent, e.Name())) // fails while anything is in it
	}
}

// detect reads which cgroups the helper is in and whether it may make
// groups below them: cgroup v2 with the memory and pids controllers
// delegated, or the v1 memory and pids hierarchies.
func detect(root, self string) machine {
	data, err := os.ReadFile(self)
	if err != nil {
		return machine{reason: "no cgroup information: " + err.Error()}
	}
	var m machine
	var unified string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			dir := filepath.Join(root, c, parts[2])
			switch c {
			case "memory":
				if writable(dir) {
					m.memory = dir
				}
			case "pids":
				if writable(dir) {
					m.pids = dir
				}
			}
		}
	}
	if m.memory == "" && m.pids == "" && unified != "" {
		// Pure v2: the controllers live in the unified hierarchy.
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
			dir := filepath.Join(root, unified)
			if err := delegate(dir); err == nil {
				m.v2 = dir
			} else {
				m.reason = "cgroup v2 without delegation: " + err.Error()
			}
		}
	}
	if m.memory == "" && m.pids == "" && m.v2 == "" && m.reason == "" {
		m.reason = "no cgroup hierarchy the helper may write"
	}
	return m
}

func writable(dir string) bool { return unix.Access(dir, unix.W_OK) == nil }

// leafName is where the helper moves itself in cgroup v2, so its own group
// may enable controllers for its children (no process may sit in a group
// that distributes them).
const leafName = "mevedel-exec-helper"

// delegate makes dir able to hold children with memory and pids limits.
func delegate(dir string) error {
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	for _, c := range []string{"memory", "pids"} {
		if !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " "+c+" ") {
			return fmt.Errorf("controller %s is not available in %s", c, dir)
		}
	}
	sub, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if strings.Contains(string(sub), "memory") && strings.Contains(string(sub), "pids") {
		return nil
	}
	leaf := filepath.Join(dir, leafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids"), 0)
}

// Group is one execution's resource limits: its cgroups, or the rlimit
// the command is started with. Close it at settlement.
type Group struct {
	facts ResourceFacts
	dirs  []string // the groups made, one per hierarchy
	procs []string // their cgroup.procs files, for the v1 trampoline
	memEv string   // file whose oom_kill counts memory kills
	pidEv string   // file whose max counts refused forks
	fd    int      // v2: the group's directory, for clone into it; -1
	sh    string   // the shell of the trampoline
}

// NewGroup makes the groups of one execution (named name) for r. A limit
// that cannot be applied is said in Facts().NotApplied, never an error.
func NewGroup(name string, r Resources) *Group {
	g := &Group{facts: ResourceFacts{Resources: r}, fd: -1}
	m := thisMachine()
	applied := map[string]string{}
	notApplied := map[string]string{}
	fail := func(limit, why string) { notApplied[limit] = why }
	// failCgroup records why for the cgroup limits that were asked.
	failCgroup := func(why string) {
		if r.MemoryBytes > 0 {
			fail(LimitMemory, why)
		}
		if r.Pids > 0 {
			fail(LimitPids, why)
		}
	}
	switch {
	case m.v2 != "" && (r.MemoryBytes > 0 || r.Pids > 0):
		dir := filepath.Join(m.v2, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			failCgroup(err.Error())
			break
		}
		g.dirs = append(g.dirs, dir)
		if r.MemoryBytes > 0 {
			err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(r.MemoryBytes, 10)), 0)
			if err == nil {
				// Swap would let a hog outlive its limit.
				_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
				applied[LimitMemory] = ViaCgroupV2
				g.memEv = filepath.Join(dir, "memory.events")
			} else {
				fail(LimitMemory, err.Error())
			}
		}
		if r.Pids > 0 {
			if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(r.Pids, 10)), 0); err == nil {
				applied[LimitPids] = ViaCgroupV2
				g.pidEv = filepath.Join(dir, "pids.events")
			} else {
				fail(LimitPids, err.Error())
			}
		}
		if fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			g.fd = fd
		} else {
			delete(applied, LimitMemory)
			delete(applied, LimitPids)
			failCgroup(err.Error())
		}
	default:
		if r.MemoryBytes > 0 {
			if m.memory == "" {
				fail(LimitMemory, "no memory cgroup the helper may write ("+m.reason+")")
			} else if dir, err := g.v1(m.memory, name); err != nil {
				fail(LimitMemory, err.Error())
			} else {
				v := []byte(strconv.FormatInt(r.MemoryBytes, 10))
				err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), v, 0)
				if err == nil {
					// Memory plus swap, where the kernel accounts it.
					_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), v, 0)
					applied[LimitMemory] = ViaCgroupV1
					g.memEv = filepath.Join(dir, "memory.oom_control")
				} else {
					fail(LimitMemory, err.Error())
				}
			}
		}
		if r.Pids > 0 {
			if m.pids == "" {
				fail(LimitPids, "no pids cgroup the helper may write ("+m.reason+")")
			} else if dir, err := g.v1(m.pids, name); err != nil {
				fail(LimitPids, err.Error())
			} else if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(r.Pids, 10)), 0); err == nil {
				applied[LimitPids] = ViaCgroupV1
				g.pidEv = filepath.Join(dir, "pids.events")
			} else {
				fail(LimitPids, err.Error())
			}
		}
	}
	if r.CPUSeconds > 0 {
		// CPU seconds are a per-process total: RLIMIT_CPU says the same
		// for each process of the tree.
		applied[LimitCPU] = ViaRlimit
	}
	if (len(g.procs) > 0 || r.CPUSeconds > 0) && g.sh == "" {
		g.sh = "/bin/sh"
		if _, err := os.Stat(g.sh); err != nil {
			for _, l := range []string{LimitCPU, LimitMemory, LimitPids} {
				if applied[l] == ViaCgroupV1 || applied[l] == ViaRlimit {
					delete(applied, l)
					fail(l, "no /bin/sh to start the command in its group")
				}
			}
			g.procs, g.sh = nil, ""
			g.facts.CPUSeconds = 0
		}
	}
	if len(applied) > 0 {
		g.facts.Applied = applied
	}
	if len(notApplied) > 0 {
		g.facts.NotApplied = notApplied
	}
	return g
}

// v1 makes the execution's group in one v1 hierarchy.
func (g *Group) v1(parent, name string) (string, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	g.dirs = append(g.dirs, dir)
	g.procs = append(g.procs, filepath.Join(dir, "cgroup.procs"))
	return dir, nil
}

// Facts returns what was asked and applied.
func (g *Group) Facts() ResourceFacts { return g.facts }

// trampoline joins the groups named after the CPU seconds, sets the CPU
// rlimit (hard a second past soft, so SIGXCPU comes first), then execs the
// command: everything the command starts is in the groups from its first
// instruction.
const trampoline = `cpu=$1; shift
if [ "$cpu" -gt 0 ]; then ulimit -S -t "$cpu" && ulimit -H -t $((cpu + 1)) || exit 125; fi
for f; do shift; [ "$f" = -- ] && break; echo $$ >"$f" || exit 125; done
exec "$@"`

// Wrap returns the command line that starts path with args (args[0] is
// the name the program sees) in the group.
func (g *Group) Wrap(path string, args []string) (string, []string) {
	if g.sh == "" {
		return path, args
	}
	out := []string{g.sh, "-c", trampoline, "sh", strconv.FormatInt(g.facts.CPUSeconds, 10)}
	out = append(out, g.procs...)
	out = append(out, "--", path)
	if len(args) > 1 {
		out = append(out, args[1:]...)
	}
	// A POSIX exec sets no argv[0] of its own: the program sees its path.
	return g.sh, out
}

// CgroupFD returns the cgroup v2 directory the command is cloned into.
func (g *Group) CgroupFD() (int, bool) { return g.fd, g.fd >= 0 }

// LimitHit names the limit that ended a command whose shell ended so
// (code, or signaled by sig), or "": the group's own count of OOM kills or
// refused forks, or SIGXCPU from the CPU rlimit (which bubblewrap, when
// boxed, reports as the exit code 128+SIGXCPU). A memory kill counts
// whatever the shell made of it; the others only when the shell failed.
func (g *Group) LimitHit(code int, signaled bool, sig unix.Signal, boxed bool) string {
	if g == nil {
		return ""
	}
	hit := g.Hit()
	if hit == LimitMemory {
		return hit
	}
	if code == 0 && !signaled {
		return ""
	}
	if hit != "" {
		return hit
	}
	if g.facts.CPUSeconds > 0 {
		if signaled && sig == unix.SIGXCPU {
			return LimitCPU
		}
		if boxed && !signaled && code == 128+int(unix.SIGXCPU) {
			return LimitCPU
		}
	}
	return ""
}

// Hit returns the limit the command ran into: memory when the group's
// OOM killer struck, pids when a fork was refused at the cap, else "".
func (g *Group) Hit() string {
	if g.memEv != "" && counter(g.memEv, "oom_kill") > 0 {
		return LimitMemory
	}
	if g.pidEv != "" && counter(g.pidEv, "max") > 0 {
		return LimitPids
	}
	return ""
}

func counter(file, key string) int64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// closeWait bounds how long Close waits for killed members to leave.
const closeWait = 2 * time.Second

// Close kills whatever is still in the groups (nothing normally: the
// execution settles once its processes are gone) and removes them.
func (g *Group) Close() error {
	if g == nil {
		return nil
	}
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	var errs []error
	for i := len(g.dirs) - 1; i >= 0; i-- {
		dir := g.dirs[i]
		deadline := time.Now().Add(closeWait)
		delay := time.Millisecond
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dir, err))
				break
			}
			for _, pid := range members(dir) {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			time.Sleep(delay) // the kernel empties the group asynchronously
			delay = min(2*delay, 50*time.Millisecond)
		}
	}
	g.dirs = nil
	return errors.Join(errs...)
}

func members(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil && n != os.Getpid() {
			out = append(out, n)
		}
	}
	return out
}

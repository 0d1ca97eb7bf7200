package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Backend names what confines a command.
const (
	BackendBubblewrap = "bubblewrap"
	BackendNone       = "none"
)

// Facts is what an execution's facts say about its confinement.
type Facts struct {
	Backend string  `json:"backend"`
	Reason  string  `json:"reason,omitempty"` // why the backend is none
	Network Network `json:"network,omitempty"`
	Policy  *Policy `json:"policy,omitempty"` // as applied
}

// Probe is the result of checking once whether bubblewrap can confine a
// command here: Path is set when it can, Reason says why not. Shim or Env
// is set when the process layer's native shim, or else env(1), can shield
// bwrap from the signals meant for the command.
type Probe struct {
	Path   string
	Reason string
	Shim   string
	Env    string
}

// shielded are the signals a stop, an interrupt or a terminal sends to
// the command's process group. bwrap, the group's leader, would die of
// them and report a signal instead of the command's own exit; so it runs
// with them ignored, and the command gets them back as defaults.
const shielded = "INT,TERM,HUP,QUIT"

// shieldCheck exits 0 only where SIGTERM reaches the shell as a default
// (a shell cannot trap a signal ignored on entry).
const shieldCheck = `trap "exit 0" TERM; kill -TERM $$; exit 1`

// boxBase is what every box has, whatever the policy: the host's tree
// read-only, a minimal /dev of its own (no raw devices, an empty private
// /dev/shm, a devpts of its own), a pid namespace of its own with its
// /proc (no other process, its environment or its root is visible), and
// no capabilities. bwrap always sets no_new_privs; --cap-drop ALL also
// empties the set of a command run as root, which would otherwise keep
// every capability (remount, umount, raw devices). Dropping them keeps
// the command's uid, so what it writes in a writable root is owned as
// outside; mapping root to another uid in a user namespace would not.
//
// Pid 1 of the box is bwrap itself (it reaps and ends the box), not the
// command: its /proc entry is masked with an empty read-only tmpfs, so
// the command's parent is no window either (its environment, its root).
var boxBase = []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--cap-drop", "ALL",
	"--tmpfs", "/proc/1", "--remount-ro", "/proc/1"}

// BaseArgs returns the options every box starts with (for the benchmark's
// floor: bwrap with them, running true).
func BaseArgs() []string { return slices.Clone(boxBase) }

// ProbeTimeout bounds each run of the probe: a working bwrap answers in
// milliseconds.
const ProbeTimeout = 5 * time.Second

// Runner runs a short program to its end and returns its stderr; an
// error unless it exited 0. The helper's reaper owns every child, so the
// helper passes one that waits through it (process.Run); shield starts it
// through the shim's shield mode (process.ProbeSandbox).
type Runner func(cmd *exec.Cmd, shield bool) (stderr []byte, err error)

// ProbeBubblewrap looks bwrap up on path (the helper's PATH) and runs it,
// through run, once with what every confinement needs: a read-only root,
// a tmpfs and a private network namespace. It fails where user namespaces
// are off. shim is the inner path of the process layer's native shim
// (process.InnerShim), or "".
func ProbeBubblewrap(path, shim string, run Runner) Probe {
	bin, err := lookPath("bwrap", path)
	if err != nil {
		return Probe{Reason: "bwrap is not installed (not found on PATH)"}
	}
	cmd := exec.Command(bin, slices.Concat(boxBase, []string{"--tmpfs", "/tmp", "--unshare-net", "--", "/bin/sh", "-c", ":"})...)
	if stderr, err := run(cmd, false); err != nil {
		msg := strings.TrimSpace(string(stderr))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if msg == "" {
			msg = err.Error()
		}
		return Probe{Reason: "bwrap cannot confine a command here: " + msg}
	}
	p := Probe{Path: bin}
	if shim != "" {
		cmd := exec.Command(bin, slices.Concat(boxBase, []string{"--", shim, "-d", "/bin/sh", "sh", "-c", shieldCheck})...)
		if _, err := run(cmd, true); err == nil {
			p.Shim = shim
			return p
		}
	}
	if env, err := lookPath("env", path); err == nil {
		cmd := exec.Command(env, slices.Concat([]string{"--ignore-signal=" + shielded, bin}, boxBase, []string{"--", env, "--default-signal=" + shielded, "/bin/sh", "-c", shieldCheck})...)
		if _, err := run(cmd, false); err == nil {
			p.Env = env
		}
	}
	return p
}

func lookPath(name, path string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		c := filepath.Join(d, name)
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// Box is one execution's bubblewrap confinement: the options that build
// its mount namespace. Release it at settlement.
type Box struct {
	bwrap string
	shim  string // the native shim's inner path, which shields bwrap, or ""
	env   string // else env(1) that shields bwrap from group signals, or ""
	args  []string
	// made are protected paths that did not exist inside a writable
	// root: bwrap creates them on the host as mount points, and Release
	// removes them again when no other box uses them.
	made []madePath
	// hidden are the host paths the box covers with something else (a
	// tmpfs, an empty stand-in): what lies under them is not there inside.
	hidden []string
}

// madePath is a mount point bwrap makes: path, and top, the highest of
// its directories that did not exist before.
type madePath struct{ path, top string }

func missingTop(p string) string {
	top := p
	for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		top = d
	}
	return top
}

// emptyFile is the read-only stand-in for an inaccessible file.
const emptyFile = "sandbox-empty"

// NewBox builds the confinement of applied (a resolved policy) for the
// probed bwrap; scratch, when set, stays writable whatever covers it.
// stateDir holds the empty stand-in file for inaccessible files. locked
// are the helper's control paths among the inaccessible ones (Where's
// Control): a directory of them is covered by a tmpfs of mode 0000, so
// the command cannot even list it, unless it holds the scratch directory.
func NewBox(p Probe, applied Policy, scratch, stateDir string, locked []string) (*Box, error) {
	b := &Box{bwrap: p.Path, shim: p.Shim, env: p.Env}
	a := slices.Clone(boxBase)
	if applied.Network == NetworkDeny {
		a = append(a, "--unshare-net")
	}
	for _, w := range byDepth(applied.WritableRoots) {
		a = append(a, "--bind", w, w)
	}
	// A path that does not exist needs a mount point only where the
	// command could otherwise create it.
	creatable := func(p string) bool {
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil {
				return applied.Writable(d)
			}
			if d == "/" {
				return false
			}
		}
	}
	var remount []string
	for _, r := range byDepth(applied.ReadOnlyPaths) {
		switch _, err := os.Lstat(r); {
		case err == nil:
			a = append(a, "--ro-bind", r, r)
		case creatable(r):
			a = append(a, "--tmpfs", r)
			b.hidden = append(b.hidden, r)
			remount = append(remount, r)
			b.made = append(b.made, madePath{r, missingTop(r)})
		}
	}
	var empty string
	b.hidden = append(b.hidden, applied.InaccessiblePaths...)
	for _, p := range byDepth(applied.InaccessiblePaths) {
		fi, err := os.Stat(p)
		// A control path's tmpfs cannot even be listed, whether it
		// exists on the host or is only a mount point bwrap makes.
		lock := func() {
			if slices.Contains(locked, p) && (scratch == "" || !under(scratch, p)) {
				a = append(a, "--perms", "0000")
			}
		}
		switch {
		case err == nil && fi.IsDir():
			lock()
			a = append(a, "--tmpfs", p)
			remount = append(remount, p)
		case err == nil:
			if empty == "" {
				var eerr error
				if empty, eerr = emptyStandIn(stateDir); eerr != nil {
					return nil, eerr
				}
			}
			a = append(a, "--ro-bind", empty, p)
		case creatable(p):
			lock()
			a = append(a, "--tmpfs", p)
			remount = append(remount, p)
			b.made = append(b.made, madePath{p, missingTop(p)})
		}
	}
	// The scratch directory is always writable, even inside the hidden
	// state directory: bound before the tmpfs above it turns read-only.
	if scratch != "" && !applied.Writable(scratch) {
		a = append(a, "--bind", scratch, scratch)
	}
	for _, r := range remount {
		a = append(a, "--remount-ro", r)
	}
	b.args = a
	b.hold()
	return b, nil
}

// ShowsProgram reports whether the system program at path on the host is
// the same file inside the box: under /usr, /bin or /sbin, which every
// box binds read-only from the host, and under nothing the box hides.
// Only such a program is run there without bash (process/direct.go):
// anywhere else bash's own lookup inside the box decides.
func (b *Box) ShowsProgram(path string) bool {
	if !underAny(path, []string{"/usr", "/bin", "/sbin"}) {
		return false
	}
	for _, h := range b.hidden {
		if under(path, h) || under(h, path) {
			return false
		}
	}
	return true
}

// Wrap returns the command line that runs path with args (args[0] is the
// name the program sees) inside the box. Through the shim, it runs path
// as given; else bwrap runs args[0] with execvp on the command's own PATH
// from its working directory, which finds path again and keeps the name
// (Debian's bwrap has no --argv0). A box ShieldedByShim must be started
// through the shim's shield mode.
func (b *Box) Wrap(path string, args []string) (string, []string) {
	if len(args) == 0 {
		args = []string{path}
	}
	out := make([]string, 0, len(b.args)+len(args)+6)
	if b.shim != "" {
		out = append(out, b.bwrap)
		out = append(out, b.args...)
		out = append(out, "--", b.shim, "-d", path)
		return out[0], append(out, args...)
	}
	if b.env != "" {
		out = append(out, b.env, "--ignore-signal="+shielded)
	}
	out = append(out, b.bwrap)
	out = append(out, b.args...)
	out = append(out, "--")
	if b.env != "" {
		out = append(out, b.env, "--default-signal="+shielded)
	}
	return out[0], append(out, args...)
}

// ShieldedByShim reports whether the box's command line needs the shim's
// shield mode around it (see Wrap).
func (b *Box) ShieldedByShim() bool { return b.shim != "" }

// Args returns bwrap's options (for tests and the log).
func (b *Box) Args() []string { return b.args }

// mountPoints counts the boxes that use a mount point bwrap made on the
// host, so the last one to go removes it.
var mountPoints struct {
	mu    sync.Mutex
	users map[string]int
}

func (b *Box) hold() {
	mountPoints.mu.Lock()
	defer mountPoints.mu.Unlock()
	if mountPoints.users == nil {
		mountPoints.users = make(map[string]int)
	}
	for _, m := range b.made {
		mountPoints.users[m.path]++
	}
}

// Release removes the empty mount points this box made on the host, once
// no other box uses them, with the empty directories bwrap made above them.
func (b *Box) Release() {
	if b == nil {
		return
	}
	mountPoints.mu.Lock()
	defer mountPoints.mu.Unlock()
	for _, m := range b.made {
		mountPoints.users[m.path]--
		if mountPoints.users[m.path] > 0 {
			continue
		}
		delete(mountPoints.users, m.path)
		// os.Remove fails on a directory that holds anything: only what
		// bwrap made and nothing wrote goes.
		for d := m.path; under(d, m.top) && os.Remove(d) == nil; d = filepath.Dir(d) {
		}
	}
	b.made = nil
}

// emptyStandIn returns the empty read-only file bound over inaccessible
// files, in the state directory.
func emptyStandIn(stateDir string) (string, error) {
	p := filepath.Join(stateDir, emptyFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return "", fmt.Errorf("sandbox: %w", err)
	}
	f.Close()
	return p, nil
}

// byDepth orders paths so a parent's mount comes before a child's.
func byDepth(paths []string) []string {
	out := append([]string(nil), paths...)
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i], "/") < strings.Count(out[j], "/")
	})
	return out
}

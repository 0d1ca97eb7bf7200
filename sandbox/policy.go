// Package sandbox confines a local command: the policy a start asks for, its
// normalisation into mounts, the bubblewrap command line that applies them,
// a probe of whether bubblewrap works here, the denials a confined command
// met, and resource limits through cgroups or rlimits.
package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Mode says how much confinement a start insists on.
type Mode string

const (
	// Off runs the command unconfined: no boundary at all.
	Off Mode = "off"
	// BestEffort confines when a backend works and otherwise runs
	// unconfined, saying so in the facts.
	BestEffort Mode = "best-effort"
	// Required refuses the start when no backend works.
	Required Mode = "required"
)

// Network says whether a confined command may use the network.
type Network string

const (
	NetworkAllow Network = "allow"
	// NetworkDeny gives the command a private network namespace with only
	// loopback.
	NetworkDeny Network = "deny"
)

// Policy is the wire shape of the sandbox object of exec/start,
// monitor/start and session/open. Empty fields take the session's default,
// then the built-in one.
type Policy struct {
	Mode              Mode     `json:"mode,omitempty"`
	WritableRoots     []string `json:"writableRoots,omitempty"`
	ReadOnlyPaths     []string `json:"readOnlyPaths,omitempty"`
	InaccessiblePaths []string `json:"inaccessiblePaths,omitempty"`
	Network           Network  `json:"network,omitempty"`
}

// Over lays p over a default: each field p sets wins.
func (p *Policy) Over(def *Policy) Policy {
	var out Policy
	if def != nil {
		out = *def
	}
	if p == nil {
		return out
	}
	if p.Mode != "" {
		out.Mode = p.Mode
	}
	if p.Network != "" {
		out.Network = p.Network
	}
	if p.WritableRoots != nil {
		out.WritableRoots = p.WritableRoots
	}
	if p.ReadOnlyPaths != nil {
		out.ReadOnlyPaths = p.ReadOnlyPaths
	}
	if p.InaccessiblePaths != nil {
		out.InaccessiblePaths = p.InaccessiblePaths
	}
	return out
}

// Check validates the fields that need no file system: the mode, the
// network and that every path is absolute (or ~/...).
func (p Policy) Check() error {
	switch p.Mode {
	case "", Off, BestEffort, Required:
	default:
		return fmt.Errorf("sandbox.mode must be %q, %q or %q, got %q", Off, BestEffort, Required, p.Mode)
	}
	switch p.Network {
	case "", NetworkAllow, NetworkDeny:
	default:
		return fmt.Errorf("sandbox.network must be %q or %q, got %q", NetworkAllow, NetworkDeny, p.Network)
	}
	for name, list := range map[string][]string{"writableRoots": p.WritableRoots, "readOnlyPaths": p.ReadOnlyPaths, "inaccessiblePaths": p.InaccessiblePaths} {
		for _, q := range list {
			if q == "" || strings.ContainsRune(q, 0) || !(filepath.IsAbs(q) || q == "~" || strings.HasPrefix(q, "~/")) {
				return fmt.Errorf("sandbox.%s: %q is not an absolute path", name, q)
			}
		}
	}
	return nil
}

// Where is what the defaults and relative forms are resolved against.
type Where struct {
	Home     string // the person's home: ~ and the protected defaults
	StateDir string // the helper's state directory, always inaccessible
	// Control is the rest of the helper's control plane, always
	// inaccessible too: the daemon's directories (ControlDirs), every
	// session's state directory, a --listen socket.
	Control []string

	offOnly bool // ResolveMode's: an Off policy's other paths are left out
}

// ResolveMode is Resolve for a start that only needs the mode when it is
// Off: such a policy is checked as Resolve checks it (writable roots
// included), and the paths nothing will apply are not resolved, which
// would cost a stat of every component of each. Any other mode is
// resolved whole.
func (p Policy) ResolveMode(w Where) (Policy, error) {
	w.offOnly = true
	return p.Resolve(w)
}

// OwnDir is the name of mevedel-exec's own directory under
// $XDG_RUNTIME_DIR and ~/.cache: the daemon's socket, lock and log, and
// on an SSH host the agent's builds.
const OwnDir = "mevedel-exec"

// ControlDirs returns both places the daemon's directory can be, hidden
// in every box whichever one a daemon uses now: a command must not reach
// a daemon's socket and drive unconfined commands through it.
func ControlDirs(home, runtimeDir string) []string {
	var out []string
	if runtimeDir != "" && filepath.IsAbs(runtimeDir) {
		out = append(out, filepath.Join(runtimeDir, OwnDir))
	}
	if home != "" {
		out = append(out, filepath.Join(home, ".cache", OwnDir))
	}
	return out
}

// Resolve checks p and returns the policy as applied: mode and network
// filled in, paths absolute and clean with symbolic links resolved, the
// defaults added (a repository's .git read-only, ~/.ssh, ~/.gnupg and the
// state directory inaccessible). A writable root must exist.
func (p Policy) Resolve(w Where) (Policy, error) {
	if err := p.Check(); err != nil {
		return Policy{}, err
	}
	out := Policy{Mode: p.Mode, Network: p.Network}
	if out.Mode == "" {
		out.Mode = Off
	}
	if out.Network == "" {
		out.Network = NetworkAllow
	}
	for _, q := range p.WritableRoots {
		r := realPath(expand(q, w.Home))
		fi, err := os.Stat(r)
		if err != nil {
			return Policy{}, fmt.Errorf("sandbox.writableRoots: %s: %w", q, err)
		}
		if !fi.IsDir() {
			return Policy{}, fmt.Errorf("sandbox.writableRoots: %s is not a directory", q)
		}
		out.WritableRoots = appendNew(out.WritableRoots, r)
	}
	if out.Mode == Off && w.offOnly {
		return out, nil
	}
	for _, q := range p.ReadOnlyPaths {
		out.ReadOnlyPaths = appendNew(out.ReadOnlyPaths, realPath(expand(q, w.Home)))
	}
	for _, r := range out.WritableRoots {
		if g := gitDirOf(r); g != "" {
			out.ReadOnlyPaths = appendNew(out.ReadOnlyPaths, g)
		}
	}
	for _, q := range p.InaccessiblePaths {
		out.InaccessiblePaths = appendNew(out.InaccessiblePaths, realPath(expand(q, w.Home)))
	}
	if w.Home != "" {
		for _, d := range []string{".ssh", ".gnupg"} {
			out.InaccessiblePaths = appendNew(out.InaccessiblePaths, realPath(filepath.Join(w.Home, d)))
		}
	}
	if w.StateDir != "" {
		out.InaccessiblePaths = appendNew(out.InaccessiblePaths, realPath(w.StateDir))
	}
	for _, c := range w.Control {
		if c != "" && filepath.IsAbs(c) {
			out.InaccessiblePaths = appendNew(out.InaccessiblePaths, realPath(c))
		}
	}
	return out, nil
}

// Writable reports whether the applied policy lets the command write at
// path (absolute, clean): under a writable root and under no protected path.
func (p Policy) Writable(path string) bool {
	return underAny(path, p.WritableRoots) && !underAny(path, p.ReadOnlyPaths) && !underAny(path, p.InaccessiblePaths)
}

// Hidden reports whether path lies under an inaccessible path.
func (p Policy) Hidden(path string) bool { return underAny(path, p.InaccessiblePaths) }

func expand(p, home string) string {
	if p == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(home, rest)
	}
	return filepath.Clean(p)
}

// realPath resolves the symbolic links of the longest existing prefix of
// p: a mount applies to where a link leads, and the rest cannot be a link
// yet.
func realPath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// gitDirOf returns the .git of the repository that contains dir, or "".
func gitDirOf(dir string) string {
	for d := dir; ; {
		g := filepath.Join(d, ".git")
		if _, err := os.Lstat(g); err == nil {
			return g
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

func appendNew(list []string, p string) []string {
	if slices.Contains(list, p) {
		return list
	}
	return append(list, p)
}

// under reports whether p is root or inside it.
func under(p, root string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if under(p, r) {
			return true
		}
	}
	return false
}

// Locked returns the inaccessible paths of applied that are control
// paths (as Resolve resolved them), for NewBox to lock.
func Locked(applied Policy, control []string) []string {
	var out []string
	for _, c := range control {
		if c == "" || !filepath.IsAbs(c) {
			continue
		}
		if r := realPath(c); slices.Contains(applied.InaccessiblePaths, r) {
			out = appendNew(out, r)
		}
	}
	return out
}

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
)

// Denial is one access the sandbox refused: what the model can act on
// (ask for the path as a writable root, or do without it).
type Denial struct {
	Path      string `json:"path"`
	Operation string `json:"operation"` // "write" or "read"
}

// MaxDenials bounds the list: a few say what to ask for.
const MaxDenials = 16

// errno texts as the C library and bubblewrap print them.
const (
	textROFS   = "Read-only file system"
	textAccess = "Permission denied"
	textPerm   = "Operation not permitted"
	textNoEnt  = "No such file or directory"
)

// Denials reads a confined command's output for errors on paths the
// applied policy protects. Only what the output names and the policy
// explains is reported: a write refused under a path the command may not
// write, or a path that exists but is hidden. cwd resolves relative paths.
func Denials(output, cwd string, applied Policy) []Denial {
	var out []Denial
	seen := make(map[Denial]bool)
	for line := range strings.Lines(output) {
		var op string
		switch {
		case strings.Contains(line, textROFS), strings.Contains(line, textAccess), strings.Contains(line, textPerm):
			op = "write"
		case strings.Contains(line, textNoEnt):
			op = "read"
		default:
			continue
		}
		for _, c := range pathsIn(line) {
			p := c
			if !filepath.IsAbs(p) {
				if cwd == "" {
					continue
				}
				p = filepath.Join(cwd, p)
			}
			p = realPath(p)
			if !denied(p, op, applied) {
				continue
			}
			d := Denial{Path: p, Operation: op}
			if seen[d] {
				continue
			}
			seen[d] = true
			out = append(out, d)
			if len(out) == MaxDenials {
				return out
			}
		}
	}
	return out
}

// denied says whether the policy explains the error: a write where the
// command may not write, a read of a hidden path that exists on the host.
func denied(p, op string, a Policy) bool {
	if op == "write" {
		return !a.Writable(p)
	}
	if !a.Hidden(p) {
		return false
	}
	if strings.ContainsAny(p, "*?[") {
		m, _ := filepath.Glob(p)
		return len(m) > 0
	}
	_, err := os.Lstat(p)
	return err == nil
}

// pathsIn returns the quoted strings of an error line and its unquoted
// fields that look like paths ("bash: /x/y: Read-only file system").
func pathsIn(line string) []string {
	line = strings.TrimRight(line, "\r\n")
	var out []string
	rest := line
	for {
		i := strings.IndexAny(rest, "'‘\"`")
		if i < 0 {
			break
		}
		open, size := rest[i], 1
		closing := string(open)
		switch {
		case strings.HasPrefix(rest[i:], "‘"):
			closing, size = "’", len("‘")
		case open == '`':
			closing = "'"
		}
		j := strings.Index(rest[i+size:], closing)
		if j < 0 {
			break
		}
		if q := rest[i+size : i+size+j]; q != "" {
			out = append(out, q)
		}
		rest = rest[i+size+j+len(closing):]
	}
	for _, f := range strings.Split(line, ": ") {
		f = strings.TrimSpace(f)
		if k := strings.LastIndexByte(f, ' '); k >= 0 {
			f = f[k+1:]
		}
		if strings.HasPrefix(f, "/") || strings.HasPrefix(f, "./") || strings.HasPrefix(f, "../") {
			out = append(out, f)
		}
	}
	return out
}

package spool

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"golang.org/x/sys/unix"
)

// The names come from the state directory's layout.
const (
	addrScheme = statedir.Scheme
	logDir     = statedir.LogDir
	logExt     = statedir.LogExt
	// gzExt is added to a logical file name for its retired form.
	gzExt = ".gz"
)

// ParseAddress checks an output address and returns its logical name. The
// accepted forms are "artifact://executions/<file>.log" and the bare logical
// name "executions/<file>.log", where <file> is one path element of letters,
// digits and "-_.+@=,". Everything else is refused (fault.Refused) with a
// message saying why: another scheme, an absolute path, "..", a directory
// other than executions/, a subdirectory, a NUL byte. Only the form is
// checked here; Dir.ParseAddress also checks the file system.
func ParseAddress(addr string) (string, error) {
	rest, ok := strings.CutPrefix(addr, addrScheme)
	switch {
	case strings.IndexByte(addr, 0) >= 0:
		return "", refused("address contains a NUL byte")
	case addr == "":
		return "", refused("address is empty")
	case !ok && hasScheme(addr):
		return "", refused("address has an unknown scheme; only %s is accepted", addrScheme)
	case strings.HasPrefix(rest, "/"):
		return "", refused("address is an absolute path; addresses are relative to the state directory")
	case strings.Contains(rest, ".."):
		return "", refused("address contains \"..\"")
	}
	dir, file, ok := strings.Cut(rest, "/")
	if !ok || dir != logDir {
		return "", refused("address is outside %s/; only execution logs can be addressed", logDir)
	}
	if strings.Contains(file, "/") {
		return "", refused("address names a subdirectory of %s/", logDir)
	}
	if len(file) <= len(logExt) || !strings.HasSuffix(file, logExt) {
		return "", refused("address does not name a %s file", logExt)
	}
	for i := 0; i < len(file); i++ {
		if !nameByte(file[i]) {
			return "", refused("address contains a character not allowed in a log name")
		}
	}
	return logDir + "/" + file, nil
}

// ParseAddress is ParseAddress plus the file system: it also refuses a name
// whose raw or compressed file is a symbolic link (saying so when the link
// points outside the executions directory), and a state or executions
// directory that is a symbolic link or was replaced. A well-formed name
// with no file is not an error here; opening it is (fault.NotFound).
func (d *Dir) ParseAddress(addr string) (string, error) {
	name, err := ParseAddress(addr)
	if err != nil {
		return "", err
	}
	dir, err := d.openExec()
	if err != nil {
		if errors.Is(err, errNoLogs) {
			return name, nil
		}
		return "", err
	}
	defer dir.Close()
	p := d.paths(name)
	for _, f := range []string{baseName(p.raw), baseName(p.gz)} {
		st, err := dir.lstat(f)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			continue
		}
		if !d.inside(dir, f) {
			return "", refused("%s resolves outside %s/ through a symbolic link", name, logDir)
		}
		return "", refused("%s is a symbolic link", name)
	}
	return name, nil
}

// inside reports whether the symbolic link file of dir names a file of
// the executions directory itself. It only chooses the wording of a
// refusal: nothing is read through the link.
func (d *Dir) inside(dir *execDir, file string) bool {
	target, err := dir.readlink(file)
	if err != nil {
		return false
	}
	if filepath.IsAbs(target) {
		if target, err = filepath.Rel(d.execDir, target); err != nil {
			return false
		}
	}
	target = filepath.Clean(target)
	return target != "." && target != ".." && !strings.Contains(target, string(filepath.Separator))
}

// hasScheme reports whether s starts with "scheme:" (a colon before any
// slash), as "file:///x" and "http:x" do.
func hasScheme(s string) bool {
	i := strings.IndexByte(s, ':')
	return i >= 0 && !strings.Contains(s[:i], "/")
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.+@=,", c) >= 0
}

func refused(format string, args ...any) error {
	return fault.New(fault.Refused, "spool: "+format, args...)
}

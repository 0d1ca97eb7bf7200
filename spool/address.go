package spool

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
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
// resolves outside the executions directory), and an executions directory
// that is itself a symbolic link. A well-formed name with no file is not an
// error here; opening it is (fault.NotFound).
func (d *Dir) ParseAddress(addr string) (string, error) {
	name, err := ParseAddress(addr)
	if err != nil {
		return "", err
	}
	if err := d.checkExecDir(); err != nil {
		return "", err
	}
	p := d.paths(name)
	for _, path := range []string{p.raw, p.gz} {
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			continue
		}
		if !d.inside(path) {
			return "", refused("%s resolves outside %s/ through a symbolic link", name, logDir)
		}
		return "", refused("%s is a symbolic link", name)
	}
	return name, nil
}

// inside reports whether the symbolic link at path resolves to a file in
// the executions directory.
func (d *Dir) inside(path string) bool {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	dir, err := filepath.EvalSymlinks(d.execDir)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(dir, target)
	return err == nil && rel != "." && !strings.Contains(rel, string(filepath.Separator)) && rel != ".."
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

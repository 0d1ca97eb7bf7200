package spool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Dir is the execution logs of one state directory, addressed by logical
// name ("executions/<id>.log") whatever their physical form: the raw spool
// file <stateDir>/executions/<id>.log, or once retired the compressed
// <id>.log.gz with its index <id>.log.gzi. A Dir only holds paths; leases
// live in a process-wide registry keyed by file path, so every Dir made for
// the same state directory path sees the same leases.
type Dir struct {
	stateDir string
	execDir  string

	// beforeVerify, when set (tests only), runs on the temporary compressed
	// file after it is written and before it is verified.
	beforeVerify func(tmpPath string) error
}

// NewDir returns the Dir of stateDir. Nothing is touched on disk.
func NewDir(stateDir string) *Dir {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	stateDir = filepath.Clean(stateDir)
	return &Dir{stateDir: stateDir, execDir: filepath.Join(stateDir, logDir)}
}

// StateDir returns the state directory, made absolute.
func (d *Dir) StateDir() string { return d.stateDir }

// logPaths are the physical files of one logical name.
type logPaths struct {
	raw    string // <id>.log
	gz     string // <id>.log.gz
	gzi    string // <id>.log.gzi
	tmp    string // <id>.log.gz.tmp
	gziTmp string // <id>.log.gzi.tmp
}

// paths maps a logical name (already checked by ParseAddress) to its files.
func (d *Dir) paths(name string) logPaths {
	raw := filepath.Join(d.execDir, strings.TrimPrefix(name, logDir+"/"))
	return logPaths{
		raw:    raw,
		gz:     raw + gzExt,
		gzi:    raw + ".gzi",
		tmp:    raw + gzExt + ".tmp",
		gziTmp: raw + ".gzi.tmp",
	}
}

// checkExecDir refuses an executions directory that is a symbolic link,
// since following it would read outside the state directory. A missing
// directory is fine here: the file opens will report the name as unknown.
func (d *Dir) checkExecDir() error {
	st, err := os.Lstat(d.execDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return ioErr("stat", d.execDir, err)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return refused("%s/ is a symbolic link", logDir)
	}
	if !st.IsDir() {
		return refused("%s/ is not a directory", logDir)
	}
	return nil
}

// leaseRegistry counts the readers of each log, keyed by the raw file's
// path, and remembers a raw file whose removal waits for them.
type leaseRegistry struct {
	mu sync.Mutex
	m  map[string]*leaseEntry
}

type leaseEntry struct {
	n        int         // leases held
	retiring bool        // a Retire of this log is running
	pending  os.FileInfo // raw file to remove when n drops to 0, or nil
	gz       string      // the compressed file that replaces it
}

var leases = leaseRegistry{m: map[string]*leaseEntry{}}

// entry returns key's entry, creating it. The caller holds r.mu.
func (r *leaseRegistry) entry(key string) *leaseEntry {
	e := r.m[key]
	if e == nil {
		e = &leaseEntry{}
		r.m[key] = e
	}
	return e
}

// tidy drops key's entry once nothing refers to it. The caller holds r.mu.
func (r *leaseRegistry) tidy(key string, e *leaseEntry) {
	if e.n == 0 && !e.retiring && e.pending == nil {
		delete(r.m, key)
	}
}

// Lease takes a reader's lease on a logical name (or address): while any
// lease is held, retirement leaves the raw file in place, and releasing the
// last lease removes a raw file whose retirement finished meanwhile. The
// returned release is idempotent and safe for concurrent use. The name need
// not exist; Open takes a lease itself.
func (d *Dir) Lease(name string) (release func(), err error) {
	name, err = ParseAddress(name)
	if err != nil {
		return nil, err
	}
	return d.lease(d.paths(name)), nil
}

func (d *Dir) lease(p logPaths) func() {
	key := p.raw
	leases.mu.Lock()
	leases.entry(key).n++
	leases.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { d.release(key) }) }
}

// release drops one lease on key and, when it was the last, performs a
// deferred raw removal. The unlink happens under the registry lock so no
// reader can lease the raw file between the check and the removal; the
// file's blocks are freed after it, when removeRaw's descriptor is closed.
func (d *Dir) release(key string) {
	leases.mu.Lock()
	e := leases.m[key]
	e.n--
	var removed *os.File
	if e.n == 0 && e.pending != nil {
		removed, _ = removeRaw(key, e.gz, e.pending) // on failure the raw file stays, still preferred
		e.pending = nil
	}
	leases.tidy(key, e)
	leases.mu.Unlock()
	if removed != nil {
		removed.Close()
		syncDir(filepath.Dir(key))
	}
}

// removeRaw removes the raw file at path if it is still the file described
// by was (same file, size and modification time) and its compressed
// replacement gz is in place; otherwise it leaves it. It returns the removed
// file open, for the caller to close: the last close frees its blocks,
// which takes a while for a large file.
func removeRaw(path, gz string, was os.FileInfo) (*os.File, error) {
	f, st, err := openNoFollow(path, path)
	if err != nil {
		return nil, err
	}
	if !unchanged(st, was) {
		f.Close()
		return nil, fault.New(fault.IO, "spool: %s changed after it was compressed; kept", path)
	}
	if g, err := os.Lstat(gz); err != nil || !g.Mode().IsRegular() {
		f.Close()
		return nil, fault.New(fault.IO, "spool: %s has no compressed copy; kept", path)
	}
	if err := os.Remove(path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// unchanged reports whether now describes the same file as was, with the
// same size and modification time.
func unchanged(now, was os.FileInfo) bool {
	return os.SameFile(now, was) && now.Size() == was.Size() && now.ModTime().Equal(was.ModTime())
}

// openNoFollow opens path for reading without following a symbolic link
// (fault.Refused), and refuses anything but a regular file. O_NONBLOCK
// keeps a planted FIFO from blocking the open; it means nothing for a
// regular file. A missing file is returned as the os error, so callers can
// test it with fs.ErrNotExist.
func openNoFollow(path, name string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, refused("%s is a symbolic link", name)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		return nil, nil, ioErr("open", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, ioErr("stat", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, refused("%s is not a regular file", name)
	}
	return f, st, nil
}

// createPrivate creates path (which must not exist) for writing, mode 0600.
func createPrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, ioErr("create", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(path)
		return nil, ioErr("chmod", path, err)
	}
	return f, nil
}

// syncDir flushes a directory's entries (after renames and removals).
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return ioErr("open", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return ioErr("sync", dir, err)
	}
	return nil
}

func notFound(name string) error {
	return fault.New(fault.NotFound, "spool: no execution log %s", name)
}

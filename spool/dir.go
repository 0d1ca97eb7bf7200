package spool

import (
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"golang.org/x/sys/unix"
)

// Dir is the execution logs of one state directory, addressed by logical
// name ("executions/<id>.log") whatever their physical form: the raw spool
// file <stateDir>/executions/<id>.log, or once retired the compressed
// <id>.log.gz with its index <id>.log.gzi. A Dir holds paths and the
// identities of its two directories (see beneath.go); leases live in a
// process-wide registry keyed by file path, so every Dir made for the same
// state directory path sees the same leases.
type Dir struct {
	stateDir string
	execDir  string
	ids      dirIDs
	spare    spare // the next Create's file, made ahead (beneath.go)

	// beforeVerify, when set (tests only), runs on the temporary compressed
	// file after it is written and before it is verified.
	beforeVerify func(tmpPath string) error
	// blockBytes, when set (tests only), is the size of grepBlocks' blocks
	// in place of grepChunk: small logs then cross many block boundaries.
	blockBytes int
}

// NewDir returns the Dir of stateDir. It records the identities (device
// and inode) of the state directory and its executions/ directory, those
// that exist, so that one replaced later is refused; nothing is written.
func NewDir(stateDir string) *Dir {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	stateDir = filepath.Clean(stateDir)
	d := &Dir{stateDir: stateDir, execDir: filepath.Join(stateDir, logDir), spare: spare{fd: -1}}
	d.recordIDs()
	return d
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

// baseName is the name of path in the executions directory.
func baseName(path string) string { return filepath.Base(path) }

// leaseRegistry counts the readers of each log, keyed by the raw file's
// path, and remembers a raw file whose removal waits for them.
type leaseRegistry struct {
	mu sync.Mutex
	m  map[string]*leaseEntry
}

type leaseEntry struct {
	n        int          // leases held
	retiring bool         // a Retire of this log is running
	pending  *unix.Stat_t // raw file to remove when n drops to 0, or nil
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
	var dir *execDir
	if e.n == 0 && e.pending != nil {
		// On any failure the raw file stays, still preferred by readers.
		if x, err := d.openExec(); err == nil {
			dir = x
			removed, _ = removeRaw(dir, baseName(key), e.pending)
		}
		e.pending = nil
	}
	leases.tidy(key, e)
	leases.mu.Unlock()
	if removed != nil {
		removed.Close()
		dir.sync()
	}
	if dir != nil {
		dir.Close()
	}
}

// removeRaw removes the raw file raw of dir if it is still the file
// described by was (same file, size and modification time) and its
// compressed replacement is in place; otherwise it leaves it. It returns
// the removed file open, for the caller to close: the last close frees its
// blocks, which takes a while for a large file.
func removeRaw(dir *execDir, raw string, was *unix.Stat_t) (*os.File, error) {
	f, st, err := dir.open(raw, raw)
	if err != nil {
		return nil, err
	}
	if !unchanged(st, was) {
		f.Close()
		return nil, fault.New(fault.IO, "spool: %s changed after it was compressed; kept", raw)
	}
	if g, err := dir.lstat(raw + gzExt); err != nil || logFile(g, raw+gzExt) != nil {
		f.Close()
		return nil, fault.New(fault.IO, "spool: %s has no compressed copy; kept", raw)
	}
	if err := dir.remove(raw); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// unchanged reports whether now describes the same file as was, with the
// same size and modification time.
func unchanged(now, was *unix.Stat_t) bool {
	return idOf(now) == idOf(was) && now.Size == was.Size && now.Mtim == was.Mtim
}

func notFound(name string) error {
	return fault.New(fault.NotFound, "spool: no execution log %s", name)
}

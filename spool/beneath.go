package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"golang.org/x/sys/unix"
)

// Every file of a log is reached from descriptors, never by a path that
// could be swapped between a check and a use: each operation opens the
// state directory and checks it against the identity the Dir recorded,
// opens executions/ beneath it and checks that too, and then opens each
// file by its one name beneath that, following no symbolic link anywhere.
// A file with more than one link is refused: a hard link planted to a file
// elsewhere would otherwise be read as a log.

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: st.Ino} }

// dirIDs are the identities of the state directory and its executions/
// directory, recorded when the Dir is made or, for one that did not exist
// yet, when it is first seen; fixed from then on.
type dirIDs struct {
	mu          sync.Mutex
	state, exec *fileID
}

// same records id in *slot if it is empty and reports whether it matches.
func (ids *dirIDs) same(slot **fileID, id fileID) bool {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if *slot == nil {
		*slot = &id
		return true
	}
	return **slot == id
}

// recordIDs takes the identities of the directories that exist now.
func (d *Dir) recordIDs() {
	var st unix.Stat_t
	if unix.Lstat(d.stateDir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	d.ids.same(&d.ids.state, idOf(&st))
	if unix.Lstat(d.execDir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		d.ids.same(&d.ids.exec, idOf(&st))
	}
}

// errNoLogs says that the state directory or its executions/ directory
// does not exist: there are no logs (yet).
var errNoLogs = errors.New("spool: no executions directory")

// execDir is the executions directory opened for one operation.
type execDir struct {
	f    *os.File
	fd   int
	path string
}

func (e *execDir) Close() error { return e.f.Close() }

// openExec opens the executions directory beneath the state directory and
// checks both against their recorded identities. A missing one is
// errNoLogs; a symbolic link, a non-directory or a replaced directory is
// refused (fault.Refused).
func (d *Dir) openExec() (*execDir, error) {
	sfd, err := openNoInterrupt(func() (int, error) {
		return unix.Open(d.stateDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, d.dirErr(err, "the state directory", func(st *unix.Stat_t) error { return unix.Lstat(d.stateDir, st) })
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return nil, ioErr("stat", d.stateDir, err)
	}
	if !d.ids.same(&d.ids.state, idOf(&st)) {
		return nil, refused("the state directory %s was replaced after it was opened", d.stateDir)
	}
	efd, err := openBeneath(sfd, logDir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, d.dirErr(err, logDir+"/", func(st *unix.Stat_t) error {
			return unix.Fstatat(sfd, logDir, st, unix.AT_SYMLINK_NOFOLLOW)
		})
	}
	if err := unix.Fstat(efd, &st); err != nil {
		unix.Close(efd)
		return nil, ioErr("stat", d.execDir, err)
	}
	if !d.ids.same(&d.ids.exec, idOf(&st)) {
		unix.Close(efd)
		return nil, refused("%s/ was replaced after the state directory was opened", logDir)
	}
	return &execDir{f: os.NewFile(uintptr(efd), d.execDir), fd: efd, path: d.execDir}, nil
}

// dirErr explains a failed open of a directory: missing is errNoLogs, a
// link or a non-directory is refused (lstat tells which), the rest is IO.
func (d *Dir) dirErr(err error, what string, lstat func(*unix.Stat_t) error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return errNoLogs
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR):
		var st unix.Stat_t
		if lstat(&st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return refused("%s is a symbolic link", what)
		}
		if errors.Is(err, unix.ENOTDIR) {
			return refused("%s is not a directory", what)
		}
		return refused("%s is reached through a symbolic link", what)
	}
	return ioErr("open", what, err)
}

// noOpenat2 is set once openat2 turns out to be unavailable (an older
// kernel, or a seccomp filter that refuses it); tests set it to exercise
// the fallback.
var noOpenat2 atomic.Bool

// openBeneath opens the single path element name in the directory dirfd
// without following a symbolic link: with openat2 and RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS where the kernel has it, else with openat and
// O_NOFOLLOW, which for one element is the same guarantee.
func openBeneath(dirfd int, name string, flags int, mode uint32) (int, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return -1, fmt.Errorf("spool: %q is not one path element: %w", name, unix.EINVAL)
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		fd, err := openNoInterrupt(func() (int, error) { return unix.Openat2(dirfd, name, &how) })
		if err != unix.ENOSYS && err != unix.EPERM {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	return openNoInterrupt(func() (int, error) { return unix.Openat(dirfd, name, flags, mode) })
}

// openNoInterrupt retries an open that a signal interrupted, or that
// openat2 asks to retry (EAGAIN: a rename raced its lookup).
func openNoInterrupt(open func() (int, error)) (int, error) {
	for range 100 {
		fd, err := open()
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
	return open()
}

// lstat describes the file name of e without following a link. A missing
// file is an error matching fs.ErrNotExist.
func (e *execDir) lstat(file string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(e.fd, file, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fs.ErrNotExist
		}
		return nil, ioErr("stat", filepath.Join(e.path, file), err)
	}
	return &st, nil
}

// fstat describes the open file f.
func fstat(f *os.File) (*unix.Stat_t, error) {
	var st unix.Stat_t
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	if cerr := sc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) }); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, ioErr("stat", f.Name(), err)
	}
	return &st, nil
}

// logFile checks that st describes a file a log may be read from: a
// regular file with one link.
func logFile(st *unix.Stat_t, name string) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return refused("%s is a symbolic link", name)
	default:
		return refused("%s is not a regular file", name)
	}
	if st.Nlink != 1 {
		return refused("%s has %d links; a log has one", name, st.Nlink)
	}
	return nil
}

// open opens the file name of e for reading (name is what messages call
// it), refusing what logFile refuses. O_NONBLOCK keeps a planted FIFO from
// blocking the open; it means nothing for a regular file. A missing file is
// an error matching fs.ErrNotExist.
func (e *execDir) open(file, name string) (*os.File, *unix.Stat_t, error) {
	path := filepath.Join(e.path, file)
	fd, err := openBeneath(e.fd, file, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil, nil, fs.ErrNotExist
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return nil, nil, refused("%s is a symbolic link", name)
		}
		return nil, nil, ioErr("open", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, ioErr("stat", path, err)
	}
	if err := logFile(&st, name); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), path), &st, nil
}

// create creates the file name of e (which must not exist) for writing,
// mode 0600 whatever the umask.
func (e *execDir) create(file string) (*os.File, error) {
	path := filepath.Join(e.path, file)
	fd, err := openBeneath(e.fd, file, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o600)
	if err != nil {
		return nil, ioErr("create", path, err)
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		unix.Close(fd)
		e.remove(file)
		return nil, ioErr("chmod", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// remove removes the file name of e; a missing one is not an error.
func (e *execDir) remove(file string) error {
	if err := unix.Unlinkat(e.fd, file, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return ioErr("remove", filepath.Join(e.path, file), err)
	}
	return nil
}

// rename renames the file from of e to to, in e.
func (e *execDir) rename(from, to string) error {
	if err := unix.Renameat(e.fd, from, e.fd, to); err != nil {
		return ioErr("rename", filepath.Join(e.path, from), err)
	}
	return nil
}

// sync flushes the directory's entries (after renames and removals).
func (e *execDir) sync() error {
	if err := e.f.Sync(); err != nil {
		return ioErr("sync", e.path, err)
	}
	return nil
}

// readlink returns the target of the symbolic link name of e.
func (e *execDir) readlink(file string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(e.fd, file, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Create creates the log file (a name in executions/, which must not
// exist) beneath the state directory's descriptor, so a directory swapped
// for a link meanwhile cannot send the output elsewhere, and returns its
// spool capped at limit bytes (limit <= 0 means DefaultLimit).
func (d *Dir) Create(file string, limit int64) (*Spool, error) {
	if file == "" || strings.ContainsRune(file, '/') || file == "." || file == ".." {
		return nil, fault.New(fault.InvalidParams, "spool: %q is not a file name", file)
	}
	dir, err := d.openExec()
	if errors.Is(err, errNoLogs) {
		return nil, ioErr("create", filepath.Join(d.execDir, file), fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	defer d.makeSpare()
	path := filepath.Join(dir.path, file)
	remove := func() { dir.remove(file) }
	if fd := d.takeSpare(); fd >= 0 {
		// Named where the checked directory is: linkat does not follow
		// a link at the new name, and fails on one that exists.
		err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dir.fd, file, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return adopt(path, os.NewFile(uintptr(fd), path), limit, remove)
		}
		unix.Close(fd)
		if errors.Is(err, unix.EEXIST) {
			return nil, ioErr("create", path, err)
		}
		// Else (no /proc, say) as without a spare.
	}
	fd, err := openBeneath(dir.fd, file, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0o600)
	if err != nil {
		return nil, ioErr("create", path, err)
	}
	return adopt(path, os.NewFile(uintptr(fd), path), limit, remove)
}

// spare is an unnamed file (O_TMPFILE) made ahead in executions/, which
// the next Create names: allocating the inode is most of a create's cost
// on some file systems (ext4 on one machine: 0.3 ms of 0.37), and a start
// waits for its log. One never named vanishes with its descriptor.
type spare struct {
	mu     sync.Mutex
	fd     int  // -1 when there is none
	making bool // a goroutine is making one
	closed bool // Close came: no more
}

// takeSpare returns the spare's descriptor, or -1.
func (d *Dir) takeSpare() int {
	d.spare.mu.Lock()
	defer d.spare.mu.Unlock()
	fd := d.spare.fd
	d.spare.fd = -1
	return fd
}

// makeSpare makes the next spare in the background, unless one exists or
// is being made. A file system without O_TMPFILE just has none.
func (d *Dir) makeSpare() {
	d.spare.mu.Lock()
	if d.spare.fd >= 0 || d.spare.making || d.spare.closed {
		d.spare.mu.Unlock()
		return
	}
	d.spare.making = true
	d.spare.mu.Unlock()
	go func() {
		fd := -1
		if dir, err := d.openExec(); err == nil {
			if f, err := unix.Openat(dir.fd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600); err == nil {
				fd = f
			}
			dir.Close()
		}
		d.spare.mu.Lock()
		defer d.spare.mu.Unlock()
		d.spare.making = false
		if d.spare.closed || fd < 0 {
			if fd >= 0 {
				unix.Close(fd)
			}
			return
		}
		d.spare.fd = fd
	}()
}

// Close lets go of what the Dir holds ahead (its spare file); reads still
// work, a later Create makes its file the slow way.
func (d *Dir) Close() {
	d.spare.mu.Lock()
	defer d.spare.mu.Unlock()
	d.spare.closed = true
	if d.spare.fd >= 0 {
		unix.Close(d.spare.fd)
		d.spare.fd = -1
	}
}

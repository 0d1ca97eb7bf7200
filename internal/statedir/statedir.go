// Package statedir owns a session's state directory: its layout (where
// the journal, the lock and each execution's log live, how a log is
// addressed, how an execution's processes are tagged), and taking it for
// one helper (private directories, the lock, a fresh id prefix per open).
//
// Nothing else in the helper spells a path, an address or a tag by hand.
package statedir

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"golang.org/x/sys/unix"
)

const (
	// Scheme is the one scheme an output address uses.
	Scheme = "artifact://"
	// LogDir is the directory of the execution logs, and the only one a
	// logical name may live in.
	LogDir = "executions"
	// LogExt ends every logical name.
	LogExt = ".log"
	// LockFile is the flock that makes one helper the holder.
	LockFile = "lock"
	// ScratchDir holds the private scratch directories of executions that
	// asked for one, each removed at its execution's settlement.
	ScratchDir = "scratch"
	// TagVar is the environment variable that marks every process started
	// for an execution, TagVar=<prefix>-<id>: a descendant that leaves its
	// process group still carries it, which is how it is traced back.
	TagVar = "MEVEDEL_EXEC_TAG"
)

// Layout names the files of the state directory Root.
type Layout struct{ Root string }

// Executions is the directory of the execution logs.
func (l Layout) Executions() string { return filepath.Join(l.Root, LogDir) }

// LogPath is the raw log file of execution id.
func (l Layout) LogPath(id string) string { return filepath.Join(l.Root, LogName(id)) }

// Scratch is the scratch directory of execution id.
func (l Layout) Scratch(id string) string { return filepath.Join(l.Root, ScratchDir, id) }

// MakeScratch makes execution id's private scratch directory (0700, as is
// its parent) and returns its path.
func (l Layout) MakeScratch(id string) (string, error) {
	if err := makePrivateDir(filepath.Join(l.Root, ScratchDir)); err != nil {
		return "", err
	}
	dir := l.Scratch(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fault.New(fault.IO, "creating scratch directory %s: %w", dir, err)
	}
	return dir, nil
}

// LogName is the logical name of execution id's log: executions/<id>.log.
func LogName(id string) string { return LogDir + "/" + id + LogExt }

// IDOf is the execution id of a logical name.
func IDOf(name string) string {
	return strings.TrimSuffix(strings.TrimPrefix(name, LogDir+"/"), LogExt)
}

// Address is the full address of a logical name.
func Address(name string) string { return Scheme + name }

// LogAddress is the address of execution id's log.
func LogAddress(id string) string { return Address(LogName(id)) }

// ExecutionID is the id of the n-th execution of an open with prefix.
func ExecutionID(prefix string, n int) string { return fmt.Sprintf("exec-%s-%06d", prefix, n) }

// MonitorID is the id of the n-th monitor of an open with prefix.
func MonitorID(prefix string, n int) string { return fmt.Sprintf("mon-%s-%06d", prefix, n) }

// DeliveryID is the id of the n-th delivery of an open with prefix.
func DeliveryID(prefix string, n int) string { return fmt.Sprintf("dlv-%s-%06d", prefix, n) }

// PrefixOf extracts the open's id prefix from an execution id, "" when id
// is not one.
func PrefixOf(id string) string {
	parts := strings.Split(id, "-")
	if len(parts) != 3 || parts[0] != "exec" {
		return ""
	}
	return parts[1]
}

// Tag is the environment entry that marks every process of execution id,
// "" when id is not an execution id.
func Tag(id string) string {
	p := PrefixOf(id)
	if p == "" {
		return ""
	}
	return TagVar + "=" + p + "-" + id
}

// Dir is a state directory taken by this helper.
type Dir struct {
	Layout
	Prefix string // fresh for this open: no log in the directory uses it
	lock   *os.File
}

// Take makes root and its log directory (0700), takes the lock, and draws
// a fresh id prefix. Another helper holding root is a conflict.
func Take(root string) (*Dir, error) {
	l := Layout{Root: root}
	if err := makePrivateDir(root); err != nil {
		return nil, err
	}
	if err := makePrivateDir(l.Executions()); err != nil {
		return nil, err
	}
	lock, err := lockDir(root)
	if err != nil {
		return nil, err
	}
	return &Dir{Layout: l, Prefix: freshPrefix(l), lock: lock}, nil
}

// Release gives the directory back to other helpers.
func (d *Dir) Release() error { return d.lock.Close() }

func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fault.New(fault.IO, "creating %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fault.New(fault.IO, "%s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fault.New(fault.InvalidParams, "%s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fault.New(fault.IO, "making %s private: %w", dir, err)
		}
	}
	return nil
}

// lockDir takes the flock that makes one helper the holder of a state
// directory. The lock belongs to the open file description, so a second
// open in this same process conflicts too.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fault.New(fault.IO, "opening %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fault.New(fault.Conflict, "state directory %s is held by another helper (pid %s)", dir, strings.TrimSpace(string(holder)))
		}
		return nil, fault.New(fault.IO, "locking %s: %w", path, err)
	}
	_ = f.Chmod(0o600)
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// drawPrefix draws a candidate id prefix; a variable so a test can make
// the draw collide with a used one.
var drawPrefix = func() string { return randomLetters(5) }

// freshPrefix draws an id prefix that no log in the directory uses yet,
// so a reopened session never reuses an id.
func freshPrefix(l Layout) string {
	for {
		p := drawPrefix()
		if m, _ := filepath.Glob(filepath.Join(l.Executions(), "exec-"+p+"-*")); len(m) == 0 {
			return p
		}
	}
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// randomLetters returns n random lowercase letters and digits.
func randomLetters(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

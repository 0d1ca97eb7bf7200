package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// publish keeps the copy of a yielded execution's output where the
// agent runs, for a target with no SFTP (a container, sudo): r.Path as a
// start's directory is resolved (relative: under the home). An Offset
// below 0 asks for the copy's size; otherwise r.Data goes at r.Offset,
// after a copy longer than that is cut there, and a copy shorter than
// that is an error (the helper then starts again from the size it is
// told). The directories it makes are 0700, the file 0600, as over SFTP.
func (h *host) publish(r Request) Reply {
	abs := h.dir(r.Path)
	if r.Path == "" || abs == h.home {
		return Reply{Err: "publishing: no file named"}
	}
	if r.Offset < 0 {
		fi, err := os.Lstat(abs)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return Reply{Path: abs}
		case err != nil:
			return Reply{Err: err.Error()}
		case !fi.Mode().IsRegular():
			return Reply{Err: fmt.Sprintf("publishing: %s is not a regular file", abs)}
		}
		return Reply{Path: abs, Size: fi.Size()}
	}
	if err := mkdirs(filepath.Dir(abs)); err != nil {
		return Reply{Err: err.Error()}
	}
	f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return Reply{Err: err.Error()}
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return Reply{Err: err.Error()}
	case !fi.Mode().IsRegular():
		return Reply{Err: fmt.Sprintf("publishing: %s is not a regular file", abs)}
	case fi.Size() < r.Offset:
		return Reply{Err: fmt.Sprintf("publishing: %s holds %d bytes, fewer than the %d it is to be continued at", abs, fi.Size(), r.Offset), Path: abs, Size: fi.Size()}
	}
	// Private before a byte of output is in it.
	if fi.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			return Reply{Err: err.Error()}
		}
	}
	if fi.Size() > r.Offset {
		if err := f.Truncate(r.Offset); err != nil {
			return Reply{Err: err.Error()}
		}
	}
	if _, err := f.WriteAt(r.Data, r.Offset); err != nil {
		return Reply{Err: err.Error()}
	}
	if err := f.Close(); err != nil {
		return Reply{Err: err.Error()}
	}
	return Reply{Path: abs, Size: r.Offset + int64(len(r.Data))}
}

// mkdirs makes dir and its missing parents, each 0700.
func mkdirs(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("publishing: %s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o700)
}

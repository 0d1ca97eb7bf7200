package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/pkg/sftp"
)

// Publish makes remotePath on t a copy of src's first size bytes by
// appending what the remote file lacks: its current size n is kept and
// only [n, size) is sent, so publishing a growing output again costs only
// its new tail. A remote file longer than size is rewritten. Directories
// it creates are 0700, the file 0600. A relative remotePath (or one
// starting with "~/") is under the remote home. It returns the absolute
// remote path. A stream target (a container, sudo), which has no SFTP,
// has its host agent write the copy.
func (p *Pool) Publish(ctx context.Context, t Target, remotePath string, src io.ReaderAt, size int64) (string, error) {
	r, err := p.resolve(t)
	if err != nil {
		return "", err
	}
	if r.Stream() {
		return p.publishByAgent(ctx, r, remotePath, src, size)
	}
	var c *conn
	var sc *sftp.Client
	var home string
	err = p.withSession(ctx, r, (*conn).hasSFTP, func(cc *conn) error {
		var err error
		c = cc
		sc, home, err = c.sftpClient()
		if err != nil && !refusedAsFull(err) {
			err = roundTripError(c, r, fmt.Errorf("sftp: %w", err))
		}
		return err
	})
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		return "", roundTripError(c, r, fmt.Errorf("publishing %s: %w", remotePath, err))
	}
	abs := remotePath
	if rest, ok := strings.CutPrefix(abs, "~/"); ok {
		abs = rest
	}
	if !path.IsAbs(abs) {
		abs = path.Join(home, abs)
	}
	abs = path.Clean(abs)
	if err := mkdirs(sc, path.Dir(abs)); err != nil {
		return fail(err)
	}
	var n int64
	flags := os.O_WRONLY | os.O_CREATE
	fi, err := sc.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail(err)
	case !fi.Mode().IsRegular():
		return fail(fmt.Errorf("%s is not a regular file", abs))
	case fi.Size() > size:
		flags |= os.O_TRUNC // not a prefix of ours: start again
	default:
		n = fi.Size()
	}
	f, err := sc.OpenFile(abs, flags)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	// Private before a byte of output is in it.
	if fi == nil || fi.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			return fail(err)
		}
	}
	if n < size {
		if _, err := f.Seek(n, io.SeekStart); err != nil {
			return fail(err)
		}
		w, err := f.ReadFrom(&ctxReader{ctx: ctx, r: io.NewSectionReader(src, n, size-n)})
		p.published.Add(w)
		if err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	return abs, nil
}

// mkdirs creates dir and its missing parents, each 0700.
func mkdirs(sc *sftp.Client, dir string) error {
	fi, err := sc.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := path.Dir(dir); parent != dir {
		if err := mkdirs(sc, parent); err != nil {
			return err
		}
	}
	if err := sc.Mkdir(dir); err != nil {
		if fi, serr := sc.Stat(dir); serr == nil && fi.IsDir() {
			return nil // a concurrent publication made it
		}
		return err
	}
	return sc.Chmod(dir, 0o700)
}

// ctxReader stops a copy when ctx ends; Size lets sftp write concurrently.
type ctxReader struct {
	ctx context.Context
	r   *io.SectionReader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(b)
}

func (c *ctxReader) Size() int64 { return c.r.Size() }

func (c *conn) hasSFTP() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sftp != nil
}

// sftpClient returns the connection's SFTP client, starting it on first
// use, and the remote home (the server's starting directory).
func (c *conn) sftpClient() (*sftp.Client, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sftp != nil {
		return c.sftp, c.home, nil
	}
	sc, err := sftp.NewClient(c.client, sftp.UseConcurrentWrites(true))
	if err != nil {
		return nil, "", err
	}
	home, err := sc.Getwd()
	if err != nil {
		sc.Close()
		return nil, "", err
	}
	started := c.pool.spawn(func() {
		_ = sc.Wait()
		c.mu.Lock()
		if c.sftp == sc {
			c.sftp = nil
		}
		c.open--
		c.mu.Unlock()
	})
	if !started {
		sc.Close()
		return nil, "", errClosed
	}
	c.sftp, c.home = sc, home
	c.open++ // the subsystem's channel, open until the client ends
	return sc, home, nil
}

// publishChunk is the most output one request of a publication by the
// host agent carries.
const publishChunk = 1 << 20

// publishByAgent publishes as Publish does through r's host agent.
func (p *Pool) publishByAgent(ctx context.Context, r resolved, remotePath string, src io.ReaderAt, size int64) (string, error) {
	cl, err := p.streamAgent(ctx, r)
	if err != nil {
		return "", err
	}
	call := func(req agent.Request) (agent.Reply, error) {
		rep, err := cl.request(ctx, req)
		switch {
		case err != nil && ctx.Err() != nil:
			return rep, context.Cause(ctx)
		case err != nil:
			return rep, unavailablef("remote: %s: publishing %s: %v", r.Target, remotePath, err)
		case rep.Err != "":
			return rep, fmt.Errorf("remote: %s: %s", r.Target, rep.Err)
		}
		return rep, nil
	}
	rep, err := call(agent.Request{Op: agent.OpPublish, Path: remotePath, Offset: -1})
	if err != nil {
		return "", err
	}
	n := rep.Size
	if n > size {
		n = 0 // not a prefix of ours: start again
	}
	buf := make([]byte, min(publishChunk, max(size-n, 0)))
	for first := true; first || n < size; first = false {
		k := int(min(int64(len(buf)), size-n))
		if m, err := src.ReadAt(buf[:k], n); m < k {
			return "", fmt.Errorf("publishing %s: reading the output at %d: %w", remotePath, n, err)
		}
		if rep, err = call(agent.Request{Op: agent.OpPublish, Path: remotePath, Offset: n, Data: buf[:k]}); err != nil {
			return "", err
		}
		p.published.Add(int64(k))
		n = rep.Size
	}
	return rep.Path, nil
}

package spool

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"golang.org/x/sys/unix"
)

const (
	// MinRetireBytes and MaxRetireBytes bound the raw logs Retire
	// compresses; smaller and larger ones are skipped.
	MinRetireBytes = 64 << 10
	MaxRetireBytes = 64 << 20
	// DefaultMemberBytes is how much of the log each gzip member holds.
	DefaultMemberBytes = 1 << 20
)

// RetireOptions tunes Retire; the zero value is the normal setting.
type RetireOptions struct {
	// MemberBytes is the input size of each gzip member; <= 0 means
	// DefaultMemberBytes. Smaller members make range reads cheaper and
	// compression slightly worse.
	MemberBytes int
	// Background runs the compressing and verifying goroutines on threads
	// of lower CPU priority (nice 10), so retirement yields to requests.
	// The caller lowers its own goroutine with LowerThreadPriority.
	Background bool
	// Workers is how many members are compressed (and verified) at once;
	// <= 0 means min(2, GOMAXPROCS).
	Workers int
}

// RetireResult says what Retire did.
type RetireResult struct {
	// Retired is true when this call replaced the raw log by a verified
	// compressed copy. When false with a nil error, Reason says why the
	// log was left as it is (too small, too large, not smaller, already
	// retired, already being retired).
	Retired bool
	Reason  string
	// RawBytes is the raw log's size (0 when it was not looked at);
	// GzipBytes the compressed copy's, index included, when one was made.
	RawBytes  int64
	GzipBytes int64
	Members   int
	// RawRemoved is false for a retired log while a reader's lease keeps
	// the raw file; it is removed when the last lease is released.
	RawRemoved bool
}

// Retire replaces a settled raw log by a compressed copy that any gzip
// reader can read, if that is worth it, without ever losing a byte. The log
// must no longer be written; Retire checks that it did not change while it
// worked, but it cannot know that no writer is left.
//
// The log is compressed at gzip level 1 as independent members of
// MemberBytes of input each (in parallel) into <id>.log.gz.tmp, which is
// kept only when it saves at least a third of the raw size (so random-looking
// output, base64 included, stays raw). Each member is inflated and compared
// byte for byte with its raw bytes before it is written, and the synced
// file is read back and must hold exactly the members written (length and
// each member's CRC-32). Then the index <id>.log.gzi and the .gz take their
// places and the raw file is removed, or, while a reader holds a lease on
// the log, left for the last lease's release to remove. Any failure keeps
// the raw file and removes the temporary files; a failed verification is a
// fault.IO error saying why.
func (d *Dir) Retire(name string, opts RetireOptions) (RetireResult, error) {
	name, err := ParseAddress(name)
	if err != nil {
		return RetireResult{}, err
	}
	dir, err := d.openExec()
	if err != nil {
		if errors.Is(err, errNoLogs) {
			return RetireResult{}, notFound(name)
		}
		return RetireResult{}, err
	}
	defer dir.Close()
	p := d.paths(name)
	rawFile, gzFile, gziFile := baseName(p.raw), baseName(p.gz), baseName(p.gzi)
	tmpFile, gziTmpFile := baseName(p.tmp), baseName(p.gziTmp)

	leases.mu.Lock()
	e := leases.entry(p.raw)
	switch {
	case e.retiring:
		leases.mu.Unlock()
		return RetireResult{Reason: "already being retired"}, nil
	case e.pending != nil:
		leases.mu.Unlock()
		return RetireResult{Reason: "already retired; the raw file waits for its readers"}, nil
	}
	e.retiring = true
	leases.mu.Unlock()
	defer func() {
		leases.mu.Lock()
		e.retiring = false
		leases.tidy(p.raw, e)
		leases.mu.Unlock()
	}()

	raw, st, err := dir.open(rawFile, name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if g, gerr := dir.lstat(gzFile); gerr == nil {
				if err := logFile(g, name); err != nil {
					return RetireResult{}, err
				}
				return RetireResult{Reason: "already retired"}, nil
			}
			return RetireResult{}, notFound(name)
		}
		return RetireResult{}, err
	}
	defer raw.Close()
	res := RetireResult{RawBytes: st.Size}
	switch size := st.Size; {
	case size < MinRetireBytes:
		res.Reason = fmt.Sprintf("too small: %d bytes, retirement starts at %d", size, MinRetireBytes)
		return res, nil
	case size > MaxRetireBytes:
		res.Reason = fmt.Sprintf("too large: %d bytes, retirement stops at %d", size, MaxRetireBytes)
		return res, nil
	}

	memberBytes := opts.MemberBytes
	if memberBytes <= 0 {
		memberBytes = DefaultMemberBytes
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = min(2, runtime.GOMAXPROCS(0))
	}

	// Leftovers of an interrupted retirement are ours to clear.
	dir.remove(tmpFile)
	dir.remove(gziTmpFile)
	tmp, err := dir.create(tmpFile)
	if err != nil {
		return res, err
	}
	kept := false
	defer func() {
		if tmp != nil {
			tmp.Close()
		}
		if !kept {
			dir.remove(tmpFile)
			dir.remove(gziTmpFile)
		}
	}()

	c := crew{n: workers, low: opts.Background}
	x, crcs, err := compressLog(raw, st.Size, &writeback{f: tmp}, memberBytes, c)
	if err != nil {
		return res, fault.New(fault.IO, "spool: retire %s: %w; raw kept", name, err)
	}
	if err := stillSame(raw, dir, rawFile, st); err != nil {
		return res, fault.New(fault.IO, "spool: retire %s: %w; raw kept", name, err)
	}
	idx := x.encode()
	res.GzipBytes = x.compSize + int64(len(idx))
	res.Members = len(x.members)
	if limit := st.Size - st.Size/3; res.GzipBytes > limit {
		res.Reason = fmt.Sprintf("not smaller: compresses to %d of %d bytes, and retirement needs a saving of at least a third", res.GzipBytes, st.Size)
		return res, nil
	}
	// The copy carries the log's time, for whatever ages logs by it
	// (best effort: a copy with a new time loses nothing).
	unix.UtimesNanoAt(dir.fd, tmpFile, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	// Flush the copy, and write and flush the index, while verifying the
	// copy: verification reads it back through the page cache on its own
	// descriptor, and the three wait on different things.
	synced, indexed := make(chan error, 1), make(chan error, 1)
	go func(f *os.File) { synced <- f.Sync() }(tmp)
	go func() { indexed <- writeFileSync(dir, gziTmpFile, idx) }()
	verr := d.verify(dir, tmpFile, x, crcs)
	serr, ierr := <-synced, <-indexed
	cerr := tmp.Close()
	tmp = nil
	switch {
	case verr != nil:
		return res, fault.New(fault.IO, "spool: retire %s: verification failed: %w; raw kept", name, verr)
	case serr != nil:
		return res, ioErr("sync", p.tmp, serr)
	case cerr != nil:
		return res, ioErr("close", p.tmp, cerr)
	case ierr != nil:
		return res, ierr
	}
	if err := stillSame(raw, dir, rawFile, st); err != nil {
		return res, fault.New(fault.IO, "spool: retire %s: %w; raw kept", name, err)
	}
	if err := dir.rename(gziTmpFile, gziFile); err != nil {
		return res, err
	}
	if err := dir.rename(tmpFile, gzFile); err != nil {
		dir.remove(gziFile)
		return res, err
	}
	kept = true
	if err := dir.sync(); err != nil {
		return res, err
	}
	res.Retired = true

	leases.mu.Lock()
	if e.n > 0 {
		e.pending = st
		leases.mu.Unlock()
		return res, nil
	}
	removed, err := removeRaw(dir, rawFile, st)
	leases.mu.Unlock()
	if removed != nil {
		removed.Close()
	}
	if err != nil {
		// The compressed copy is sound and the raw file, still
		// preferred by readers, stays; a later Retire tries again.
		return res, fault.New(fault.IO, "spool: retire %s: remove raw: %w", name, err)
	}
	res.RawRemoved = true
	return res, dir.sync()
}

// verify runs the test hook, if any, then verifyLog on the file tmp of dir.
func (d *Dir) verify(dir *execDir, tmp string, x *gzIndex, crcs []uint32) error {
	if d.beforeVerify != nil {
		if err := d.beforeVerify(filepath.Join(d.execDir, tmp)); err != nil {
			return err
		}
	}
	f, st, err := dir.open(tmp, tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	return verifyLog(f, st.Size, x, crcs)
}

// stillSame checks that the raw file (open as f, named raw in dir) was not
// written, replaced or moved while it was being compressed.
func stillSame(f *os.File, dir *execDir, raw string, was *unix.Stat_t) error {
	now, err := fstat(f)
	if err != nil {
		return err
	}
	if !unchanged(now, was) {
		return errors.New("raw file changed while it was being compressed")
	}
	if st, err := dir.lstat(raw); err != nil || !unchanged(st, was) {
		return errors.New("raw file was replaced while it was being compressed")
	}
	return nil
}

func writeFileSync(dir *execDir, name string, b []byte) error {
	path := filepath.Join(dir.path, name)
	f, err := dir.create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return ioErr("write", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return ioErr("sync", path, err)
	}
	if err := f.Close(); err != nil {
		return ioErr("close", path, err)
	}
	return nil
}

// writebackEvery is how much of the compressed copy is written before the
// kernel is asked to start writing it to disk.
const writebackEvery = 2 << 20

// writeback writes to f and starts the kernel writing f's pages to disk
// every writebackEvery bytes (sync_file_range, which does not wait), so
// the fsync at the end waits for the last pages only.
type writeback struct {
	f            *os.File
	off, started int64
}

func (w *writeback) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.off += int64(n)
	if w.off-w.started >= writebackEvery {
		if rc, cerr := w.f.SyscallConn(); cerr == nil {
			_ = rc.Control(func(fd uintptr) {
				_ = unix.SyncFileRange(int(fd), w.started, w.off-w.started, unix.SYNC_FILE_RANGE_WRITE)
			})
		}
		w.started = w.off
	}
	return n, err
}

// compressLog writes the first size bytes of raw to dst as gzip members of
// memberBytes input each, compressing on the crew's goroutines and writing
// in order, and returns their index and each
// member's CRC-32 as written. Each worker inflates the member it made and
// compares it byte for byte with the raw bytes it came from, so a member
// that would not give back exactly its input is never written.
func compressLog(raw io.ReaderAt, size int64, dst io.Writer, memberBytes int, c crew) (*gzIndex, []uint32, error) {
	n := int((size + int64(memberBytes) - 1) / int64(memberBytes))
	x := &gzIndex{size: size, members: make([]member, 0, n)}
	crcs := make([]uint32, 0, n)
	zrs := make([]*gzip.Reader, c.n)
	brs := make([]*bytes.Reader, c.n)

	type chunk struct {
		in  []byte
		out *bytes.Buffer
		crc uint32
	}
	work := func(w, i int) (chunk, error) {
		off := int64(i) * int64(memberBytes)
		in := getBuf(min(int64(memberBytes), size-off))
		if got, err := raw.ReadAt(in, off); got < len(in) {
			putBuf(in)
			if err == io.EOF {
				err = errors.New("raw file shrank while it was being compressed")
			}
			return chunk{}, err
		}
		out := buffers.Get().(*bytes.Buffer)
		out.Reset()
		zw := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(zw)
		zw.Reset(out)
		_, err := zw.Write(in)
		if err == nil {
			err = zw.Close()
		}
		if err == nil {
			if brs[w] == nil {
				brs[w], zrs[w] = new(bytes.Reader), new(gzip.Reader)
			}
			err = inflatesTo(zrs[w], brs[w], out.Bytes(), in)
		}
		if err != nil {
			putBuf(in)
			buffers.Put(out)
			return chunk{}, fmt.Errorf("member %d: %w", i, err)
		}
		return chunk{in, out, crc32.ChecksumIEEE(out.Bytes())}, nil
	}
	consume := func(i int, c chunk) error {
		x.members = append(x.members, member{comp: x.compSize, logical: int64(i) * int64(memberBytes)})
		crcs = append(crcs, c.crc)
		if _, err := dst.Write(c.out.Bytes()); err != nil {
			return err
		}
		x.compSize += int64(c.out.Len())
		putBuf(c.in)
		buffers.Put(c.out)
		return nil
	}
	if err := inOrder(n, c, work, consume); err != nil {
		return nil, nil, err
	}
	return x, crcs, nil
}

// inflatesTo checks that comp is exactly one gzip member that inflates to
// want: the same bytes, its trailer (CRC-32 and length) sound, and nothing
// after it, so any gzip reader sees the same bytes.
func inflatesTo(zr *gzip.Reader, br *bytes.Reader, comp, want []byte) error {
	br.Reset(comp)
	if err := zr.Reset(br); err != nil {
		return err
	}
	zr.Multistream(false)
	// The inflated bytes are compared where the inflater holds them, not
	// copied out first; WriteTo ends at the member's end, having checked
	// its trailer.
	c := sameAs{want: want}
	if _, err := zr.WriteTo(&c); err != nil {
		if c.err != nil {
			return c.err
		}
		return err
	}
	if len(c.want) != 0 {
		return errors.New("inflates to less than its input")
	}
	if br.Len() != 0 {
		return fmt.Errorf("%d stray bytes after it", br.Len())
	}
	return nil
}

// sameAs is a writer that takes only the bytes of want, in order.
type sameAs struct {
	want []byte // what is still to come
	err  error
}

func (c *sameAs) Write(p []byte) (int, error) {
	switch {
	case len(p) > len(c.want):
		c.err = errors.New("inflates to more than its input")
	case !bytes.Equal(p, c.want[:len(p)]):
		c.err = errors.New("inflates to other bytes than its input")
	default:
		c.want = c.want[len(p):]
		return len(p), nil
	}
	return 0, c.err
}

// verifyLog reads the compressed file f (of size bytes) back and checks
// that it holds exactly the members of x as they were written: the members
// tile the file end to end and each has the CRC-32 its writer computed.
// (Each member was inflated and compared with the raw bytes before it was
// written.)
func verifyLog(f *os.File, size int64, x *gzIndex, crcs []uint32) error {
	if size != x.compSize {
		return fmt.Errorf("compressed file is %d bytes, %d were written", size, x.compSize)
	}
	if err := x.check(); err != nil || (len(x.members) > 0 && x.members[0].comp != 0) || len(crcs) != len(x.members) {
		return errors.New("members do not tile the file")
	}
	var buf []byte
	for i := range x.members {
		compFrom, compTo, _, _ := x.span(i)
		if buf == nil {
			buf = getBuf(compTo - compFrom)
			defer func() { putBuf(buf) }()
		}
		if int64(cap(buf)) < compTo-compFrom {
			buf = make([]byte, compTo-compFrom)
		}
		b := buf[:compTo-compFrom]
		if _, err := f.ReadAt(b, compFrom); err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		if crc32.ChecksumIEEE(b) != crcs[i] {
			return fmt.Errorf("member %d: reads back other bytes than were written", i)
		}
	}
	return nil
}

// crew says how many goroutines do a retirement's heavy work, and whether
// at lower priority.
type crew struct {
	n   int
	low bool
}

// LowerThreadPriority makes the calling goroutine run on its own thread,
// 10 nice levels below the helper's (at most 19), for the rest of its life. The goroutine keeps the thread (it
// never unlocks it), so the thread ends with the goroutine instead of going
// back to the runtime's pool with a lowered priority.
func LowerThreadPriority() {
	runtime.LockOSThread()
	tid := unix.Gettid()
	// getpriority answers 20-nice. An absolute 10 would raise a helper
	// that was itself started nicer than that.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-p+10, 19))
}

// inOrder runs work(w, i) for every i in [0,n) on up to workers goroutines
// (w numbers the goroutine, for per-goroutine state) and passes the results
// to consume in order of i, on the calling goroutine. At most workers+2
// results are pending at any time, which bounds memory. The first error
// stops the run; inOrder returns once every goroutine has finished.
func inOrder[T any](n int, c crew, work func(w, i int) (T, error), consume func(i int, r T) error) error {
	if n == 0 {
		return nil
	}
	workers := max(1, min(c.n, n))
	type slot struct {
		i    int
		r    T
		err  error
		done chan struct{}
	}
	order := make(chan *slot, workers)
	tasks := make(chan *slot)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1 + workers)
	go func() {
		defer wg.Done()
		defer close(tasks)
		defer close(order)
		for i := 0; i < n; i++ {
			s := &slot{i: i, done: make(chan struct{})}
			select {
			case order <- s:
			case <-stop:
				return
			}
			select {
			case tasks <- s:
			case <-stop:
				return
			}
		}
	}()
	for w := range workers {
		go func() {
			defer wg.Done()
			if c.low {
				LowerThreadPriority()
			}
			for s := range tasks {
				s.r, s.err = work(w, s.i)
				close(s.done)
			}
		}()
	}
	var err error
	for s := range order {
		<-s.done
		if err = s.err; err == nil {
			err = consume(s.i, s.r)
		}
		if err != nil {
			close(stop)
			break
		}
	}
	wg.Wait()
	return err
}

// Member buffers are recycled across retirements: one size class, big
// enough for a default member's input or compressed bytes, so the live
// ones are bounded by the pending results of the runs in progress.
var (
	bufs        sync.Pool // *[]byte
	buffers     = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	gzipWriters = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level cannot fail
		return zw
	}}
)

// getBuf returns a buffer of n bytes.
func getBuf(n int64) []byte {
	if p, ok := bufs.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		return (*p)[:n]
	}
	return make([]byte, n, max(n, DefaultMemberBytes+64<<10))
}

func putBuf(b []byte) {
	bufs.Put(&b)
}

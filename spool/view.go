package spool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Form is the physical form of a log.
type Form string

const (
	FormRaw  Form = "raw"  // the spool file itself
	FormGzip Form = "gzip" // retired: gzip members plus an index
)

// MaxLineBytes bounds the memory Lines uses for one line; longer lines are
// passed on in pieces.
const MaxLineBytes = 1 << 20

// View reads one log by its logical bytes, whatever its physical form. It
// holds a lease on the log from Open to Close and keeps its file open, so
// retirement never changes what it reads. ReadAt, Size, Reader and Lines
// are safe for concurrent use. A retired log is inflated only where it is
// read, a member (DefaultMemberBytes) at a time, into no cache.
type View struct {
	name    string
	form    Form
	size    int64
	f       *os.File
	idx     *gzIndex // FormGzip only
	release func()
	closed  atomic.Bool
	once    sync.Once
}

// Open opens a view of a log by logical name or address (see ParseAddress),
// taking a lease on it. The raw file is preferred while it exists; one that
// goes away before it is opened (retired meanwhile) is read from its
// compressed copy instead. A symbolic link, a file with more than one link
// or other non-regular file, and a state or executions directory that is a
// link or was replaced, are refused (fault.Refused); a well-formed name
// with no file is fault.NotFound. Close the view when done.
func (d *Dir) Open(name string) (*View, error) {
	name, err := ParseAddress(name)
	if err != nil {
		return nil, err
	}
	dir, err := d.openExec()
	if err != nil {
		if errors.Is(err, errNoLogs) {
			return nil, notFound(name)
		}
		return nil, err
	}
	defer dir.Close()
	p := d.paths(name)
	release := d.lease(p)
	v, err := openView(dir, name, p)
	if err != nil {
		release()
		return nil, err
	}
	v.release = release
	return v, nil
}

func openView(dir *execDir, name string, p logPaths) (*View, error) {
	f, st, err := dir.open(baseName(p.raw), name)
	if err == nil {
		return &View{name: name, form: FormRaw, size: st.Size, f: f}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, x, err := openGzip(dir, name, p)
	if err != nil {
		return nil, err
	}
	return &View{name: name, form: FormGzip, size: x.size, f: f, idx: x}, nil
}

// openGzip opens a retired log's .gz file and its index.
func openGzip(dir *execDir, name string, p logPaths) (*os.File, *gzIndex, error) {
	f, st, err := dir.open(baseName(p.gz), name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, notFound(name)
		}
		return nil, nil, err
	}
	x, _, err := loadIndex(f, st.Size, dir, baseName(p.gzi), MaxRetireBytes)
	if errors.Is(err, errScanBound) {
		err = fmt.Errorf("without a usable index, and longer than any retired log (%d bytes): %w", MaxRetireBytes, err)
	}
	if err != nil {
		f.Close()
		return nil, nil, damaged(name, err)
	}
	return f, x, nil
}

func damaged(name string, err error) error {
	return fault.New(fault.IO, "spool: %s: damaged compressed log: %w", name, err)
}

// Name returns the view's logical name.
func (v *View) Name() string { return v.name }

// Form returns the physical form being read.
func (v *View) Form() Form { return v.form }

// Size returns the number of logical bytes. For a raw log it is the size
// when the view was opened.
func (v *View) Size() int64 { return v.size }

// Close releases the view's lease and file. It is idempotent. Closing the
// last reader of a log retired meanwhile removes its raw file.
func (v *View) Close() error {
	var err error
	v.once.Do(func() {
		v.closed.Store(true)
		err = v.f.Close()
		if v.release != nil {
			v.release()
		}
	})
	if err != nil {
		return ioErr("close", v.name, err)
	}
	return nil
}

// ReadAt reads logical bytes at off, as io.ReaderAt: it returns len(p) bytes
// or an error saying why not, io.EOF at the end of the log.
func (v *View) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fault.New(fault.InvalidParams, "spool: negative offset %d", off)
	}
	if v.closed.Load() {
		return 0, ioErr("read", v.name, os.ErrClosed)
	}
	if off >= v.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := min(int64(len(p)), v.size-off)
	var n int
	var err error
	if v.form == FormRaw {
		n, err = v.f.ReadAt(p[:want], off)
		if err == io.EOF && n == int(want) {
			err = nil
		}
	} else {
		n, err = v.readGzip(p[:want], off)
	}
	if err != nil {
		if err == io.EOF {
			// A raw log shorter than when it was opened: the limit
			// cut shaved an incomplete character off the end.
			return n, io.EOF
		}
		return n, ioErr("read", v.name, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readGzip fills p from logical offset off (the range lies inside the log)
// by inflating the members that cover it, each from its start.
func (v *View) readGzip(p []byte, off int64) (int, error) {
	x := v.idx
	n := 0
	for i := x.find(off); n < len(p); i++ {
		compFrom, compTo, from, to := x.span(i)
		in, err := openMember(v.f, compFrom, compTo)
		if err != nil {
			return n, err
		}
		err = discard(&in.zr, off-from)
		if err == nil {
			k := int(min(int64(len(p)-n), to-off))
			var got int
			got, err = io.ReadFull(&in.zr, p[n:n+k])
			n += got
			off += int64(got)
		}
		in.close()
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = errors.New("compressed member shorter than its index says")
			}
			return n, err
		}
	}
	return n, nil
}

var scratch = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// discard reads and drops n bytes from r.
func discard(r io.Reader, n int64) error {
	if n == 0 {
		return nil
	}
	b := scratch.Get().(*[32 << 10]byte)
	defer scratch.Put(b)
	for n > 0 {
		k, err := io.ReadFull(r, b[:min(n, int64(len(b)))])
		n -= int64(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// Reader returns a new reader of the whole log from its start. For a
// retired log it inflates as it goes, checking each member's CRC-32, and
// fails once the stream gives more or fewer bytes than the index says, so
// a damaged or forged file costs no more than the log it claims to be.
func (v *View) Reader() io.Reader {
	if v.form == FormRaw {
		return &viewReader{v: v, r: io.NewSectionReader(v.f, 0, v.size)}
	}
	stream := &gzipStream{src: bufio.NewReaderSize(io.NewSectionReader(v.f, 0, v.idx.compSize), 64<<10)}
	return &viewReader{v: v, r: &exactReader{r: stream, left: v.size}}
}

// exactReader passes on the left bytes of r, and fails when r has fewer,
// or more.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left == 0 {
		var one [1]byte
		for range 100 {
			n, err := e.r.Read(one[:])
			if n > 0 {
				return 0, errors.New("compressed log inflates to more than its index says")
			}
			if err != nil {
				return 0, err
			}
		}
		return 0, io.ErrNoProgress
	}
	n, err := e.r.Read(p[:min(int64(len(p)), e.left)])
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = errors.New("compressed log inflates to less than its index says")
	}
	return n, err
}

// section returns a reader of the logical bytes [off, off+n) of the log,
// read in order: for a retired log, the members from the one holding off
// onwards, inflated as one stream.
func (v *View) section(off, n int64) io.Reader {
	if v.form == FormRaw || off >= v.size {
		return &viewReader{v: v, r: io.NewSectionReader(v.f, off, min(n, max(0, v.size-off)))}
	}
	m := v.idx.members[v.idx.find(off)]
	src := bufio.NewReaderSize(io.NewSectionReader(v.f, m.comp, v.idx.compSize-m.comp), 64<<10)
	return &viewReader{v: v, r: io.LimitReader(&skipReader{r: &gzipStream{src: src}, skip: off - m.logical}, n)}
}

// skipReader drops the first skip bytes of r.
type skipReader struct {
	r    io.Reader
	skip int64
}

func (s *skipReader) Read(p []byte) (int, error) {
	if s.skip > 0 {
		if err := discard(s.r, s.skip); err != nil {
			return 0, err
		}
		s.skip = 0
	}
	return s.r.Read(p)
}

// gzipStream inflates a multi-member gzip stream, starting lazily so that
// making a Reader cannot fail.
type gzipStream struct {
	src *bufio.Reader
	zr  *gzip.Reader
	err error
}

func (g *gzipStream) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		if g.zr, g.err = gzip.NewReader(g.src); g.err != nil {
			return 0, g.err
		}
	}
	n, err := g.zr.Read(p)
	g.err = err
	return n, err
}

// viewReader turns read failures into fault.IO errors naming the log.
type viewReader struct {
	v *View
	r io.Reader
}

func (r *viewReader) Read(p []byte) (int, error) {
	if r.v.closed.Load() {
		return 0, ioErr("read", r.v.name, os.ErrClosed)
	}
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = ioErr("read", r.v.name, err)
	}
	return n, err
}

// Lines streams the log's lines to fn with their 1-based numbers, without
// the '\n'; an unterminated last line counts. It stops early when fn
// returns false. line is only valid during the call. A line longer than
// MaxLineBytes is passed in consecutive pieces with the same number, each
// at most MaxLineBytes and cut after a whole UTF-8 character.
func (v *View) Lines(fn func(lineNo int64, line []byte) bool) error {
	r := newLineReader(v.Reader())
	for {
		p, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(p.no, p.text) {
			return nil
		}
	}
}

// Stat describes a log by logical name.
type Stat struct {
	Name string // logical name, executions/<id>.log
	Size int64  // logical bytes
	// Form is what a reader gets now: raw while the raw file exists.
	Form Form
	// PhysicalBytes is the size on disk of that form: for gzip, the .gz
	// file and its index.
	PhysicalBytes int64
	// Retired is true once a verified compressed copy exists, even while
	// the raw file still waits for its readers.
	Retired bool
	// Unindexed is set for a retired log whose index is missing or not
	// made for its .gz file. Its size is then learned by inflating it,
	// but never more than statScanBytes of it: past that SizeUnknown is
	// set and Size is 0. Reading it rebuilds the index in memory.
	Unindexed   bool
	SizeUnknown bool
}

// Stat describes a log by logical name or address without taking a lease,
// in time that does not grow with the log. It refuses and reports unknown
// names as Open does.
func (d *Dir) Stat(name string) (Stat, error) {
	name, err := ParseAddress(name)
	if err != nil {
		return Stat{}, err
	}
	dir, err := d.openExec()
	if err != nil {
		if errors.Is(err, errNoLogs) {
			return Stat{}, notFound(name)
		}
		return Stat{}, err
	}
	defer dir.Close()
	p := d.paths(name)
	s := Stat{Name: name}
	if g, err := dir.lstat(baseName(p.gz)); err == nil && logFile(g, name) == nil {
		s.Retired = true
	}
	st, err := dir.lstat(baseName(p.raw))
	if err == nil {
		if err := logFile(st, name); err != nil {
			return Stat{}, err
		}
		s.Form, s.Size, s.PhysicalBytes = FormRaw, st.Size, st.Size
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Stat{}, err
	}
	f, gz, err := dir.open(baseName(p.gz), name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Stat{}, notFound(name)
		}
		return Stat{}, err
	}
	x, indexed, err := loadIndex(f, gz.Size, dir, baseName(p.gzi), statScanBytes)
	f.Close()
	switch {
	case errors.Is(err, errScanBound):
		s.SizeUnknown = true
	case err != nil:
		return Stat{}, damaged(name, err)
	default:
		s.Size = x.size
	}
	s.PhysicalBytes = gz.Size
	s.Form, s.Retired, s.Unindexed = FormGzip, true, !indexed
	if st, err := dir.lstat(baseName(p.gzi)); err == nil && logFile(st, name) == nil {
		s.PhysicalBytes += st.Size
	}
	return s, nil
}

// Glob returns the logical names matching pattern (path.Match syntax over
// logical names, so "executions/*.log" matches raw and retired logs alike;
// an "artifact://" prefix is allowed), sorted, each once. Only regular
// files with well-formed names are listed; temporary and index files never
// are. A bad pattern, or one longer than MaxGlobBytes, is
// fault.InvalidParams.
func (d *Dir) Glob(pattern string) ([]string, error) {
	g, err := compileGlob(strings.TrimPrefix(pattern, addrScheme))
	if err != nil {
		return nil, err
	}
	dir, err := d.openExec()
	if err != nil {
		if errors.Is(err, errNoLogs) {
			return nil, nil
		}
		return nil, err
	}
	defer dir.Close()
	ents, err := dir.f.ReadDir(-1)
	if err != nil {
		return nil, ioErr("read", d.execDir, err)
	}
	seen := map[string]bool{}
	var names []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		file := strings.TrimSuffix(e.Name(), gzExt)
		name, err := ParseAddress(logDir + "/" + file)
		if err != nil || seen[name] {
			continue
		}
		if g.match(name) {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

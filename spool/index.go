package spool

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
)

// A retired log is a sequence of independent gzip members, each holding
// about DefaultMemberBytes of the log, so any range can be read by
// inflating only the members that cover it. The sidecar index (.gzi) says
// where each member starts:
//
//	offset  size  field
//	0       8     magic "MVGZI\x00\x00\x02" (the last byte is the version)
//	8       8     logical (uncompressed) size
//	16      8     size of the .gz file
//	24      4     member count N
//	28      16*N  per member: compressed offset, logical offset
//	28+16N  4     CRC-32 (IEEE) of all the bytes before it
//
// Version 1, written before, held the SHA-256 of the logical content
// (32 bytes) before the member count; it is still read, and the hash
// ignored: nothing checks a log against it once it is retired.
//
// All integers are little-endian. The index is only an accelerator: when it
// is missing or does not match the .gz file, readers rebuild it in memory
// by scanning the members, so nothing is lost with it. That scan stops at
// MaxRetireBytes (no retired log is larger), and Stat's at statScanBytes.

var gziMagic = [8]byte{'M', 'V', 'G', 'Z', 'I', 0, 0, 2}

// gziHeaders is the header size by version.
var gziHeaders = map[byte]int{1: 60, 2: 28}

const (
	gziHeader = 28
	// maxIndexBytes bounds what is read as an index: far more members than
	// a MaxRetireBytes log can have at any member size worth using.
	maxIndexBytes = 1 << 20
	// statScanBytes bounds the work of Stat on a log without a usable
	// index, so that it never costs time in proportion to the log.
	statScanBytes = 4 << 20
)

// member is where one gzip member starts, in the .gz file and in the log.
type member struct {
	comp    int64
	logical int64
}

// gzIndex describes one retired log.
type gzIndex struct {
	size     int64 // logical bytes
	compSize int64 // .gz bytes
	members  []member
}

func (x *gzIndex) encode() []byte {
	b := make([]byte, 0, gziHeader+16*len(x.members)+4)
	b = append(b, gziMagic[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(x.size))
	b = binary.LittleEndian.AppendUint64(b, uint64(x.compSize))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.members)))
	for _, m := range x.members {
		b = binary.LittleEndian.AppendUint64(b, uint64(m.comp))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.logical))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

var errBadIndex = errors.New("malformed index")

func decodeIndex(b []byte) (*gzIndex, error) {
	if len(b) < 8 || !bytes.Equal(b[:7], gziMagic[:7]) {
		return nil, errBadIndex
	}
	header, ok := gziHeaders[b[7]]
	if !ok || len(b) < header+4 {
		return nil, errBadIndex
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, errBadIndex
	}
	x := &gzIndex{
		size:     int64(binary.LittleEndian.Uint64(b[8:])),
		compSize: int64(binary.LittleEndian.Uint64(b[16:])),
	}
	n := binary.LittleEndian.Uint32(b[header-4:])
	if uint64(len(body)-header) != 16*uint64(n) {
		return nil, errBadIndex
	}
	x.members = make([]member, n)
	for i := range x.members {
		o := header + 16*i
		x.members[i] = member{
			comp:    int64(binary.LittleEndian.Uint64(body[o:])),
			logical: int64(binary.LittleEndian.Uint64(body[o+8:])),
		}
	}
	if err := x.check(); err != nil {
		return nil, err
	}
	return x, nil
}

// check makes sure the members tile the log and are in order in the .gz
// file: the first starts the log, each one starts strictly after the one
// before and before the end. Readers rely on it for their arithmetic.
func (x *gzIndex) check() error {
	if x.size < 0 || x.compSize < 0 || (len(x.members) == 0) != (x.size == 0) {
		return errBadIndex
	}
	for i, m := range x.members {
		if i == 0 && (m.comp < 0 || m.logical != 0) {
			return errBadIndex
		}
		if i > 0 && (m.comp <= x.members[i-1].comp || m.logical <= x.members[i-1].logical) {
			return errBadIndex
		}
		if m.comp >= x.compSize || m.logical >= x.size {
			return errBadIndex
		}
	}
	return nil
}

// span returns member i's ranges in the .gz file and in the log.
func (x *gzIndex) span(i int) (compFrom, compTo, from, to int64) {
	m := x.members[i]
	compTo, to = x.compSize, x.size
	if i+1 < len(x.members) {
		compTo, to = x.members[i+1].comp, x.members[i+1].logical
	}
	return m.comp, compTo, m.logical, to
}

// find returns the member holding logical offset off (0 <= off < size).
func (x *gzIndex) find(off int64) int {
	return sort.Search(len(x.members), func(i int) bool { return x.members[i].logical > off }) - 1
}

// loadIndex returns the index of the open .gz file gz (of compSize bytes):
// the sidecar gzi in dir when it is sound and made for this file, else one
// rebuilt by scanning at most scan bytes of the members (see scanMembers).
// indexed says which.
func loadIndex(gz *os.File, compSize int64, dir *execDir, gzi string, scan int64) (x *gzIndex, indexed bool, err error) {
	if b, err := readSmall(dir, gzi, maxIndexBytes); err == nil {
		if x, err := decodeIndex(b); err == nil && x.compSize == compSize {
			return x, true, nil
		}
	}
	x, err = scanMembers(gz, compSize, scan)
	return x, false, err
}

// readSmall reads the file name of dir, of at most limit bytes, refusing
// what execDir.open refuses.
func readSmall(dir *execDir, name string, limit int64) ([]byte, error) {
	f, st, err := dir.open(name, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size > limit {
		return nil, errBadIndex
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// errScanBound says that scanMembers stopped at its bound.
var errScanBound = errors.New("members go on past the scan's bound")

// scanMembers rebuilds an index by inflating every member of r in turn,
// reading at most limit compressed bytes and inflating at most limit
// bytes; past either it returns errScanBound. It costs inflating the log,
// so it only runs when the sidecar is unusable, and the bound keeps a
// gzip bomb from costing more. The SHA-256 is left zero: nothing reads it
// back.
func scanMembers(r io.ReaderAt, compSize, limit int64) (*gzIndex, error) {
	cr := &countingReader{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, compSize), 64<<10), limit: limit}
	x := &gzIndex{compSize: compSize}
	var zr gzip.Reader
	for cr.n < compSize {
		start := cr.n
		// cr is an io.ByteReader, so the reader takes bytes from it
		// exactly and cr.n stays at the end of each member.
		if err := zr.Reset(cr); err != nil {
			return nil, err
		}
		zr.Multistream(false)
		n, err := io.CopyN(io.Discard, &zr, limit-x.size+1)
		if err != nil && err != io.EOF {
			return nil, err
		}
		if x.size+n > limit {
			return nil, errScanBound
		}
		if n == 0 {
			continue // an empty member adds nothing to the log
		}
		x.members = append(x.members, member{comp: start, logical: x.size})
		x.size += n
	}
	if err := x.check(); err != nil {
		return nil, err
	}
	return x, nil
}

// countingReader counts the bytes taken from a buffered reader, and
// refuses to give more than limit.
type countingReader struct {
	r     *bufio.Reader
	n     int64
	limit int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.limit {
		return 0, errScanBound
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.limit-c.n)])
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	if c.n >= c.limit {
		return 0, errScanBound
	}
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// inflater is a reusable gzip reader over a buffered section of a file.
type inflater struct {
	br *bufio.Reader
	zr gzip.Reader
}

var inflaters = sync.Pool{New: func() any {
	return &inflater{br: bufio.NewReaderSize(nil, 32<<10)}
}}

// openMember returns an inflater positioned at the start of the member
// stored in r at [from,to). Close it when done.
// membersOpened counts members opened for inflation, so a test can tell
// how much of a log a read inflated.
var membersOpened atomic.Int64

func openMember(r io.ReaderAt, from, to int64) (*inflater, error) {
	membersOpened.Add(1)
	in := inflaters.Get().(*inflater)
	in.br.Reset(io.NewSectionReader(r, from, to-from))
	if err := in.zr.Reset(in.br); err != nil {
		in.close()
		return nil, err
	}
	in.zr.Multistream(false)
	return in, nil
}

// close returns the inflater to the pool, letting go of the file.
func (in *inflater) close() {
	in.br.Reset(nil)
	inflaters.Put(in)
}

package spool

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// zeroMember returns one gzip member holding n zero bytes: a few kilobytes
// that inflate to n.
func zeroMember(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestStatWithoutIndexIsBounded: without an index, stat inflates no more
// than statScanBytes of a retired log. The file here is one sound member
// of 8 MiB followed by a gigabyte that is no gzip at all (a hole): a stat
// that read on would fail, or take its time. It says the size is unknown
// and why, and gives the physical size; so it does for more than
// statScanBytes of empty members. A small log without an index still gets
// its size.
func TestStatWithoutIndexIsBounded(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	path := filepath.Join(d.execDir, "exec-b-000001.log.gz")
	writeFile(t, path, string(zeroMember(t, 2*statScanBytes)))
	if err := os.Truncate(path, 1<<30); err != nil {
		t.Fatal(err)
	}
	st, err := d.Stat("executions/exec-b-000001.log")
	want := Stat{Name: "executions/exec-b-000001.log", Form: FormGzip, PhysicalBytes: 1 << 30, Retired: true, Unindexed: true, SizeUnknown: true}
	if err != nil || st != want {
		t.Fatalf("Stat = %+v, %v; want %+v", st, err, want)
	}

	// Empty members add nothing to the log, but reading them is work too.
	empty := zeroMember(t, 0)
	empties := bytes.Repeat(empty, statScanBytes/len(empty)+10)
	writeFile(t, filepath.Join(d.execDir, "exec-b-000003.log.gz"), string(empties))
	st, err = d.Stat("executions/exec-b-000003.log")
	want = Stat{Name: "executions/exec-b-000003.log", Form: FormGzip, PhysicalBytes: int64(len(empties)), Retired: true, Unindexed: true, SizeUnknown: true}
	if err != nil || st != want {
		t.Fatalf("Stat = %+v, %v; want %+v", st, err, want)
	}

	small := zeroMember(t, statScanBytes/2)
	writeFile(t, filepath.Join(d.execDir, "exec-b-000002.log.gz"), string(small))
	st, err = d.Stat("executions/exec-b-000002.log")
	want = Stat{Name: "executions/exec-b-000002.log", Size: statScanBytes / 2, Form: FormGzip, PhysicalBytes: int64(len(small)), Retired: true, Unindexed: true}
	if err != nil || st != want {
		t.Fatalf("Stat = %+v, %v; want %+v", st, err, want)
	}
}

// TestOpenWithoutIndexIsBounded: rebuilding a missing index stops past
// MaxRetireBytes, more than any retired log holds: a gzip bomb is damage,
// not a minute of inflating.
func TestOpenWithoutIndexIsBounded(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	writeFile(t, filepath.Join(d.execDir, "bomb.log.gz"), string(zeroMember(t, MaxRetireBytes+1)))
	_, err := d.Open("executions/bomb.log")
	if fault.KindOf(err) != fault.IO || !strings.Contains(err.Error(), "longer than any retired log") {
		t.Fatalf("Open = %v; want damage past the bound", err)
	}
}

// TestForgedIndexBoundsReading: an index that understates what its .gz
// inflates to bounds the reading, and says the log is damaged.
func TestForgedIndexBoundsReading(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	gz := zeroMember(t, 8<<20)
	writeFile(t, filepath.Join(d.execDir, "forged.log.gz"), string(gz))
	x := &gzIndex{size: 1 << 20, compSize: int64(len(gz)), members: []member{{0, 0}}}
	writeFile(t, filepath.Join(d.execDir, "forged.log.gzi"), string(x.encode()))
	v, err := d.Open("executions/forged.log")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	n, err := io.Copy(io.Discard, v.Reader())
	if fault.KindOf(err) != fault.IO || n != 1<<20 || !strings.Contains(err.Error(), "more than its index says") {
		t.Fatalf("reading: %d bytes, %v; want the indexed 1 MiB then an error", n, err)
	}
	if err := v.Lines(func(int64, []byte) bool { return true }); fault.KindOf(err) != fault.IO {
		t.Fatalf("Lines: %v; want an io error", err)
	}
}

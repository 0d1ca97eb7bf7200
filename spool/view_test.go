package spool

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// checkView compares everything a view answers with data: random ranges,
// the last 4 KiB, ranges across member boundaries, reads at and past the
// end, the whole stream and the lines.
func checkView(t *testing.T, v *View, data []byte) {
	t.Helper()
	if v.Size() != int64(len(data)) {
		t.Fatalf("Size() = %d, want %d", v.Size(), len(data))
	}
	size := int64(len(data))
	type rng struct{ off, n int64 }
	ranges := []rng{
		{0, 1}, {0, 4096}, {size - 4096, 4096}, {size - 1, 1},
		{size - 10, 100}, {size, 10}, {size + 5, 10}, {0, size}, {0, size + 100},
		{7, 0}, {size, 0},
	}
	var bounds []int64 // member boundaries, or for a raw log some likely ones
	if v.idx != nil {
		for _, m := range v.idx.members[1:] {
			bounds = append(bounds, m.logical)
		}
	} else {
		for b := int64(64 << 10); b < size; b += 64 << 10 {
			bounds = append(bounds, b)
		}
	}
	for _, b := range bounds {
		ranges = append(ranges, rng{b - 1, 2}, rng{b - 3000, 7000}, rng{b, 1}, rng{b - 1, 1})
	}
	r := rand.New(rand.NewPCG(uint64(size), 1))
	for range 60 {
		off := r.Int64N(size + 100)
		ranges = append(ranges, rng{off, r.Int64N(300 << 10)})
	}
	for _, g := range ranges {
		if g.off < 0 {
			continue
		}
		buf := make([]byte, g.n)
		n, err := v.ReadAt(buf, g.off)
		var want []byte
		if g.off < size {
			want = data[g.off:min(size, g.off+g.n)]
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("%s ReadAt(%d bytes at %d) = %d bytes, wrong content", v.Form(), g.n, g.off, n)
		}
		switch {
		case n == len(buf) && err != nil:
			t.Fatalf("%s ReadAt(%d bytes at %d): full read with error %v", v.Form(), g.n, g.off, err)
		case n < len(buf) && err != io.EOF:
			t.Fatalf("%s ReadAt(%d bytes at %d) = %d, %v; want io.EOF", v.Form(), g.n, g.off, n, err)
		}
	}
	if _, err := v.ReadAt(make([]byte, 1), -1); fault.KindOf(err) != fault.InvalidParams {
		t.Fatalf("negative offset: %v", err)
	}

	all, err := io.ReadAll(v.Reader())
	if err != nil || !bytes.Equal(all, data) {
		t.Fatalf("%s Reader: %d bytes, %v; want the %d log bytes", v.Form(), len(all), err, len(data))
	}

	want := strings.Split(string(data), "\n")
	if strings.HasSuffix(string(data), "\n") {
		want = want[:len(want)-1]
	}
	var got []string
	err = v.Lines(func(no int64, line []byte) bool {
		if no != int64(len(got))+1 {
			t.Fatalf("line number %d after %d lines", no, len(got))
		}
		got = append(got, string(line))
		return true
	})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("%s Lines: %d lines, %v; want %d", v.Form(), len(got), err, len(want))
	}
}

func TestViewSameBeforeAndAfterRetirement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts RetireOptions
		data []byte
	}{
		{"default members", RetireOptions{}, buildLog(11, 2<<20+5000)},
		{"small members", RetireOptions{MemberBytes: 64 << 10}, buildLog(12, 1<<20+3)},
		{"one worker", RetireOptions{MemberBytes: 100_000, Workers: 1}, buildLog(13, 700_001)},
		{"ends with newline", RetireOptions{MemberBytes: 128 << 10}, append(buildLog(14, 300_000), '\n')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDir(t)
			name := putLog(t, d, "exec-v-000002", tc.data)
			v, err := d.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			if v.Form() != FormRaw || v.Name() != name {
				t.Fatalf("view %s %s", v.Name(), v.Form())
			}
			checkView(t, v, tc.data)
			v.Close()

			mustRetire(t, d, name, tc.opts)
			v, err = d.Open("artifact://" + name)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if v.Form() != FormGzip {
				t.Fatalf("form %s after retirement", v.Form())
			}
			checkView(t, v, tc.data)
		})
	}
}

func TestViewLinesStopAndLongLines(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	long := bytes.Repeat([]byte("x"), MaxLineBytes+MaxLineBytes/2)
	data := append(append([]byte("first\n\n"), long...), "\nlast"...)
	name := putLog(t, d, "exec-v-000003", data)
	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	type piece struct {
		no int64
		n  int
	}
	var got []piece
	v.Lines(func(no int64, line []byte) bool {
		got = append(got, piece{no, len(line)})
		return true
	})
	want := []piece{{1, 5}, {2, 0}, {3, MaxLineBytes}, {3, MaxLineBytes / 2}, {4, 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("pieces %v, want %v", got, want)
	}
	calls := 0
	v.Lines(func(int64, []byte) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("%d calls after returning false", calls)
	}
}

func TestViewAfterClose(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	name := putLog(t, d, "exec-v-000004", buildLog(15, 100_000))
	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadAt(make([]byte, 10), 0); fault.KindOf(err) != fault.IO {
		t.Fatalf("ReadAt after Close: %v", err)
	}
}

func TestViewWithoutIndex(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"missing", "corrupt", "foreign"} {
		t.Run(damage, func(t *testing.T) {
			d := newDir(t)
			// Six members; their size does not matter to the index.
			data := buildLog(16, 5*60_000+4321)
			name := putLog(t, d, "exec-i-000001", data)
			mustRetire(t, d, name, RetireOptions{MemberBytes: 60_000})
			p := d.paths(name)
			switch damage {
			case "missing":
				os.Remove(p.gzi)
			case "corrupt":
				if err := flipByte(p.gzi, 0.5); err != nil {
					t.Fatal(err)
				}
			case "foreign": // a sound index made for another file
				other := putLog(t, d, "exec-i-000002", buildLog(17, 300_000))
				mustRetire(t, d, other, RetireOptions{})
				if err := os.Rename(d.paths(other).gzi, p.gzi); err != nil {
					t.Fatal(err)
				}
			}
			st, err := d.Stat(name)
			if err != nil || st.Size != int64(len(data)) || st.Form != FormGzip {
				t.Fatalf("Stat = %+v, %v", st, err)
			}
			v, err := d.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if len(v.idx.members) != 6 {
				t.Fatalf("rebuilt index has %d members, want 6", len(v.idx.members))
			}
			checkView(t, v, data)
		})
	}
}

func TestViewDamagedGzip(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(18, 1<<20)
	name := putLog(t, d, "exec-i-000003", data)
	mustRetire(t, d, name, RetireOptions{MemberBytes: 256 << 10})
	if err := flipByte(d.paths(name).gz, 0.9); err != nil {
		t.Fatal(err)
	}
	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	// The stream checks every member's CRC-32, so damage cannot pass.
	if _, err := io.ReadAll(v.Reader()); fault.KindOf(err) != fault.IO {
		t.Fatalf("reading a damaged log: %v, want an io error", err)
	}
	// Ranges in undamaged members still read.
	buf := make([]byte, 1000)
	if n, err := v.ReadAt(buf, 10); err != nil || !bytes.Equal(buf[:n], data[10:1010]) {
		t.Fatalf("ReadAt in a sound member: %v", err)
	}
}

func TestAddresses(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"artifact://executions/exec-a-000001.log": "executions/exec-a-000001.log",
		"executions/exec-a-000001.log":            "executions/exec-a-000001.log",
		"executions/a.b_c+d@e=f,g.log":            "executions/a.b_c+d@e=f,g.log",
	}
	for addr, want := range good {
		if got, err := ParseAddress(addr); err != nil || got != want {
			t.Errorf("ParseAddress(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	bad := []string{
		"", "artifact://executions/../x.log", "executions/../executions/x.log", "artifact://executions/..log",
		"/etc/passwd", "/work/state/executions/x.log", "file:///x", "file:x.log", "http://executions/x.log",
		"artifact://other/x.log", "artifact:///executions/x.log", "artifact://executions/sub/x.log",
		"artifact://executions//x.log", "artifact://executions/x.log\x00", "executions/x\x00.log",
		"artifact://executions/x.txt", "artifact://executions/.log", "artifact://executions/",
		"artifact://executions", "executions/x.log.gz", "executions/x.log.gzi", "executions/x y.log",
		"executions/x\n.log", "./executions/x.log", "artifact://executions/x.log?raw", "executions\\x.log",
	}
	for _, addr := range bad {
		name, err := ParseAddress(addr)
		if fault.KindOf(err) != fault.Refused {
			t.Errorf("ParseAddress(%q) = %q, %v; want refused", addr, name, err)
		}
	}
}

func TestAddressesOnDisk(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(19, 200_000)
	name := putLog(t, d, "exec-s-000001", data)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(d.execDir, "out.log")))
	must(os.Symlink(outside, filepath.Join(d.execDir, "outgz.log.gz")))
	must(os.Symlink("../../etc/passwd", filepath.Join(d.execDir, "rel.log")))
	must(os.Symlink(d.paths(name).raw, filepath.Join(d.execDir, "in.log")))
	must(syscall.Mkfifo(filepath.Join(d.execDir, "fifo.log"), 0o600))
	must(os.Mkdir(filepath.Join(d.execDir, "dir.log"), 0o700))

	for _, id := range []string{"out", "outgz", "rel", "in", "fifo", "dir"} {
		addr := "artifact://executions/" + id + ".log"
		_, perr := d.ParseAddress(addr)
		_, oerr := d.Open(addr)
		_, serr := d.Stat(addr)
		for what, err := range map[string]error{"Open": oerr, "Stat": serr} {
			if fault.KindOf(err) != fault.Refused {
				t.Errorf("%s(%s) = %v; want refused", what, addr, err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s(%s) error shows content: %v", what, addr, err)
			}
		}
		if id == "fifo" || id == "dir" {
			continue // not links: the opens refuse them
		}
		if fault.KindOf(perr) != fault.Refused {
			t.Errorf("Dir.ParseAddress(%s) = %v; want refused", addr, perr)
		}
		if id != "in" && !strings.Contains(perr.Error(), "outside") {
			t.Errorf("Dir.ParseAddress(%s) = %v; want it to say outside", addr, perr)
		}
	}
	if got, err := d.ParseAddress("artifact://" + name); err != nil || got != name {
		t.Fatalf("Dir.ParseAddress(%s) = %q, %v", name, got, err)
	}
	if got, err := d.ParseAddress("executions/unknown.log"); err != nil || got != "executions/unknown.log" {
		t.Fatalf("unknown name: %q, %v", got, err)
	}
	if _, err := d.Open("executions/unknown.log"); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("Open unknown: %v, want not-found", err)
	}
	if _, err := d.Stat("executions/unknown.log"); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("Stat unknown: %v, want not-found", err)
	}
	for _, addr := range []string{"artifact://executions/../x.log", "/etc/passwd", "file:///x", "artifact://other/x.log"} {
		if _, err := d.Open(addr); fault.KindOf(err) != fault.Refused {
			t.Errorf("Open(%q) = %v; want refused", addr, err)
		}
	}

	// An executions directory that is a link is refused too.
	state := t.TempDir()
	must(os.Symlink(d.execDir, filepath.Join(state, logDir)))
	ld := NewDir(state)
	if _, err := ld.Open(name); fault.KindOf(err) != fault.Refused {
		t.Fatalf("Open through a linked executions/: %v, want refused", err)
	}
	if _, err := ld.Glob("executions/*.log"); fault.KindOf(err) != fault.Refused {
		t.Fatalf("Glob through a linked executions/: %v, want refused", err)
	}
}

func TestStatAndGlob(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	rawData := buildLog(20, 150_000)
	gzData := buildLog(21, 1<<20)
	raw := putLog(t, d, "exec-g-000001", rawData)
	gz := putLog(t, d, "exec-g-000002", gzData)
	other := putLog(t, d, "build-7", []byte("tiny\n"))
	mustRetire(t, d, gz, RetireOptions{})
	// Things that are not logs, or not addressable ones.
	for _, f := range []string{"exec-g-000003.log.gz.tmp", "exec-g-000004.log.gzi", "notes.txt", "bad name.log"} {
		if err := os.WriteFile(filepath.Join(d.execDir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(d.execDir, "link.log")); err != nil {
		t.Fatal(err)
	}

	s, err := d.Stat(raw)
	if err != nil || s != (Stat{Name: raw, Size: int64(len(rawData)), Form: FormRaw, PhysicalBytes: int64(len(rawData))}) {
		t.Fatalf("Stat(raw) = %+v, %v", s, err)
	}
	p := d.paths(gz)
	phys := mustStat(t, p.gz).Size() + mustStat(t, p.gzi).Size()
	s, err = d.Stat("artifact://" + gz)
	if err != nil || s != (Stat{Name: gz, Size: int64(len(gzData)), Form: FormGzip, PhysicalBytes: phys, Retired: true}) {
		t.Fatalf("Stat(gzip) = %+v, %v", s, err)
	}

	for pattern, want := range map[string][]string{
		"executions/*.log":              {other, raw, gz},
		"artifact://executions/exec-*":  {raw, gz},
		"executions/exec-g-000002.log":  {gz},
		"executions/exec-g-00000[2-9]*": {gz},
		"*/*.log":                       {other, raw, gz},
		"executions/*.log.gz":           nil,
		"other/*.log":                   nil,
	} {
		got, err := d.Glob(pattern)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Glob(%q) = %v, %v; want %v", pattern, got, err, want)
		}
	}
	if _, err := d.Glob("executions/[.log"); fault.KindOf(err) != fault.InvalidParams {
		t.Fatalf("bad pattern: %v", err)
	}
	if got, err := NewDir(t.TempDir()).Glob("executions/*.log"); err != nil || len(got) != 0 {
		t.Fatalf("Glob without executions/: %v, %v", got, err)
	}
}

// TestTailReadRetired checks that reading the end of a large retired log
// inflates only the member that holds it (its speed is the benchmark's).
func TestTailReadRetired(t *testing.T) {
	d := newDir(t)
	// Sixteen members: what counts is how many, not how large.
	data := buildLog(22, 16<<16)
	name := putLog(t, d, "exec-t-000001", data)
	mustRetire(t, d, name, RetireOptions{MemberBytes: 1 << 16})
	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	buf := make([]byte, 4096)
	before := membersOpened.Load()
	n, err := v.ReadAt(buf, v.Size()-4096)
	if err != nil || !bytes.Equal(buf[:n], data[len(data)-4096:]) {
		t.Fatalf("tail ReadAt: %d, %v", n, err)
	}
	if opened := membersOpened.Load() - before; opened != 1 {
		t.Fatalf("a 4 KiB tail read of a 16-member log inflated %d members, want 1", opened)
	}
}

// sample64 is a 64 MiB build-like log, made once for the benchmarks.
var sample64 = sync.OnceValue(func() []byte { return buildLog(64, 64<<20) })

func BenchmarkRetire64MiB(b *testing.B) {
	data := sample64()
	d := newDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var res RetireResult
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := putLog(b, d, "bench-"+strconv.Itoa(i), data)
		// A settled log has long been written back; do not time that.
		syncFile(b, d.paths(name).raw)
		b.StartTimer()
		res = mustRetire(b, d, name, RetireOptions{})
	}
	b.ReportMetric(float64(res.RawBytes)/float64(res.GzipBytes), "ratio")
}

func syncFile(tb testing.TB, path string) {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkGzip1Command64MiB times `gzip -1 -c file > /dev/null` on the
// same log, to compare BenchmarkRetire64MiB with.
func BenchmarkGzip1Command64MiB(b *testing.B) {
	gz, err := exec.LookPath("gzip")
	if err != nil {
		b.Skip("no gzip command")
	}
	data := sample64()
	d := newDir(b)
	name := putLog(b, d, "bench", data)
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		cmd := exec.Command(gz, "-1", "-c", d.paths(name).raw)
		cmd.Stdout = null
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTailRead(b *testing.B) {
	data := sample64()
	d := newDir(b)
	name := putLog(b, d, "bench", data)
	mustRetire(b, d, name, RetireOptions{})
	v, err := d.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.ReadAt(buf, v.Size()-4096); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenTailRead includes opening the view (and loading the index).
func BenchmarkOpenTailRead(b *testing.B) {
	data := sample64()
	d := newDir(b)
	name := putLog(b, d, "bench", data)
	mustRetire(b, d, name, RetireOptions{})
	buf := make([]byte, 4096)
	for b.Loop() {
		v, err := d.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.ReadAt(buf, v.Size()-4096); err != nil {
			b.Fatal(err)
		}
		v.Close()
	}
}

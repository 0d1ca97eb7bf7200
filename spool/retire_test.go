package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

// newDir makes a state directory with an executions/ directory (0700).
func newDir(t testing.TB) *Dir {
	t.Helper()
	state := t.TempDir()
	if err := os.Mkdir(filepath.Join(state, logDir), 0o700); err != nil {
		t.Fatal(err)
	}
	return NewDir(state)
}

// putLog writes a raw log and returns its logical name.
func putLog(t testing.TB, d *Dir, id string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(d.execDir, id+".log"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return logDir + "/" + id + ".log"
}

// buildLog returns n bytes that look like a build's output: mostly
// repetitive compiler and test lines, with some hashes and numbers.
func buildLog(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	dirs := []string{"net/http", "internal/fault", "execution", "spool", "rpc", "cmd/mevedel-exec", "third_party/zlib", "src/core/util", "lib/parser", "vendor/golang.org/x/sys/unix"}
	files := []string{"main", "server", "client", "buffer", "parser", "lexer", "session", "spool", "retire", "fault", "util", "hash"}
	words := []string{"unused variable", "comparison of integers of different signs", "implicit conversion loses precision", "deprecated declaration", "unreachable code"}
	var b bytes.Buffer
	b.Grow(n + 512)
	for i := 0; b.Len() < n; i++ {
		dir, file := dirs[r.IntN(len(dirs))], files[r.IntN(len(files))]
		switch r.IntN(10) {
		case 0, 1, 2:
			fmt.Fprintf(&b, "[%3d%%] Building CXX object %s/CMakeFiles/%s.dir/%s_%d.cc.o\n", i*100/(n/60+1)%101, dir, file, file, r.IntN(40))
		case 3:
			fmt.Fprintf(&b, "gcc -O2 -g -Wall -Wextra -fPIC -I/usr/include/%s -Iinclude -DNDEBUG -c %s/%s.c -o build/%s/%s.o\n", dir, dir, file, dir, file)
		case 4:
			fmt.Fprintf(&b, "%s/%s.c:%d:%d: warning: %s [-W%s]\n", dir, file, r.IntN(3000)+1, r.IntN(80)+1, words[r.IntN(len(words))], file)
		case 5:
			fmt.Fprintf(&b, "ok  \tgithub.com/example/project/%s\t%d.%03ds\n", dir, r.IntN(20), r.IntN(1000))
		case 6:
			fmt.Fprintf(&b, "2025-03-%02dT12:%02d:%02d.%03dZ INFO fetched %s sha256:%016x%016x\n", r.IntN(28)+1, r.IntN(60), r.IntN(60), r.IntN(1000), file, r.Uint64(), r.Uint64())
		case 7:
			fmt.Fprintf(&b, "    at com.example.%s.%s.run(%s.java:%d)\n", strings.ReplaceAll(dir, "/", "."), file, file, r.IntN(900)+1)
		case 8:
			fmt.Fprintf(&b, "--- PASS: Test%s_%d (%d.%02ds)\n", strings.ToUpper(file[:1])+file[1:], r.IntN(50), r.IntN(3), r.IntN(100))
		default:
			fmt.Fprintf(&b, "Downloading %s-%d.%d.%d.tar.gz %d/%d kB\n", file, r.IntN(3), r.IntN(20), r.IntN(10), r.IntN(5000), 5000)
		}
	}
	return b.Bytes()[:n]
}

// base64Log returns n bytes of base64-encoded random data in 76-column
// lines, as a command dumping a binary would print.
func base64Log(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	raw := make([]byte, n*3/4+64)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	enc := base64.StdEncoding.EncodeToString(raw)
	var b bytes.Buffer
	for len(enc) > 0 && b.Len() < n {
		k := min(76, len(enc))
		b.WriteString(enc[:k])
		b.WriteByte('\n')
		enc = enc[k:]
	}
	return b.Bytes()[:n]
}

func exists(t testing.TB, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func mustRetire(t testing.TB, d *Dir, name string, opts RetireOptions) RetireResult {
	t.Helper()
	res, err := d.Retire(name, opts)
	if err != nil {
		t.Fatalf("Retire(%s): %v", name, err)
	}
	if !res.Retired {
		t.Fatalf("Retire(%s) did not retire: %s", name, res.Reason)
	}
	return res
}

func TestRetireCompressible(t *testing.T) {
	t.Parallel()
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	d := newDir(t)
	data := buildLog(1, 3<<20+12345)
	name := putLog(t, d, "exec-a-000001", data)
	p := d.paths(name)
	mtime := mustStat(t, p.raw).ModTime()

	res := mustRetire(t, d, name, RetireOptions{})
	if !res.RawRemoved || res.RawBytes != int64(len(data)) || res.Members != 4 {
		t.Fatalf("result %+v", res)
	}
	if exists(t, p.raw) || exists(t, p.tmp) || exists(t, p.gziTmp) {
		t.Fatal("raw or temporary file left behind")
	}
	for _, f := range []string{p.gz, p.gzi} {
		st := mustStat(t, f)
		if m := st.Mode().Perm(); m != 0o600 {
			t.Fatalf("%s mode %o, want 600", f, m)
		}
	}
	gzSt, gziSt := mustStat(t, p.gz), mustStat(t, p.gzi)
	if res.GzipBytes != gzSt.Size()+gziSt.Size() || res.GzipBytes >= int64(len(data))/2 {
		t.Fatalf("GzipBytes %d, files %d+%d, raw %d", res.GzipBytes, gzSt.Size(), gziSt.Size(), len(data))
	}
	if !gzSt.ModTime().Equal(mtime) {
		t.Fatalf("gz mtime %v, raw had %v", gzSt.ModTime(), mtime)
	}

	// Standard tools read it as one stream.
	gz, err := exec.LookPath("gzip")
	if err != nil {
		t.Fatal("gzip is needed to check that standard tools read retired logs")
	}
	out, err := exec.Command(gz, "-dc", p.gz).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Fatalf("gzip -dc gave %d bytes, differing from the %d raw bytes", len(out), len(data))
	}
}

func mustStat(t testing.TB, path string) os.FileInfo {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRetireIncompressibleStaysRaw(t *testing.T) {
	t.Parallel()
	random := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 3))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"base64", base64Log(2, 1<<20)},
		{"binary", random},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDir(t)
			name := putLog(t, d, "exec-a-000002", tc.data)
			p := d.paths(name)
			res, err := d.Retire(name, RetireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Retired || !strings.Contains(res.Reason, "not smaller") {
				t.Fatalf("result %+v, want not smaller", res)
			}
			if exists(t, p.gz) || exists(t, p.gzi) || exists(t, p.tmp) || exists(t, p.gziTmp) {
				t.Fatal("compressed or temporary file left behind")
			}
			got, err := os.ReadFile(p.raw)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("raw file changed: %v", err)
			}
		})
	}
}

func TestRetireSizeBounds(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	small := putLog(t, d, "small", buildLog(4, MinRetireBytes-1))
	res, err := d.Retire(small, RetireOptions{})
	if err != nil || res.Retired || !strings.Contains(res.Reason, "too small") {
		t.Fatalf("small: %+v, %v", res, err)
	}
	edge := putLog(t, d, "edge", buildLog(5, MinRetireBytes))
	mustRetire(t, d, edge, RetireOptions{})

	// Too large is decided from the size alone: a sparse file will do.
	large := putLog(t, d, "large", nil)
	if err := os.Truncate(d.paths(large).raw, MaxRetireBytes+1); err != nil {
		t.Fatal(err)
	}
	res, err = d.Retire(large, RetireOptions{})
	if err != nil || res.Retired || !strings.Contains(res.Reason, "too large") {
		t.Fatalf("large: %+v, %v", res, err)
	}
	for _, n := range []string{small, large} {
		if exists(t, d.paths(n).gz) || !exists(t, d.paths(n).raw) {
			t.Fatalf("%s: skipped log was touched", n)
		}
	}
}

func TestRetireVerificationFailureKeepsRaw(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		corrupt func(path string) error
	}{
		{"flipped data byte", func(path string) error { return flipByte(path, 0.5) }},
		{"flipped trailer byte", func(path string) error { return flipByte(path, -5) }},
		{"stray bytes", func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("junk"))
			return err
		}},
		{"truncated", func(path string) error {
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			return os.Truncate(path, st.Size()-100)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDir(t)
			data := buildLog(6, 2<<20)
			name := putLog(t, d, "exec-v-000001", data)
			p := d.paths(name)
			d.beforeVerify = tc.corrupt
			res, err := d.Retire(name, RetireOptions{})
			if err == nil || fault.KindOf(err) != fault.IO || !strings.Contains(err.Error(), "verification failed") {
				t.Fatalf("Retire = %+v, %v; want a verification failure", res, err)
			}
			if res.Retired {
				t.Fatal("reported retired")
			}
			if exists(t, p.gz) || exists(t, p.gzi) || exists(t, p.tmp) || exists(t, p.gziTmp) {
				t.Fatal("compressed or temporary file left behind")
			}
			got, err := os.ReadFile(p.raw)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("raw file changed: %v", err)
			}
			// A later retirement without the damage succeeds.
			d.beforeVerify = nil
			mustRetire(t, d, name, RetireOptions{})
		})
	}
}

// flipByte inverts one byte of the file: at fraction at of its length, or
// when at is negative, -at bytes from its end.
func flipByte(path string, at float64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := int(at * float64(len(b)))
	if at < 0 {
		i = len(b) + int(at)
	}
	b[i] ^= 0xff
	return os.WriteFile(path, b, 0o600)
}

func TestLeaseDefersRawRemoval(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(7, 1<<20+777)
	name := putLog(t, d, "exec-l-000001", data)
	p := d.paths(name)

	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	release, err := d.Lease("artifact://" + name)
	if err != nil {
		t.Fatal(err)
	}
	res := mustRetire(t, d, name, RetireOptions{})
	if res.RawRemoved || !exists(t, p.raw) || !exists(t, p.gz) {
		t.Fatalf("raw removed under a lease: %+v", res)
	}
	st, err := d.Stat(name)
	if err != nil || st.Form != FormRaw || !st.Retired {
		t.Fatalf("Stat = %+v, %v; want raw and retired", st, err)
	}
	again, err := d.Retire(name, RetireOptions{})
	if err != nil || again.Retired || !strings.Contains(again.Reason, "already retired") {
		t.Fatalf("second Retire = %+v, %v", again, err)
	}
	checkView(t, v, data)

	// A reader arriving now still gets the raw file, and leases it too.
	v2, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Form() != FormRaw {
		t.Fatalf("form %s, want raw while it exists", v2.Form())
	}
	v.Close()
	v.Close() // idempotent: must not release twice
	release()
	if !exists(t, p.raw) {
		t.Fatal("raw removed while a view still held it")
	}
	checkView(t, v2, data)
	v2.Close()
	if exists(t, p.raw) {
		t.Fatal("raw still there after the last lease was released")
	}
	release() // idempotent
	v3, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v3.Close()
	if v3.Form() != FormGzip {
		t.Fatalf("form %s, want gzip", v3.Form())
	}
	checkView(t, v3, data)
	leases.mu.Lock()
	e := *leases.m[p.raw]
	leases.mu.Unlock()
	if e.n != 1 || e.pending != nil { // v3's lease only
		t.Fatalf("registry entry %+v, want one lease", e)
	}
}

func TestLeasesConcurrent(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	name := putLog(t, d, "exec-c-000001", buildLog(8, 512<<10))
	p := d.paths(name)
	hold, err := d.Lease(name)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				rel, err := d.Lease(name)
				if err != nil {
					t.Error(err)
					return
				}
				rel()
				rel()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := d.Retire(name, RetireOptions{MemberBytes: 64 << 10}); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	if !exists(t, p.raw) {
		t.Fatal("raw removed while a lease was held")
	}
	hold()
	if exists(t, p.raw) {
		t.Fatal("raw still there after the last lease was released")
	}
}

func TestRetireMissingAndRefused(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	if _, err := d.Retire("executions/nope.log", RetireOptions{}); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("missing: %v, want not-found", err)
	}
	if _, err := d.Retire("executions/../x.log", RetireOptions{}); fault.KindOf(err) != fault.Refused {
		t.Fatalf("escape: %v, want refused", err)
	}
	outside := filepath.Join(t.TempDir(), "secret.log")
	if err := os.WriteFile(outside, buildLog(9, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(d.execDir, "link.log")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Retire("executions/link.log", RetireOptions{}); fault.KindOf(err) != fault.Refused {
		t.Fatalf("symlink: %v, want refused", err)
	}
	if exists(t, outside+gzExt) || exists(t, filepath.Join(d.execDir, "link.log.gz")) {
		t.Fatal("a symlinked log was compressed")
	}
}

// TestRetireWhileReading retires a log while readers open, read and close
// it; every read must see the same bytes whatever form it got.
func TestRetireWhileReading(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(10, 2<<20+99)
	name := putLog(t, d, "exec-r-000001", data)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 0))
			buf := make([]byte, 10000)
			for i := 0; ; i++ {
				select {
				case <-done:
					if i > 0 {
						return
					}
				default:
				}
				v, err := d.Open(name)
				if err != nil {
					t.Error(err)
					return
				}
				off := r.Int64N(int64(len(data)))
				n, err := v.ReadAt(buf, off)
				want := data[off:min(int64(len(data)), off+int64(len(buf)))]
				if !bytes.Equal(buf[:n], want) || (n < len(buf)) != (err != nil) {
					t.Errorf("%s ReadAt(%d) = %d, %v: wrong bytes", v.Form(), off, n, err)
				}
				v.Close()
			}
		}()
	}
	mustRetire(t, d, name, RetireOptions{MemberBytes: 128 << 10})
	close(done)
	wg.Wait()
	if exists(t, d.paths(name).raw) {
		t.Fatal("raw left after all readers closed")
	}
}

// TestRetireRawChangedKeepsRaw: a log written to during retirement is not
// settled; the retirement must give up and keep it.
func TestRetireRawChangedKeepsRaw(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(23, 1<<20)
	name := putLog(t, d, "exec-w-000001", data)
	p := d.paths(name)
	d.beforeVerify = func(string) error {
		f, err := os.OpenFile(p.raw, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.Write([]byte("late output\n"))
		return err
	}
	res, err := d.Retire(name, RetireOptions{})
	if fault.KindOf(err) != fault.IO || !strings.Contains(err.Error(), "changed") || res.Retired {
		t.Fatalf("Retire = %+v, %v; want a changed-raw failure", res, err)
	}
	if exists(t, p.gz) || exists(t, p.gzi) || exists(t, p.tmp) || exists(t, p.gziTmp) {
		t.Fatal("compressed or temporary file left behind")
	}
	got, err := os.ReadFile(p.raw)
	if err != nil || !bytes.Equal(got, append(data, "late output\n"...)) {
		t.Fatalf("raw file lost bytes: %v", err)
	}
}

// TestRetireAfterInterruption: a retirement cut short after the swap (raw
// and .gz both there, nothing pending) or before it (stale temporary files)
// is finished by the next Retire.
func TestRetireAfterInterruption(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(24, 1<<20+1)
	name := putLog(t, d, "exec-x-000001", data)
	p := d.paths(name)
	mustRetire(t, d, name, RetireOptions{MemberBytes: 256 << 10})
	if err := os.WriteFile(p.raw, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p.tmp, p.gziTmp} {
		if err := os.WriteFile(f, []byte("stale"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	res := mustRetire(t, d, name, RetireOptions{})
	if !res.RawRemoved || exists(t, p.raw) || exists(t, p.tmp) || exists(t, p.gziTmp) {
		t.Fatalf("after re-retirement: %+v", res)
	}
	res, err := d.Retire(name, RetireOptions{})
	if err != nil || res.Retired || res.Reason != "already retired" {
		t.Fatalf("third Retire = %+v, %v", res, err)
	}
	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if len(v.idx.members) != 2 {
		t.Fatalf("%d members, want the 2 of the last retirement", len(v.idx.members))
	}
	checkView(t, v, data)
}

// TestMemberCheckRejects: the check each compressing goroutine makes before
// a member is written refuses a member that inflates to other bytes, to
// fewer or more bytes, or carries anything after its trailer.
func TestMemberCheckRejects(t *testing.T) {
	t.Parallel()
	in := buildLog(31, 100<<10)
	var comp bytes.Buffer
	zw, err := gzip.NewWriterLevel(&comp, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zr, br := new(gzip.Reader), new(bytes.Reader)
	if err := inflatesTo(zr, br, comp.Bytes(), in); err != nil {
		t.Fatalf("a sound member: %v", err)
	}
	other := bytes.Clone(in)
	other[len(other)/2] ^= 1
	flipped := bytes.Clone(comp.Bytes())
	flipped[len(flipped)/2] ^= 0xff
	for _, tc := range []struct {
		name       string
		comp, want []byte
	}{
		{"other bytes", comp.Bytes(), other},
		{"longer input", comp.Bytes(), append(bytes.Clone(in), 'x')},
		{"shorter input", comp.Bytes(), in[:len(in)-1]},
		{"stray bytes", append(bytes.Clone(comp.Bytes()), "junk"...), in},
		{"damaged data", flipped, in},
		{"cut short", comp.Bytes()[:comp.Len()-3], in},
	} {
		if err := inflatesTo(zr, br, tc.comp, tc.want); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestVersionOneIndexStillRead: an index an earlier helper wrote (version
// 1, with the log's SHA-256 before the member count) is still used, not
// rebuilt, and the log reads whole through it.
func TestVersionOneIndexStillRead(t *testing.T) {
	t.Parallel()
	d := newDir(t)
	data := buildLog(37, 3<<20+123)
	name := putLog(t, d, "exec-o-000001", data)
	mustRetire(t, d, name, RetireOptions{})
	p := d.paths(name)
	b, err := os.ReadFile(p.gzi)
	if err != nil {
		t.Fatal(err)
	}
	// The same index as version 1 wrote it.
	sum := sha256.Sum256(data)
	old := append([]byte{}, b[:7]...)
	old = append(old, 1)
	old = append(old, b[8:24]...)
	old = append(old, sum[:]...)
	old = append(old, b[24:len(b)-4]...)
	old = binary.LittleEndian.AppendUint32(old, crc32.ChecksumIEEE(old))
	if err := os.WriteFile(p.gzi, old, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := d.Stat(name)
	if err != nil || st.Unindexed || st.Size != int64(len(data)) || !st.Retired {
		t.Fatalf("Stat = %+v, %v; want an indexed retired log of %d bytes", st, err, len(data))
	}
	v, err := d.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, err := io.ReadAll(v.Reader())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the log's %d", len(got), err, len(data))
	}
	// A version this build does not know is rebuilt from the members.
	old[7] = 9
	old = binary.LittleEndian.AppendUint32(old[:len(old)-4], crc32.ChecksumIEEE(old[:len(old)-4]))
	if err := os.WriteFile(p.gzi, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Stat(name); err != nil || !st.Unindexed {
		t.Fatalf("Stat with an unknown index version = %+v, %v; want unindexed", st, err)
	}
}

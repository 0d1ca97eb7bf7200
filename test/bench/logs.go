package main

// The logs benchmark: spool/grep over a corpus of half raw, half retired
// build logs against rg -z and zgrep; retirement of a 64 MiB log against
// gzip -1; and reading the tail of a retired 64 MiB log.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/spool"
)

const (
	corpusFiles     = 100
	corpusFileBytes = mib
	bigLogBytes     = 64 * mib // spool.MaxRetireBytes: the largest log retired

	grepRuns       = 5
	retireRuns     = 3
	tailReads      = 50
	tailBytes      = 4 << 10
	tailZcatRuns   = 3
	grepMaxMatches = 100000
	stageRuns      = 3 // in-process cost breakdown, at most
	inProcessRuns  = 3 // in-process GrepLogs

	// corpusSeed fixes the generated text: every run greps the same bytes.
	corpusSeed uint64 = 0x6d65766564656c

	targetGrepRatio   = 0.5 // helper grep time over rg -z time, at most
	targetRetireRatio = 2.0 // Retire MB/s over gzip -1 MB/s, at least
	targetTailRead    = 5 * time.Millisecond

	// logsDiskNeed is what the logs benchmark writes at most, with room.
	logsDiskNeed = 512 * mib
)

// grepPattern is one pattern searched by all three tools. It must mean the
// same in RE2, Rust's regex (rg) and GNU grep -E.
type grepPattern struct {
	label   string
	pattern string
	// expected counts the matching lines the generator wrote.
	expected func(lineCounts) int
}

var grepPatterns = []grepPattern{
	{
		label:    "literal-prefixed",
		pattern:  `error: undefined reference to \S+`,
		expected: func(c lineCounts) int { return c.undefRef },
	},
	{
		label:    "alternation",
		pattern:  `FAIL|error: `,
		expected: func(c lineCounts) int { return c.undefRef + c.compileErr + c.failTest + c.failPkg },
	},
}

// --- generated build logs ----------------------------------------------------

// lineCounts counts the lines a generator wrote, the rare ones by kind.
type lineCounts struct {
	lines                                   int
	undefRef, compileErr, failTest, failPkg int
}

func (c *lineCounts) add(o lineCounts) {
	c.lines += o.lines
	c.undefRef += o.undefRef
	c.compileErr += o.compileErr
	c.failTest += o.failTest
	c.failPkg += o.failPkg
}

const (
	kindCommon = iota
	kindUndefRef
	kindCompileErr
	kindFailTest
	kindFailPkg
)

var (
	genDirs  = []string{"core", "net", "http", "storage", "crypto", "parser", "util", "ui", "sched", "index"}
	genFiles = []string{"alloc", "buffer", "cache", "codec", "conn", "hash", "lexer", "main", "pool", "queue", "router", "session", "stream", "table", "token", "worker"}
	genTests = []string{"TestParse", "TestRoundTrip", "TestCacheEvict", "TestConnReuse", "TestHashStable", "TestRouterMatch", "TestQueueOrder", "TestTokenize", "TestSessionResume", "TestStreamBackpressure"}
	genPkgs  = []string{"acme/core", "acme/net", "acme/http/router", "acme/storage/btree", "acme/crypto/aead", "acme/parser", "acme/util/xsync", "acme/sched"}
	genIdent = []string{"ctx", "buf", "node", "key", "fd", "tmp", "state", "len2", "hdr", "cursor"}
	genWarns = []string{
		"unused variable '%' [-Wunused-variable]",
		"comparison of integer expressions of different signedness: 'int' and 'size_t' [-Wsign-compare]",
		"'%' may be used uninitialized in this function [-Wmaybe-uninitialized]",
		"this statement may fall through [-Wimplicit-fallthrough=]",
		"unused parameter '%' [-Wunused-parameter]",
	}
	genBase = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
)

// logGen writes deterministic build-log-like text: compiler invocations,
// warnings, test RUN/PASS lines, cache lines with hex ids, and rarely the
// errors and failures the grep patterns look for.
type logGen struct {
	r  *rand.Rand
	ms int64 // the clock, in milliseconds after genBase
}

func newLogGen(stream uint64) *logGen {
	return &logGen{r: rand.New(rand.NewPCG(corpusSeed, stream))}
}

func (g *logGen) pick(s []string) string { return s[g.r.IntN(len(s))] }

func (g *logGen) stamp(b []byte) []byte {
	g.ms += int64(g.r.IntN(25))
	b = genBase.Add(time.Duration(g.ms)*time.Millisecond).AppendFormat(b, "2006-01-02T15:04:05.000")
	return append(b, "Z "...)
}

func appendHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*i))&0xf])
	}
	return b
}

func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// appendSource appends "src/<dir>/<file>.c:<line>:<col>: ".
func (g *logGen) appendSource(b []byte) []byte {
	b = append(b, "src/"...)
	b = append(b, g.pick(genDirs)...)
	b = append(b, '/')
	b = append(b, g.pick(genFiles)...)
	b = append(b, ".c:"...)
	b = appendInt(b, 1+g.r.IntN(2400))
	b = append(b, ':')
	b = appendInt(b, 1+g.r.IntN(80))
	return append(b, ": "...)
}

// line appends one line, newline included, and says what kind it is.
func (g *logGen) line(b []byte) ([]byte, int) {
	r := g.r
	switch x := r.IntN(100000); {
	case x < 17:
		b = append(b, "/usr/bin/ld: build/"...)
		b = append(b, g.pick(genDirs)...)
		b = append(b, '/')
		b = append(b, g.pick(genFiles)...)
		b = append(b, ".o: in function `"...)
		b = append(b, g.pick(genFiles)...)
		b = append(b, "_init': error: undefined reference to `"...)
		b = append(b, g.pick(genDirs)...)
		b = append(b, '_')
		b = appendHex(b, r.Uint64(), 6)
		return append(b, "'\n"...), kindUndefRef
	case x < 27:
		b = g.appendSource(b)
		b = append(b, "error: '"...)
		b = append(b, g.pick(genIdent)...)
		return append(b, "' undeclared (first use in this function)\n"...), kindCompileErr
	case x < 40:
		b = append(b, "    --- FAIL: "...)
		b = append(b, g.pick(genTests)...)
		b = append(b, "/case_"...)
		b = appendInt(b, r.IntN(64))
		b = append(b, " ("...)
		b = appendInt(b, r.IntN(5))
		b = append(b, '.')
		b = appendHex(b, uint64(r.IntN(256)), 2)
		return append(b, "s)\n"...), kindFailTest
	case x < 45:
		b = append(b, "FAIL\tgithub.com/"...)
		b = append(b, g.pick(genPkgs)...)
		b = append(b, '\t')
		b = appendInt(b, r.IntN(20))
		b = append(b, ".0"...)
		b = appendInt(b, 10+r.IntN(90))
		return append(b, "s\n"...), kindFailPkg
	}
	switch y := r.IntN(1000); {
	case y < 300:
		b = g.stamp(b)
		dir, file := g.pick(genDirs), g.pick(genFiles)
		b = append(b, "[cc] gcc -O2 -g -Wall -Wextra -Iinclude -c src/"...)
		b = append(b, dir...)
		b = append(b, '/')
		b = append(b, file...)
		b = append(b, ".c -o build/"...)
		b = append(b, dir...)
		b = append(b, '/')
		b = append(b, file...)
		b = append(b, ".o\n"...)
	case y < 380:
		b = g.appendSource(b)
		b = append(b, "warning: "...)
		w := g.pick(genWarns)
		if before, after, ok := strings.Cut(w, "%"); ok {
			b = append(b, before...)
			b = append(b, g.pick(genIdent)...)
			b = append(b, after...)
		} else {
			b = append(b, w...)
		}
		b = append(b, '\n')
	case y < 600:
		b = append(b, "=== RUN   "...)
		b = append(b, g.pick(genTests)...)
		b = append(b, "/case_"...)
		b = appendInt(b, r.IntN(64))
		b = append(b, '\n')
	case y < 820:
		b = append(b, "    --- PASS: "...)
		b = append(b, g.pick(genTests)...)
		b = append(b, "/case_"...)
		b = appendInt(b, r.IntN(64))
		b = append(b, " (0."...)
		b = appendInt(b, 10+r.IntN(90))
		b = append(b, "s)\n"...)
	case y < 850:
		b = append(b, "ok  \tgithub.com/"...)
		b = append(b, g.pick(genPkgs)...)
		b = append(b, '\t')
		b = appendInt(b, r.IntN(4))
		b = append(b, '.')
		b = appendInt(b, 100+r.IntN(900))
		b = append(b, "s\n"...)
	case y < 950:
		b = g.stamp(b)
		b = append(b, "INFO  [worker-"...)
		b = appendInt(b, r.IntN(8))
		if r.IntN(4) == 0 {
			b = append(b, "] cache miss action="...)
		} else {
			b = append(b, "] cache hit action="...)
		}
		b = appendHex(b, r.Uint64(), 16)
		b = append(b, " output="...)
		b = appendHex(b, r.Uint64(), 16)
		b = appendHex(b, r.Uint64(), 16)
		b = appendHex(b, r.Uint64(), 8)
		b = append(b, '\n')
	default:
		b = g.stamp(b)
		b = append(b, "[ld] linking build/bin/"...)
		b = append(b, g.pick(genFiles)...)
		b = append(b, " ("...)
		b = appendInt(b, 10+r.IntN(300))
		b = append(b, " objects, "...)
		b = appendInt(b, 100+r.IntN(9000))
		b = append(b, " KiB)\n"...)
	}
	return b, kindCommon
}

// fill returns exactly size bytes of whole lines: the last line is a filler
// that matches no pattern.
func (g *logGen) fill(size int) ([]byte, lineCounts) {
	buf := make([]byte, 0, size+1024)
	var c lineCounts
	for {
		n := len(buf)
		next, kind := g.line(buf)
		if len(next) > size {
			buf = next[:n]
			break
		}
		buf = next
		c.lines++
		switch kind {
		case kindUndefRef:
			c.undefRef++
		case kindCompileErr:
			c.compileErr++
		case kindFailTest:
			c.failTest++
		case kindFailPkg:
			c.failPkg++
		}
	}
	if pad := size - len(buf); pad > 0 {
		buf = append(buf, '#')
		buf = append(buf, bytes.Repeat([]byte{'-'}, pad-1)...)
		buf[len(buf)-1] = '\n'
		c.lines++
	}
	return buf, c
}

// writePrivate creates path (mode 0600, which must not exist) holding b.
func writePrivate(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// makeStateDir makes stateDir and its executions directory, mode 0700.
func makeStateDir(stateDir string) (string, error) {
	execDir := filepath.Join(stateDir, "executions")
	for _, d := range []string{stateDir, execDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return "", err
		}
	}
	return execDir, nil
}

// --- the benchmark -----------------------------------------------------------

type logsBench struct {
	*bench
	home string

	rg      string // path of rg, "" when missing
	rgNote  string // why rg is missing
	corpus  corpus
	bigName string // logical name of the 64 MiB log, in stateBig
	// stateBig holds the 64 MiB log; master is its content outside it.
	stateBig, master string
	masterTail       []byte

	h          *helper
	sCorpus    *session
	sBig       *session
	grepMissed []bool // per pattern: the helper missed the grep target
}

type corpus struct {
	stateDir, execDir string
	names             []string // logical names, sorted
	raw, gz           []string // logical names by physical form
	counts            lineCounts
	physical          int64
}

func (b *bench) logs(ctx context.Context) ([]row, error) {
	if n, err := freeBytes(b.work); err == nil && n < logsDiskNeed+diskMargin {
		return nil, fmt.Errorf("logs: only %.2f GiB free in %s; the logs benchmark needs %.2f GiB",
			float64(n)/gib, b.work, float64(logsDiskNeed+diskMargin)/gib)
	}
	home, err := b.newHome("logs")
	if err != nil {
		return nil, err
	}
	lb := &logsBench{bench: b, home: home}
	if err := lb.tools(ctx); err != nil {
		return nil, err
	}
	if err := lb.makeCorpus(); err != nil {
		return nil, fmt.Errorf("logs: corpus: %w", err)
	}
	if err := lb.makeBig(); err != nil {
		return nil, fmt.Errorf("logs: 64 MiB log: %w", err)
	}

	var rows []row
	err = lb.withHelper(ctx, func() error {
		for _, p := range grepPatterns {
			r, missed, err := lb.grep(ctx, p)
			if err != nil {
				return fmt.Errorf("grep %q: %w", p.pattern, err)
			}
			lb.grepMissed = append(lb.grepMissed, missed)
			rows = append(rows, r...)
		}
		r, err := lb.retire(ctx)
		if err != nil {
			return fmt.Errorf("retirement: %w", err)
		}
		rows = append(rows, r...)
		r, err = lb.tail(ctx)
		if err != nil {
			return fmt.Errorf("tail read: %w", err)
		}
		rows = append(rows, r...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	// The helper has let go of the corpus: the same grep in this process,
	// and where its time goes.
	if err := lb.grepInProcess(ctx); err != nil {
		return nil, fmt.Errorf("logs: in-process grep: %w", err)
	}
	return rows, nil
}

// tools finds rg (installing it when missing and running as root), zgrep,
// gzip and zcat, and prints their versions.
func (lb *logsBench) tools(ctx context.Context) error {
	for _, t := range []string{"zgrep", "gzip", "zcat", "tail"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("logs: %s is needed for a baseline: %w", t, err)
		}
	}
	rg, err := exec.LookPath("rg")
	if err != nil && os.Geteuid() == 0 {
		progress("rg is missing: installing ripgrep with apt-get")
		install := func(args ...string) error {
			cmd := exec.CommandContext(ctx, "apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			return cmd.Run()
		}
		if install("install", "-y", "ripgrep") != nil {
			_ = install("update")
			_ = install("install", "-y", "ripgrep")
		}
		rg, err = exec.LookPath("rg")
	}
	if err != nil {
		lb.rgNote = "rg (ripgrep) is not installed"
		if os.Geteuid() != 0 {
			lb.rgNote += " and this is not root, so it was not installed; run `apt-get install ripgrep` as root for the rg -z baseline"
		} else {
			lb.rgNote += " and `apt-get install -y ripgrep` failed; the rg -z baseline is skipped"
		}
		fmt.Printf("logs: %s\n", lb.rgNote)
	}
	lb.rg = rg
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return "?"
		}
		line, _, _ := strings.Cut(string(out), "\n")
		return strings.TrimSpace(line)
	}
	if lb.rg != "" {
		fmt.Printf("rg:       %s\n", first(lb.rg, "--version"))
	}
	fmt.Printf("gzip:     %s (zgrep and zcat are its scripts)\n", first("gzip", "--version"))
	fmt.Printf("grep:     %s\n", first("grep", "--version"))
	return nil
}

// makeCorpus writes the grep corpus into a fresh state directory, as logs
// of an earlier open of the session, and retires every other one.
func (lb *logsBench) makeCorpus() error {
	c := &lb.corpus
	c.stateDir = filepath.Join(lb.work, "logs-grep-state")
	execDir, err := makeStateDir(c.stateDir)
	if err != nil {
		return err
	}
	c.execDir = execDir
	progress("writing the grep corpus: %d x %d bytes into %s", corpusFiles, corpusFileBytes, execDir)
	t0 := time.Now()
	for i := range corpusFiles {
		id := fmt.Sprintf("exec-bench-%06d", i+1)
		data, counts := newLogGen(uint64(i + 1)).fill(corpusFileBytes)
		if err := writePrivate(filepath.Join(execDir, id+".log"), data); err != nil {
			return err
		}
		c.counts.add(counts)
		c.names = append(c.names, "executions/"+id+".log")
	}
	gen := time.Since(t0)
	d := spool.NewDir(c.stateDir)
	t0 = time.Now()
	for i, name := range c.names {
		if i%2 == 0 {
			c.raw = append(c.raw, name)
			continue
		}
		res, err := d.Retire(name, spool.RetireOptions{})
		if err != nil {
			return err
		}
		if !res.Retired || !res.RawRemoved {
			return fmt.Errorf("retiring %s: retired=%v rawRemoved=%v reason=%q", name, res.Retired, res.RawRemoved, res.Reason)
		}
		c.gz = append(c.gz, name)
		c.physical += res.GzipBytes
	}
	retire := time.Since(t0)
	c.physical += int64(len(c.raw)) * corpusFileBytes
	syscall.Sync()
	fmt.Printf("corpus: %d logs x %d bytes (%d raw, %d retired to .log.gz + .log.gzi; %.1f MiB on disk), %d lines; generated in %s, %d retired in %s\n",
		corpusFiles, corpusFileBytes, len(c.raw), len(c.gz), float64(c.physical)/mib, c.counts.lines,
		gen.Round(time.Millisecond), len(c.gz), retire.Round(time.Millisecond))
	fmt.Printf("corpus: rare lines written: %d undefined-reference errors, %d compile errors, %d test FAIL, %d package FAIL\n",
		c.counts.undefRef, c.counts.compileErr, c.counts.failTest, c.counts.failPkg)
	return nil
}

// makeBig writes the 64 MiB log's content outside any state directory; each
// retirement run copies it in.
func (lb *logsBench) makeBig() error {
	lb.stateBig = filepath.Join(lb.work, "logs-retire-state")
	if _, err := makeStateDir(lb.stateBig); err != nil {
		return err
	}
	lb.bigName = "executions/exec-retire-000001.log"
	lb.master = filepath.Join(lb.work, "logs-64MiB.log")
	progress("writing the %d byte log %s", bigLogBytes, lb.master)
	data, _ := newLogGen(1 << 20).fill(bigLogBytes)
	lb.masterTail = slices.Clone(data[len(data)-tailBytes:])
	return writePrivate(lb.master, data)
}

// withHelper starts a helper with both sessions open, runs f and shuts the
// helper down.
func (lb *logsBench) withHelper(ctx context.Context, f func() error) (err error) {
	h, err := startHelper(ctx, lb.bin, lb.home)
	if err != nil {
		return err
	}
	lb.h = h
	defer func() {
		if cerr := h.close(); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			if tail := h.stderrTail(); tail != "" {
				err = fmt.Errorf("%w\nhelper stderr (tail):\n%s", err, tail)
			}
		}
		lb.h, lb.sCorpus, lb.sBig = nil, nil, nil
	}()
	if lb.sCorpus, err = h.open(ctx, lb.corpus.stateDir, execution.Limits{}); err != nil {
		return err
	}
	if lb.sBig, err = h.open(ctx, lb.stateBig, execution.Limits{}); err != nil {
		return err
	}
	return f()
}

// --- 1. grep -----------------------------------------------------------------

// lineCounter counts the lines written to it.
type lineCounter struct{ n int }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

// runTool times one baseline command, its output going to out (nil means
// /dev/null). Exit status 1 (no line selected, for grep and rg) is not an
// error: the match counts are compared separately.
func (lb *logsBench) runTool(ctx context.Context, out io.Writer, name string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = minimalEnv(lb.home)
	cmd.Dir = lb.home
	cmd.Stdout = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 && stderr.Len() == 0 {
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

func (lb *logsBench) helperGrep(ctx context.Context, pattern string) (time.Duration, int, error) {
	var res spool.GrepResult
	t0 := time.Now()
	err := lb.h.call(ctx, rpc.MethodSpoolGrep, rpc.SpoolGrepParams{
		SessionID: lb.sCorpus.id, Authority: rpc.Authority{As: "user"},
		Pattern: pattern, MaxMatches: grepMaxMatches,
	}, &res)
	d := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if res.Truncated {
		return 0, 0, fmt.Errorf("the grep was truncated at %d matches", grepMaxMatches)
	}
	n := 0
	for _, m := range res.Matches {
		if !m.Context {
			n++
		}
	}
	return d, n, nil
}

// grepFiles are the corpus files zgrep is given: the logs, raw and
// compressed, not the indexes.
func (lb *logsBench) grepFiles() []string {
	var files []string
	for _, n := range lb.corpus.names {
		file := filepath.Join(lb.corpus.stateDir, n)
		if slices.Contains(lb.corpus.gz, n) {
			file += ".gz"
		}
		files = append(files, file)
	}
	return files
}

func (lb *logsBench) grep(ctx context.Context, p grepPattern) ([]row, bool, error) {
	progress("grep %q: 1 warm-up + %d x (helper spool/grep, rg -z, zgrep)", p.pattern, grepRuns)
	rgArgs := []string{"-z", "-n", "-e", p.pattern, lb.corpus.execDir}
	zgrepArgs := append([]string{"-n", "-E", "-e", p.pattern}, lb.grepFiles()...)

	// The warm-up runs count the matching lines.
	want := p.expected(lb.corpus.counts)
	_, helperN, err := lb.helperGrep(ctx, p.pattern)
	if err != nil {
		return nil, false, err
	}
	rgN := -1
	if lb.rg != "" {
		var c lineCounter
		if _, err := lb.runTool(ctx, &c, lb.rg, rgArgs...); err != nil {
			return nil, false, err
		}
		rgN = c.n
	}
	var zc lineCounter
	if _, err := lb.runTool(ctx, &zc, "zgrep", zgrepArgs...); err != nil {
		return nil, false, err
	}
	agree := helperN == want && zc.n == want && (rgN == want || lb.rg == "")
	rgCount := "skipped"
	if rgN >= 0 {
		rgCount = strconv.Itoa(rgN)
	}
	word := "agree"
	if !agree {
		word = "DIFFER"
	}
	fmt.Printf("grep %q: matching lines: generated %d, helper %d, rg -z %s, zgrep %d: %s\n", p.pattern, want, helperN, rgCount, zc.n, word)

	var viaHelper, viaRg, viaZgrep []time.Duration
	sides := []func() error{
		func() error {
			d, n, err := lb.helperGrep(ctx, p.pattern)
			if err == nil && n != helperN {
				err = fmt.Errorf("helper found %d matches, %d before", n, helperN)
			}
			viaHelper = append(viaHelper, d)
			return err
		},
		func() error {
			if lb.rg == "" {
				return nil
			}
			d, err := lb.runTool(ctx, nil, lb.rg, rgArgs...)
			viaRg = append(viaRg, d)
			return err
		},
		func() error {
			d, err := lb.runTool(ctx, nil, "zgrep", zgrepArgs...)
			viaZgrep = append(viaZgrep, d)
			return err
		},
	}
	for i := range grepRuns {
		for k := range sides {
			// Rotate who goes first.
			if err := sides[(i+k)%len(sides)](); err != nil {
				return nil, false, err
			}
		}
	}
	hm, zm := median(viaHelper), median(viaZgrep)
	fmt.Printf("grep %q: helper runs %s; rg -z runs %s; zgrep runs %s\n", p.pattern, msList(viaHelper), msList(viaRg), msList(viaZgrep))
	if len(viaRg) == len(viaHelper) {
		// The ratios of the runs made back to back show how much of the
		// figure is the machine's noise.
		var paired []float64
		for i := range viaHelper {
			paired = append(paired, viaHelper[i].Seconds()/viaRg[i].Seconds())
		}
		fmt.Printf("grep %q: helper/rg -z per run %s (median %.3f)\n", p.pattern, joinRatios(paired), medianFloat(paired))
	}

	measure := fmt.Sprintf("grep %s `%s`, 100 x 1 MiB (50 gz), median of %d", p.label, p.pattern, grepRuns)
	helperCell := fmt.Sprintf("%s (%d matches)", ms(hm), helperN)
	rows := []row{}
	missed := false
	if lb.rg != "" {
		rm := median(viaRg)
		ratio := hm.Seconds() / rm.Seconds()
		missed = ratio > targetGrepRatio
		result := verdict(!missed)
		if !agree {
			result += " (counts differ)"
		}
		if max(spread(viaHelper), spread(viaRg)) > noisySpread {
			result += " (noisy)"
			fmt.Printf("grep %q: runs of one side differ by more than %.0f%%: the machine was busy, so the verdict is weak\n", p.pattern, noisySpread*100)
		}
		rows = append(rows, row{
			measure: measure, helper: helperCell,
			baseline: ms(rm) + " (rg -z -n > /dev/null)",
			ratio:    fmt.Sprintf("%.3f", ratio),
			target:   fmt.Sprintf("helper <= %.2f x rg -z", targetGrepRatio),
			result:   result,
		})
	} else {
		rows = append(rows, row{
			measure: measure, helper: helperCell, baseline: "rg missing", ratio: "-",
			target: fmt.Sprintf("helper <= %.2f x rg -z", targetGrepRatio), result: "SKIP",
		})
	}
	rows = append(rows, row{
		measure:  "  same, against zgrep",
		helper:   ms(hm),
		baseline: ms(zm) + " (zgrep -n -E > /dev/null)",
		ratio:    fmt.Sprintf("%.2f", hm.Seconds()/zm.Seconds()),
		target:   "-",
		result:   "-",
	})
	return rows, missed, nil
}

func msList(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)))
	}
	return strings.Join(parts, " ") + " ms"
}

// --- 2. retirement -----------------------------------------------------------

// selfCPU is this process's user and system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// copyIn puts a fresh raw copy of the 64 MiB log into the state directory,
// flushed, with no compressed form beside it.
func (lb *logsBench) copyIn() (string, error) {
	raw := filepath.Join(lb.stateBig, lb.bigName)
	for _, p := range []string{raw, raw + ".gz", raw + ".gzi"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	src, err := os.Open(lb.master)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.OpenFile(raw, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return "", err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return "", err
	}
	return raw, dst.Close()
}

func (lb *logsBench) retire(ctx context.Context) ([]row, error) {
	progress("retirement of a %d byte log: 1 warm-up + %d x (spool.Dir.Retire, gzip -1 -c > /dev/null)", bigLogBytes, retireRuns)
	d := spool.NewDir(lb.stateBig)
	var viaRetire, viaGzip, cpuRetire, cpuGzip []time.Duration
	var last spool.RetireResult
	var gzipBytes int
	for i := range 1 + retireRuns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := lb.copyIn(); err != nil {
			return nil, err
		}
		c0 := selfCPU()
		t0 := time.Now()
		res, err := d.Retire(lb.bigName, spool.RetireOptions{})
		dt := time.Since(t0)
		cpu := selfCPU() - c0
		if err != nil {
			return nil, err
		}
		if !res.Retired || !res.RawRemoved || res.RawBytes != bigLogBytes {
			return nil, fmt.Errorf("Retire: retired=%v rawRemoved=%v raw=%d reason=%q", res.Retired, res.RawRemoved, res.RawBytes, res.Reason)
		}
		last = res

		cmd := exec.CommandContext(ctx, "gzip", "-1", "-c", lb.master)
		cmd.Env = minimalEnv(lb.home)
		var count countWriter
		if i == 0 {
			cmd.Stdout = &count // the warm-up measures the size
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t0 = time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("gzip -1: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		gt := time.Since(t0)
		gcpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		if i == 0 {
			gzipBytes = count.n
			continue
		}
		viaRetire, cpuRetire = append(viaRetire, dt), append(cpuRetire, cpu)
		viaGzip, cpuGzip = append(viaGzip, gt), append(cpuGzip, gcpu)
		fmt.Printf("retire run %d: Retire %s (CPU %s), gzip -1 %s (CPU %s)\n", i,
			ms(dt), ms(cpu), ms(gt), ms(gcpu))
	}
	rm, gm := mbps(bigLogBytes, median(viaRetire)), mbps(bigLogBytes, median(viaGzip))
	fmt.Printf("retire: %d bytes -> %d bytes (.gz + .gzi, %d members, %.1f%%); gzip -1 -> %d bytes (%.1f%%)\n",
		last.RawBytes, last.GzipBytes, last.Members, 100*float64(last.GzipBytes)/float64(last.RawBytes),
		gzipBytes, 100*float64(gzipBytes)/float64(bigLogBytes))
	fmt.Printf("retire: Retire includes reading the raw copy (page cache), compressing, fsync of the .gz, verification (inflate + SHA-256), index, renames, directory syncs and removing the raw file; gzip -1 writes to /dev/null\n")
	fmt.Printf("retire: median CPU Retire %s, gzip -1 %s (CPU per input MB: %.2f vs %.2f ms)\n",
		ms(median(cpuRetire)), ms(median(cpuGzip)),
		float64(median(cpuRetire))/1e6/(bigLogBytes/1e6), float64(median(cpuGzip))/1e6/(bigLogBytes/1e6))
	result := verdict(rm/gm >= targetRetireRatio)
	if max(spread(viaRetire), spread(viaGzip)) > noisySpread {
		result += " (noisy)"
		fmt.Printf("retire: runs of one side differ by more than %.0f%%: the machine was busy, so the verdict is weak\n", noisySpread*100)
	}
	if err := lb.retireBreakdown(); err != nil {
		return nil, err
	}
	return []row{{
		measure:  fmt.Sprintf("retire 64 MiB log, median of %d", retireRuns),
		helper:   fmt.Sprintf("%.0f MB/s (Dir.Retire)", rm),
		baseline: fmt.Sprintf("%.0f MB/s (gzip -1 -c > /dev/null)", gm),
		ratio:    fmt.Sprintf("%.3f", rm/gm),
		target:   fmt.Sprintf("ratio >= %.2f", targetRetireRatio),
		result:   result,
	}}, nil
}

// retireBreakdown times, on one goroutine, the parts of Retire's work on
// the 64 MiB log: compressing it as 1 MiB gzip members at level 1 (the
// library and setting Retire uses), inflating them back, one SHA-256 of
// the content (Retire takes two: of the raw and of the inflated bytes),
// and writing and syncing the compressed bytes.
func (lb *logsBench) retireBreakdown() error {
	data, err := os.ReadFile(lb.master)
	if err != nil {
		return err
	}
	var comp bytes.Buffer
	comp.Grow(len(data) / 2)
	zw, err := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	if err != nil {
		return err
	}
	// Each part is timed 3 times and the fastest run kept: on one
	// goroutine, another process on the machine shows up in full.
	fastest := func(f func() error) (time.Duration, error) {
		var best time.Duration
		for k := range 3 {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			if d := time.Since(t0); k == 0 || d < best {
				best = d
			}
		}
		return best, nil
	}
	compress, err := fastest(func() error {
		comp.Reset()
		for off := 0; off < len(data); off += spool.DefaultMemberBytes {
			zw.Reset(&comp)
			if _, err := zw.Write(data[off:min(off+spool.DefaultMemberBytes, len(data))]); err != nil {
				return err
			}
			if err := zw.Close(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	inflate, err := fastest(func() error {
		zr, err := gzip.NewReader(bytes.NewReader(comp.Bytes()))
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, zr)
		if err == nil && n != int64(len(data)) {
			err = fmt.Errorf("inflated %d bytes of %d", n, len(data))
		}
		return err
	})
	if err != nil {
		return err
	}
	hash, _ := fastest(func() error {
		sha256.Sum256(data)
		return nil
	})

	path := filepath.Join(lb.stateBig, "executions", "breakdown.gz.tmp")
	t0 := time.Now()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(comp.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	write := time.Since(t0)
	os.Remove(path)
	if err != nil {
		return err
	}
	fmt.Printf("retire cost breakdown, one goroutine, fastest of 3: compress %s (%.0f MB/s), inflate %s (%.0f MB/s), SHA-256 %s (x2 in Retire), write + fsync %d bytes %s; compress + inflate + 2 x SHA-256 = %s\n",
		ms(compress), mbps(bigLogBytes, compress), ms(inflate), mbps(bigLogBytes, inflate), ms(hash),
		comp.Len(), ms(write), ms(compress+inflate+2*hash))
	return nil
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// --- 3. tail read ------------------------------------------------------------

func (lb *logsBench) tail(ctx context.Context) ([]row, error) {
	progress("tail read of the retired 64 MiB log: %d x View (open, ReadAt %d bytes, close), %d x spool/read, %d x zcat | tail", tailReads, tailBytes, tailReads, tailZcatRuns)
	d := spool.NewDir(lb.stateBig)
	buf := make([]byte, tailBytes)
	readOnce := func() (time.Duration, error) {
		t0 := time.Now()
		v, err := d.Open(lb.bigName)
		if err != nil {
			return 0, err
		}
		if v.Form() != spool.FormGzip {
			v.Close()
			return 0, fmt.Errorf("%s is %s, not retired", lb.bigName, v.Form())
		}
		_, err = v.ReadAt(buf, v.Size()-tailBytes)
		if cerr := v.Close(); err == nil {
			err = cerr
		}
		dt := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if !bytes.Equal(buf, lb.masterTail) {
			return 0, errors.New("the tail read differs from the log's last bytes")
		}
		return dt, nil
	}
	readHelper := func() (time.Duration, error) {
		var res spool.ReadResult
		t0 := time.Now()
		err := lb.h.call(ctx, rpc.MethodSpoolRead, rpc.SpoolReadParams{
			SessionID: lb.sBig.id, Authority: rpc.Authority{As: "user"},
			Address: "artifact://" + lb.bigName, Offset: bigLogBytes - tailBytes, Length: tailBytes,
		}, &res)
		dt := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if res.Length != tailBytes || res.TotalBytes != bigLogBytes || !res.EOF || res.Text != string(lb.masterTail) {
			return 0, fmt.Errorf("spool/read answered length %d of %d, eof %v, text equal %v", res.Length, res.TotalBytes, res.EOF, res.Text == string(lb.masterTail))
		}
		return dt, nil
	}
	var viaView, viaHelper, viaZcat []time.Duration
	for _, side := range []struct {
		f    func() (time.Duration, error)
		into *[]time.Duration
	}{{readOnce, &viaView}, {readHelper, &viaHelper}} {
		if _, err := side.f(); err != nil { // warm-up
			return nil, err
		}
		for range tailReads {
			dt, err := side.f()
			if err != nil {
				return nil, err
			}
			*side.into = append(*side.into, dt)
		}
	}
	gz := filepath.Join(lb.stateBig, lb.bigName) + ".gz"
	for i := range 1 + tailZcatRuns {
		var out bytes.Buffer
		dt, err := lb.runTool(ctx, &out, "bash", "-c", "set -o pipefail; zcat -- "+shellQuote(gz)+" | tail -c "+strconv.Itoa(tailBytes))
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(out.Bytes(), lb.masterTail) {
			return nil, errors.New("zcat | tail gave other bytes than the log's last ones")
		}
		if i > 0 {
			viaZcat = append(viaZcat, dt)
		}
	}
	vp50, vp90 := percentile(viaView, 50), percentile(viaView, 90)
	hp50, hp90 := percentile(viaHelper, 50), percentile(viaHelper, 90)
	zm := median(viaZcat)
	fmt.Printf("tail: View p50 %s p90 %s max %s; spool/read p50 %s p90 %s max %s; zcat | tail -c %d median %s\n",
		ms(vp50), ms(vp90), ms(slices.Max(viaView)), ms(hp50), ms(hp90), ms(slices.Max(viaHelper)), tailBytes, ms(zm))
	zcatCell := ms(zm) + fmt.Sprintf(" (zcat | tail, median of %d)", tailZcatRuns)
	return []row{
		{
			measure: fmt.Sprintf("tail 4 KiB of retired 64 MiB, View p50 (n=%d)", tailReads),
			helper:  ms(vp50), baseline: zcatCell,
			ratio:  fmt.Sprintf("%.3f", vp50.Seconds()/zm.Seconds()),
			target: "p50 <= " + ms(targetTailRead), result: verdict(vp50 <= targetTailRead),
		},
		{
			measure: fmt.Sprintf("tail 4 KiB of retired 64 MiB, View p90 (n=%d)", tailReads),
			helper:  ms(vp90), baseline: "-", ratio: "-", target: "-", result: "-",
		},
		{
			measure: fmt.Sprintf("tail 4 KiB via helper spool/read, p50 (n=%d)", tailReads),
			helper:  ms(hp50), baseline: zcatCell,
			ratio:  fmt.Sprintf("%.3f", hp50.Seconds()/zm.Seconds()),
			target: "p50 <= " + ms(targetTailRead), result: verdict(hp50 <= targetTailRead),
		},
		{
			measure: fmt.Sprintf("tail 4 KiB via helper spool/read, p90 (n=%d)", tailReads),
			helper:  ms(hp90), baseline: "-", ratio: "-", target: "-", result: "-",
		},
	}, nil
}

// --- in-process grep and where its time goes -----------------------------------

type nopEvents struct{}

func (nopEvents) Changed(*execution.Session)       {}
func (nopEvents) Settled(execution.Facts)          {}
func (nopEvents) Progress(execution.Facts, string) {}
func (nopEvents) Deliver(execution.Delivery)       {}
func (nopEvents) Delivered(execution.Delivery)     {}
func (nopEvents) Wake(*execution.Session, string)  {}

// grepInProcess opens the corpus in an execution.Manager of this process
// and times Session.GrepLogs, the code the helper runs for spool/grep; then
// it times the parts of that work one by one on one goroutine, and, for a
// pattern that missed its target, prints a CPU profile of GrepLogs.
func (lb *logsBench) grepInProcess(ctx context.Context) error {
	progress("in-process Session.GrepLogs and its cost breakdown")
	// The session's login-environment capture reads HOME: give it the
	// private one, so no user profile runs beside the measurements.
	realHome, hadHome := os.LookupEnv("HOME")
	os.Setenv("HOME", lb.home)
	mgr := execution.NewManager(nopEvents{})
	const id = "bench-inproc"
	_, err := mgr.Open(id, lb.corpus.stateDir, execution.Limits{})
	if hadHome {
		os.Setenv("HOME", realHome)
	} else {
		os.Unsetenv("HOME")
	}
	if err != nil {
		return err
	}
	defer mgr.Close(id)
	s, err := mgr.Session(id)
	if err != nil {
		return err
	}
	grep := func(p string) (time.Duration, int, error) {
		t0 := time.Now()
		res, err := s.GrepLogs(ctx, execution.Caller{User: true}, execution.GrepParams{Pattern: p, MaxMatches: grepMaxMatches})
		return time.Since(t0), len(res.Matches), err
	}
	for i, p := range grepPatterns {
		var ds []time.Duration
		n := 0
		// The page cache is warm from the helper's runs. A run over a
		// second is not repeated.
		timed := func() error {
			for k := range inProcessRuns {
				dt, m, err := grep(p.pattern)
				if err != nil {
					return err
				}
				ds, n = append(ds, dt), m
				if k == 0 && dt > time.Second {
					break
				}
			}
			return nil
		}
		// A pattern whose helper grep missed its target is timed under
		// the CPU profiler.
		missed := i < len(lb.grepMissed) && lb.grepMissed[i]
		var top string
		var err error
		if missed {
			top, err = lb.profile(timed)
		} else {
			err = timed()
		}
		if err != nil {
			return err
		}
		fmt.Printf("in-process Session.GrepLogs %q (2 workers): median of %d %s (%s), %d matches\n", p.pattern, len(ds), ms(median(ds)), msList(ds), n)
		if missed {
			fmt.Printf("CPU profile of the in-process GrepLogs %q above (go tool pprof -top):\n%s", p.pattern, top)
		}
	}
	return lb.breakdown(ctx)
}

// profile runs f under the CPU profiler and returns the top of the
// profile, indented. BENCH_CPUPROFILE=FILE keeps the profile in FILE.
func (lb *logsBench) profile(f func() error) (string, error) {
	path := filepath.Join(lb.work, "grep.cpu.pprof")
	if keep := os.Getenv("BENCH_CPUPROFILE"); keep != "" {
		path = keep
	}
	out, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return "", err
	}
	ferr := f()
	pprof.StopCPUProfile()
	if err := out.Close(); err != nil {
		return "", err
	}
	if ferr != nil {
		return "", ferr
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=22", path).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("  go tool pprof failed: %v\n", err), nil
	}
	var b strings.Builder
	for line := range strings.Lines(string(top)) {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Time:") || strings.HasPrefix(line, "Build ID:") {
			continue
		}
		b.WriteString("  " + line)
	}
	return b.String(), nil
}

// stage is one part of a grep's work, run over a list of logs by workers
// goroutines (taking files in turn, as GrepLogs does); f gets a buffer of
// its goroutine's own and returns the matching lines it found.
type stage struct {
	label   string
	names   []string
	scale   int // the figure is multiplied by this (a stage run on a sample)
	workers int
	f       func(v *spool.View, buf []byte) (int, error)
}

// blockBytes is the buffer a stage reads a whole log into.
const blockBytes = corpusFileBytes + 64<<10

// readWhole reads the whole log into buf with View.ReadAt.
func readWhole(v *spool.View, buf []byte) ([]byte, error) {
	buf = buf[:v.Size()]
	if _, err := v.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return buf, nil
}

// runStage runs st once and returns its wall time and matches.
func (lb *logsBench) runStage(d *spool.Dir, st stage) (time.Duration, int, error) {
	var mu sync.Mutex
	next, total := 0, 0
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	for range max(1, st.workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, blockBytes)
			for {
				mu.Lock()
				i := next
				next++
				stop := firstErr != nil
				mu.Unlock()
				if i >= len(st.names) || stop {
					return
				}
				v, err := d.Open(st.names[i])
				k := 0
				if err == nil {
					k, err = st.f(v, buf)
					v.Close()
				}
				mu.Lock()
				total += k
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", st.names[i], err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return time.Since(t0) * time.Duration(st.scale), total * st.scale, firstErr
}

// breakdown times the parts of a grep with the spool package's public
// views: reading, inflating, line splitting, the per-line and block
// searches of the product's spool.Dir.Grep, log by log.
func (lb *logsBench) breakdown(ctx context.Context) error {
	c := lb.corpus
	d := spool.NewDir(c.stateDir)
	lit, alt := grepPatterns[0], grepPatterns[1]
	litRe, altRe := regexp.MustCompile(lit.pattern), regexp.MustCompile(alt.pattern)

	discard := func(v *spool.View, _ []byte) (int, error) {
		_, err := io.Copy(io.Discard, v.Reader())
		return 0, err
	}
	// The product's own search, spool.Dir.Grep, on one log at a time, with
	// or without context lines: without, it takes the block path; with,
	// the per-line path.
	grepWith := func(re *regexp.Regexp, context int) func(*spool.View, []byte) (int, error) {
		return func(v *spool.View, _ []byte) (int, error) {
			res, err := d.Grep(ctx, []string{v.Name()}, re, spool.GrepOptions{MaxMatches: 1 << 30, Context: context})
			n := 0
			for _, m := range res.Matches {
				if !m.Context {
					n++
				}
			}
			return n, err
		}
	}
	p1, p2 := fmt.Sprintf("%q", lit.pattern), fmt.Sprintf("%q", alt.pattern)
	stages := []stage{
		{"read 50 raw: View.Reader -> io.Discard", c.raw, 1, 1, discard},
		{"inflate 50 gz: View.Reader -> io.Discard", c.gz, 1, 1, discard},
		{"inflate 50 gz: View.ReadAt of the whole log (pooled inflater)", c.gz, 1, 1, func(v *spool.View, buf []byte) (int, error) {
			_, err := readWhole(v, buf)
			return 0, err
		}},
		{"per-line reading: View.Lines, empty callback", c.names, 1, 1, func(v *spool.View, _ []byte) (int, error) {
			return 0, v.Lines(func(int64, []byte) bool { return true })
		}},
		{"spool.Dir.Grep per log, block path (context 0), " + p1, c.names, 1, 1, grepWith(litRe, 0)},
		{"  same, 2 goroutines", c.names, 1, 2, grepWith(litRe, 0)},
		{"spool.Dir.Grep per log, block path (context 0), " + p2, c.names, 1, 1, grepWith(altRe, 0)},
		{"spool.Dir.Grep per log, per-line path (context 1), " + p1, c.names, 1, 1, grepWith(litRe, 1)},
		{"spool.Dir.Grep per log, per-line path (context 1), " + p2, c.names, 1, 1, grepWith(altRe, 1)},
	}
	fmt.Printf("grep cost breakdown in this process, over 100 x 1 MiB (50 raw, 50 gz); median of up to %d (1 when a run takes over 1 s):\n", stageRuns)
	for _, st := range stages {
		var ds []time.Duration
		n := 0
		for k := range stageRuns {
			if err := ctx.Err(); err != nil {
				return err
			}
			dt, m, err := lb.runStage(d, st)
			if err != nil {
				return fmt.Errorf("%s: %w", st.label, err)
			}
			ds, n = append(ds, dt), m
			if k == 0 && dt > time.Second {
				break
			}
		}
		m := median(ds)
		logical := int64(len(st.names)*st.scale) * corpusFileBytes
		matches := ""
		if n > 0 {
			matches = fmt.Sprintf(", %d matches", n)
		}
		fmt.Printf("  %-112s %10s %6.0f MB/s%s\n", st.label, ms(m), mbps(logical, m), matches)
	}
	return nil
}

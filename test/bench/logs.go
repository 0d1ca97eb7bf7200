package main

// The logs benchmark: spool/grep over a corpus of half raw, half retired
// build logs against rg -z and zgrep; retirement of a 64 MiB log against
// gzip -1; and reading the tail of a retired 64 MiB log.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
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
	targetRetireRatio = 2.5 // Retire MB/s over gzip -1 MB/s, at least
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

// retireAlone is the retirement row of the logs benchmark by itself.
func (b *bench) retireAlone(ctx context.Context) ([]row, error) {
	home, err := b.newHome("retire")
	if err != nil {
		return nil, err
	}
	lb := &logsBench{bench: b, home: home}
	if err := lb.makeBig(); err != nil {
		return nil, fmt.Errorf("retire: 64 MiB log: %w", err)
	}
	return lb.retire(ctx)
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

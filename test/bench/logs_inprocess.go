package main

// The logs benchmark: grep in this process, and where its time goes.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/spool"
)

// --- in-process grep and where its time goes -----------------------------------

type nopEvents struct{}

func (nopEvents) Changed(*execution.Session)       {}
func (nopEvents) Output(*execution.Execution)      {}
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

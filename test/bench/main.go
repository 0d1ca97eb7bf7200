// Command bench measures mevedel-exec against plain-shell baselines and
// prints one table: each figure next to its baseline, the ratio, and the
// target with PASS or MISS.
//
//	go run ./test/bench spool   (or: logs, all)
//
// It builds the helper (without -race) into a temporary directory, starts
// it with a private HOME and a minimal environment (PATH, HOME,
// LANG=C.UTF-8), and measures:
//
//   - spool throughput: a 1 GiB producer through the helper against the
//     same producer piped into `cat > FILE` (median of 3, interleaved);
//   - the helper's peak RSS (VmHWM) after a 1 MiB and after a 1 GiB output,
//     each in a fresh helper;
//   - exec/start round trips for `true` against `bash -lc true`, with the
//     private HOME and again with the real user's HOME (whose profile may
//     be slow).
//
// The logs benchmark (logs.go) measures, with the same helper:
//
//   - spool/grep over 100 generated 1 MiB build logs, half of them retired
//     to gzip, against `rg -z` and `zgrep` (median of 5), then the same
//     grep in this process with a breakdown of its cost;
//   - spool.Dir.Retire of a 64 MiB log against `gzip -1` (median of 3);
//   - reading the last 4 KiB of the retired 64 MiB log with spool.View and
//     through spool/read (p50 and p90 of 50).
//
// The scale benchmark (scale.go) keeps 500 `sleep 1000` executions live
// and reports the helper's OS threads and RSS, exec/list and exec/observe
// p50/p99 (against the same at 1 live), and exec/stopAll of all of them
// (against bash killing 500 sleeps and waiting).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
)

const usage = `usage: go run ./test/bench BENCH

BENCH is one of:
  spool   spool throughput, helper RSS and exec/start latency
  spawn   exec/start true against a bare fork+exec of true, alone and 8 at
          a time (floor.go)
  logs    spool/grep against rg -z and zgrep, retirement against gzip -1,
          tail reads of a retired log
  remote  exec/start on an SSH host (pooled) against ssh and a ControlMaster,
          remote output into the spool (remote.go); exec/start in a Podman
          container through the agent against podman exec (container.go)
  container the container row of remote alone
  throughput the three throughput rows alone: spool 1 GiB against cat, remote
          output 256 MiB against a ControlMaster, retirement of 64 MiB
          against gzip -1
  remote-output the remote output row of throughput alone
  list    exec/list with 500 live executions (list.go)
  scale   500 live executions: OS threads, RSS, exec/list and exec/observe
          latency, exec/stopAll (scale.go)
  waiting prompt to waitingForInput, listen() to the ready yield, and the
          CPU the detection costs with 64 live tty executions (waiting.go)
  sandbox exec/start true confined by bubblewrap (and with limits) against
          unconfined, interleaved, here and on a private sshd (sandbox.go)
  clients two clients of the daemon: the agent's exec/observe while its command
          floods output, alone and with an observer listing (clients.go)
  all     every benchmark: spool, spawn, logs, remote, list, scale, waiting, sandbox,
          then clients
`

const (
	gib = 1 << 30
	mib = 1 << 20

	throughputRuns    = 3
	spawnRuns         = 200 // with the private HOME
	spawnRunsRealHome = 20  // with the real HOME, whose login shell may be slow

	// Targets.
	targetThroughputRatio = 0.9 // helper MB/s over cat MB/s, at least
	targetRSSRatio        = 1.5 // 1 GiB peak RSS over 1 MiB peak RSS, at most
	targetSpawnP50        = 10 * time.Millisecond

	// callTimeout bounds every request; the 1 GiB runs take seconds.
	callTimeout = 3 * time.Minute
	// diskMargin is kept free on top of the 1 GiB a run writes.
	diskMargin = 512 * mib
	// noisySpread is the run-to-run spread of one side's times past which
	// the throughput verdict is marked as noisy.
	noisySpread = 0.25
)

func main() {
	if len(os.Args) != 2 || !slices.Contains([]string{"spool", "spawn", "logs", "remote", "container", "list", "scale", "waiting", "sandbox", "clients", "throughput", "remote-output", "all"}, os.Args[1]) {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// row is one line of the result table.
type row struct {
	measure, helper, baseline, ratio, target, result string
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func run(ctx context.Context, which string) error {
	// The helper is built by import path, which needs the module.
	if _, err := moduleRoot(); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "mevedel-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The protocol wants absolute paths; TMPDIR need not be one.
	if work, err = filepath.Abs(work); err != nil {
		return err
	}

	printMachine(work)

	bin := filepath.Join(work, "mevedel-exec")
	progress("building the helper (%s)", bin)
	if err := buildHelper(ctx, bin); err != nil {
		return err
	}

	b := &bench{bin: bin, work: work}
	var steps []func(context.Context) ([]row, error)
	if which == "spool" || which == "all" {
		steps = append(steps, b.throughput, b.rss, b.spawnPrivate, b.spawnRealHome)
	}
	if which == "spawn" || which == "all" {
		steps = append(steps, b.spawnFloor)
	}
	if which == "logs" || which == "all" {
		steps = append(steps, b.logs)
	}
	if which == "remote" || which == "all" {
		steps = append(steps, b.remote, b.container)
	}
	if which == "container" {
		steps = append(steps, b.container)
	}
	if which == "throughput" {
		steps = append(steps, b.throughput, b.remoteOutput, b.retireAlone)
	}
	if which == "remote-output" {
		steps = append(steps, b.remoteOutput)
	}
	if which == "list" || which == "all" {
		steps = append(steps, b.list)
	}
	if which == "scale" || which == "all" {
		steps = append(steps, b.scale)
	}
	if which == "waiting" || which == "all" {
		steps = append(steps, b.waiting)
	}
	if which == "sandbox" || which == "all" {
		steps = append(steps, b.sandbox)
	}
	if which == "clients" || which == "all" {
		steps = append(steps, b.clients)
	}
	var rows []row
	for _, step := range steps {
		r, err := step(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}

	fmt.Println()
	fmt.Printf("Results (MB = 10^6 bytes, MiB = 2^20 bytes; load at the end %s)\n", loadAvg())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\thelper\tbaseline\tratio\ttarget\tresult")
	fmt.Fprintln(tw, "-------\t------\t--------\t-----\t------\t------")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.measure, r.helper, r.baseline, r.ratio, r.target, r.result)
	}
	return tw.Flush()
}

// progress reports what is being done on stderr, so stdout holds the
// figures only.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// moduleRoot walks up from the working directory to the directory that
// holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or above it; run from inside the module")
		}
		dir = parent
	}
}

func printMachine(work string) {
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	cpu := "?"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	free := "?"
	if n, err := freeBytes(work); err == nil {
		free = fmt.Sprintf("%.1f GiB free", float64(n)/gib)
	}
	fmt.Println("mevedel-exec benchmark")
	fmt.Printf("date:     %s\n", time.Now().Format(time.RFC3339))
	fmt.Printf("nproc:    %d (%s)\n", runtime.NumCPU(), cpu)
	fmt.Printf("go:       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("kernel:   %s\n", kernel)
	fmt.Printf("temp dir: %s (%s)\n", work, free)
	fmt.Printf("load:     %s (other work on the machine makes every figure noisier)\n", loadAvg())
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// ensureRoom fails unless dir's filesystem can take one more 1 GiB file.
func ensureRoom(dir string) error {
	n, err := freeBytes(dir)
	if err != nil {
		return fmt.Errorf("checking free space in %s: %w", dir, err)
	}
	if n < gib+diskMargin {
		return fmt.Errorf("only %.2f GiB free in %s; a run needs %.2f GiB", float64(n)/gib, dir, float64(gib+diskMargin)/gib)
	}
	return nil
}

// removeAndSync deletes a run's output and flushes what is left dirty, so
// the next run does not pay for this one's writeback.
func removeAndSync(path string) {
	_ = os.Remove(path)
	syscall.Sync()
}

// producer writes n zero bytes to stdout.
func producer(n int64) string { return "head -c " + strconv.FormatInt(n, 10) + " /dev/zero" }

// minimalEnv is the environment of the helper and of the baselines: the
// user's profile is reached only through home.
func minimalEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8"}
}

type bench struct {
	bin  string
	work string
}

// newHome makes a private, empty HOME under the work directory.
func (b *bench) newHome(name string) (string, error) {
	return os.MkdirTemp(b.work, name+"-home-")
}

// withHelper starts a helper with HOME=home, opens one session with an
// output limit of 2 GiB, runs f, and always shuts the helper down.
func (b *bench) withHelper(ctx context.Context, home string, f func(*helper, *session) error) (err error) {
	h, err := startHelper(ctx, b.bin, home)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := h.close(); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			if tail := h.stderrTail(); tail != "" {
				err = fmt.Errorf("%w\nhelper stderr (tail):\n%s", err, tail)
			}
		}
	}()
	stateDir, err := os.MkdirTemp(b.work, "state-")
	if err != nil {
		return err
	}
	s, err := h.open(ctx, stateDir, execution.Limits{OutputLimitBytes: 2 * gib})
	if err != nil {
		return err
	}
	return f(h, s)
}

// --- 1. spool throughput -------------------------------------------------

func (b *bench) throughput(ctx context.Context) ([]row, error) {
	progress("spool throughput: %d x (helper, cat) with %q", throughputRuns, producer(gib))
	home, err := b.newHome("throughput")
	if err != nil {
		return nil, err
	}
	var viaHelper, viaCat []time.Duration
	err = b.withHelper(ctx, home, func(h *helper, s *session) error {
		// Warm up, untimed: the login environment is captured, the
		// binaries are in the page cache, and one full pass of each side
		// has run. On a VM the first gigabyte written into fresh guest
		// memory can cost twice what later ones do, and that would fall
		// on whichever side ran first.
		catOut := filepath.Join(b.work, "cat.out")
		if _, err := s.startWait(ctx, producer(mib), home); err != nil {
			return err
		}
		if _, err := b.helperRun(ctx, s, home); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if _, err := b.catRun(ctx, catOut, home); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		for i := range throughputRuns {
			// Alternate which side goes first, so neither always runs
			// on a machine the other just warmed or dirtied.
			sides := []func() error{
				func() error {
					d, err := b.helperRun(ctx, s, home)
					viaHelper = append(viaHelper, d)
					return err
				},
				func() error {
					d, err := b.catRun(ctx, catOut, home)
					viaCat = append(viaCat, d)
					return err
				},
			}
			if i%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			for _, side := range sides {
				if err := side(); err != nil {
					return err
				}
			}
			fmt.Printf("throughput run %d: helper %s (%.0f MB/s), cat %s (%.0f MB/s)\n", i+1,
				viaHelper[i].Round(time.Millisecond), mbps(gib, viaHelper[i]),
				viaCat[i].Round(time.Millisecond), mbps(gib, viaCat[i]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spool throughput: %w", err)
	}
	hm, cm := mbps(gib, median(viaHelper)), mbps(gib, median(viaCat))
	ratio := hm / cm
	// The ratio of the medians is the figure; the ratios of the pairs run
	// back to back show how much of it is the machine's noise.
	var paired []float64
	for i := range viaHelper {
		paired = append(paired, viaCat[i].Seconds()/viaHelper[i].Seconds())
	}
	fmt.Printf("throughput: helper/cat per pair %s (median %.2f); run-to-run spread helper %.0f%%, cat %.0f%%\n",
		joinRatios(paired), medianFloat(paired), spread(viaHelper)*100, spread(viaCat)*100)
	result := verdict(ratio >= targetThroughputRatio)
	if max(spread(viaHelper), spread(viaCat)) > noisySpread {
		result += " (noisy)"
		fmt.Printf("throughput: runs of one side differ by more than %.0f%%: the machine was busy, so the verdict is weak; rerun on a quiet machine\n", noisySpread*100)
	}
	return []row{{
		measure:  fmt.Sprintf("spool 1 GiB, median of %d", throughputRuns),
		helper:   fmt.Sprintf("%.0f MB/s", hm),
		baseline: fmt.Sprintf("%.0f MB/s (cat > file)", cm),
		ratio:    fmt.Sprintf("%.2f", ratio),
		target:   fmt.Sprintf("ratio >= %.2f", targetThroughputRatio),
		result:   result,
	}}, nil
}

// helperRun times one 1 GiB exec/start from request to reply, checks the
// spool file and deletes it.
func (b *bench) helperRun(ctx context.Context, s *session, cwd string) (time.Duration, error) {
	if err := ensureRoom(s.stateDir); err != nil {
		return 0, err
	}
	t0 := time.Now()
	o, err := s.startWait(ctx, producer(gib), cwd)
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	path := s.spoolPath(o.Facts.ExecutionID)
	defer removeAndSync(path)
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("spool file of %s: %w", o.Facts.ExecutionID, err)
	}
	if fi.Size() != gib || o.Facts.OutputBytes != gib {
		return 0, fmt.Errorf("spool file %s holds %d bytes (facts say %d), want %d", path, fi.Size(), o.Facts.OutputBytes, gib)
	}
	return d, nil
}

// catRun times `bash -c 'PRODUCER | cat > FILE'`, checks the file and
// deletes it.
func (b *bench) catRun(ctx context.Context, out, home string) (time.Duration, error) {
	if err := ensureRoom(filepath.Dir(out)); err != nil {
		return 0, err
	}
	defer removeAndSync(out)
	cmd := exec.CommandContext(ctx, "bash", "-c", producer(gib)+" | cat > "+shellQuote(out))
	cmd.Env = minimalEnv(home)
	cmd.Dir = home
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("cat baseline: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	if fi.Size() != gib {
		return 0, fmt.Errorf("cat baseline wrote %d bytes, want %d", fi.Size(), gib)
	}
	return d, nil
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

func joinRatios(rs []float64) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%.2f", r))
	}
	return strings.Join(parts, " ")
}

func medianFloat(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// spread is (slowest - fastest) / fastest.
func spread(ds []time.Duration) float64 {
	return float64(slices.Max(ds)-slices.Min(ds)) / float64(slices.Min(ds))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// --- 2. peak RSS -----------------------------------------------------------

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	k := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(k, 1)-1]
}

func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

package main

// The logs benchmark, parts 2 and 3: retirement and tail reads.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/spool"
)

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
	fmt.Printf("retire: Retire includes reading the raw copy (page cache), compressing, verification (each member inflated and compared with its raw bytes), fsync of the .gz, read-back check (CRC-32), index, renames, directory syncs and removing the raw file; gzip -1 writes to /dev/null\n")
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
// library and setting Retire uses), inflating them back, and writing and
// syncing the compressed bytes.
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
	fmt.Printf("retire cost breakdown, one goroutine, fastest of 3: compress %s (%.0f MB/s), inflate %s (%.0f MB/s), write + fsync %d bytes %s; compress + inflate = %s\n",
		ms(compress), mbps(bigLogBytes, compress), ms(inflate), mbps(bigLogBytes, inflate),
		comp.Len(), ms(write), ms(compress+inflate))
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

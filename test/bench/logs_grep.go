package main

// The logs benchmark, part 1: spool/grep against rg and grep.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/spool"
)

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

package main

// The remote benchmark, against a private OpenSSH sshd on 127.0.0.1 (the
// test/sshd fixture, launched here): exec/start of `true` through the
// helper on its pooled connection, against `ssh host true` through
// OpenSSH connection sharing (ControlMaster) and over a fresh connection,
// and against the same helper's exec/start of `true` on this machine (the
// floor: the host is this machine); and remote output spooled by the
// helper against the same output through ssh into a file.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

const (
	remoteRuns      = 100 // exec/start on the host, ControlMaster, exec/start here: each
	remoteRunsFresh = 30  // fresh ssh connections
	remoteRunsBurst = 50  // back to back, each side
	// remotePace is the idle time before each paced command: an agent's
	// commands come seconds apart, and the pool prepares for the next one
	// in that time (a ControlMaster has nothing to prepare).
	remotePace       = 100 * time.Millisecond
	remoteWarmups    = 3
	remoteOutBytes   = 256 * mib
	remoteOutRuns    = 5
	targetRemoteRate = 0.5 // helper p50 over ControlMaster p50, at most
)

func (b *bench) remote(ctx context.Context) ([]row, error) {
	if n, err := freeBytes(b.work); err == nil && n < 2*remoteOutBytes+diskMargin {
		return nil, fmt.Errorf("remote: only %.2f GiB free in %s", float64(n)/gib, b.work)
	}
	rb, stop, err := b.newRemoteBench()
	if err != nil {
		return nil, err
	}
	defer stop()
	dir := rb.dir

	// Both modes, one after the other: the host agent (the default) and
	// the wrapper (forced); the targets are the agent's.
	measure := func(mode string) ([]row, error) {
		helperEnv = []string{"MEVEDEL_EXEC_REMOTE_MODE=" + mode}
		defer func() { helperEnv = nil }()
		target := func(s string) string {
			if mode != "agent" {
				return "-"
			}
			return s
		}
		check := func(ok bool) string {
			if mode != "agent" {
				return "-"
			}
			return verdict(ok)
		}
		var helperPaced, helperBurst, local, master, masterBurst, fresh []time.Duration
		var toStart, toEnd []time.Duration
		var outHelper, outSSH []float64
		err = b.withHelper(ctx, rb.srv.Home, func(h *helper, s *session) error {
			progress("remote: warm-up (dial, login environment, control shell, ControlMaster)")
			for range remoteWarmups {
				if _, err := s.startWait(ctx, "true", rb.cwd); err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
				if _, err := s.startWait(ctx, "true", dir); err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
			}
			if _, err := rb.sshRun(ctx, rb.master); err != nil { // starts the master
				return err
			}
			// The sides take turns, so that a change of the machine's load
			// falls on all of them.
			progress("remote: %d x (exec/start true on the host, ssh through the ControlMaster, exec/start true here), %v apart", remoteRuns, remotePace)
			for range remoteRuns {
				if err := sleepCtx(ctx, remotePace); err != nil {
					return err
				}
				t0 := time.Now()
				o, err := s.startWait(ctx, "true", rb.cwd)
				if err != nil {
					return err
				}
				helperPaced = append(helperPaced, time.Since(t0))
				if f := o.Facts; f.QueuedAt != nil && f.StartedAt != nil && f.EndedAt != nil {
					toStart = append(toStart, f.StartedAt.Sub(f.QueuedAt.Time))
					toEnd = append(toEnd, f.EndedAt.Sub(f.StartedAt.Time))
				}
				if err := sleepCtx(ctx, remotePace); err != nil {
					return err
				}
				d, err := rb.sshRun(ctx, rb.master)
				if err != nil {
					return err
				}
				master = append(master, d)
				if err := sleepCtx(ctx, remotePace); err != nil {
					return err
				}
				t0 = time.Now()
				if _, err := s.startWait(ctx, "true", dir); err != nil {
					return err
				}
				local = append(local, time.Since(t0))
			}
			progress("remote: %d exec/start true, then %d ssh through the ControlMaster, back to back", remoteRunsBurst, remoteRunsBurst)
			for range remoteRunsBurst {
				t0 := time.Now()
				if _, err := s.startWait(ctx, "true", rb.cwd); err != nil {
					return err
				}
				helperBurst = append(helperBurst, time.Since(t0))
			}
			for range remoteRunsBurst {
				d, err := rb.sshRun(ctx, rb.master)
				if err != nil {
					return err
				}
				masterBurst = append(masterBurst, d)
			}
			outHelper, outSSH, err = rb.outputPairs(ctx, s)
			if err != nil {
				return err
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("remote (%s): %w", mode, err)
		}
		progress("remote: %d x ssh host true, fresh connections, %v apart", remoteRunsFresh, remotePace)
		for range remoteRunsFresh {
			if err := sleepCtx(ctx, remotePace); err != nil {
				return nil, err
			}
			d, err := rb.sshRun(ctx, rb.ssh)
			if err != nil {
				return nil, err
			}
			fresh = append(fresh, d)
		}

		hp50, hp90 := percentile(helperPaced, 50), percentile(helperPaced, 90)
		mp50, mp90 := percentile(master, 50), percentile(master, 90)
		lp50, lp90 := percentile(local, 50), percentile(local, 90)
		fp50, fp90 := percentile(fresh, 50), percentile(fresh, 90)
		bp50, bp90 := percentile(helperBurst, 50), percentile(helperBurst, 90)
		mbp50, mbp90 := percentile(masterBurst, 50), percentile(masterBurst, 90)
		fmt.Printf("remote (%s), exec/start true on the host: p50 %s p90 %s; back to back p50 %s p90 %s\n", mode, ms(hp50), ms(hp90), ms(bp50), ms(bp90))
		fmt.Printf("  ssh through a ControlMaster: p50 %s p90 %s; back to back p50 %s p90 %s\n", ms(mp50), ms(mp90), ms(mbp50), ms(mbp90))
		fmt.Printf("  fresh ssh: p50 %s p90 %s; the same helper's exec/start true here (the floor): p50 %s p90 %s\n", ms(fp50), ms(fp90), ms(lp50), ms(lp90))
		if len(toStart) > 0 {
			fmt.Printf("  on the host, by facts (ms resolution), medians: queued->started %s, started->ended %s\n", ms(median(toStart)), ms(median(toEnd)))
		}

		ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.3f", a.Seconds()/b.Seconds()) }
		paced := fmt.Sprintf("n=%d, %v apart", remoteRuns, remotePace)
		return []row{
			{
				measure:  mode + ": remote exec/start true, pooled, p50 (" + paced + ")",
				helper:   ms(hp50),
				baseline: ms(mp50) + " (ssh, ControlMaster)",
				ratio:    ratio(hp50, mp50),
				target:   target(fmt.Sprintf("<= %.1fx ControlMaster", targetRemoteRate)),
				result:   check(hp50.Seconds() <= targetRemoteRate*mp50.Seconds()),
			},
			{
				measure:  mode + ": remote exec/start true, pooled, p90 (" + paced + ")",
				helper:   ms(hp90),
				baseline: ms(mp90) + " (ssh, ControlMaster)",
				ratio:    ratio(hp90, mp90),
				target:   "-",
				result:   "-",
			},
			{
				measure:  mode + ": remote exec/start true, pooled, p50 (" + paced + ")",
				helper:   ms(hp50),
				baseline: ms(fp50) + fmt.Sprintf(" (fresh ssh, n=%d)", remoteRunsFresh),
				ratio:    ratio(hp50, fp50),
				target:   "-",
				result:   "-",
			},
			{
				measure:  mode + ": remote exec/start true, pooled, p50 (" + paced + ")",
				helper:   ms(hp50),
				baseline: ms(lp50) + " (exec/start true here)",
				ratio:    ratio(hp50, lp50),
				target:   "-",
				result:   "-",
			},
			{
				measure:  mode + fmt.Sprintf(": remote exec/start true, back to back, p50 (n=%d)", remoteRunsBurst),
				helper:   ms(bp50),
				baseline: ms(mbp50) + " (ssh, ControlMaster)",
				ratio:    ratio(bp50, mbp50),
				target:   "-",
				result:   "-",
			},
			outputRow(mode, outHelper, outSSH, mode == "agent"),
		}, nil
	}
	var rows []row
	for _, mode := range []string{"agent", "wrapper"} {
		r, err := measure(mode)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// newRemoteBench launches the private sshd with a ControlMaster's
// options beside the plain ones; stop ends the master and the sshd.
func (b *bench) newRemoteBench() (*remoteBench, func(), error) {
	if n, err := freeBytes(b.work); err == nil && n < 2*remoteOutBytes+diskMargin {
		return nil, nil, fmt.Errorf("remote: only %.2f GiB free in %s", float64(n)/gib, b.work)
	}
	dir, err := os.MkdirTemp(b.work, "sshd-")
	if err != nil {
		return nil, nil, err
	}
	progress("remote: starting a private sshd")
	srv, err := sshd.Launch(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("remote: %w", err)
	}
	rb := &remoteBench{bench: b, srv: srv, dir: dir, cwd: "/ssh:" + sshd.Alias + ":" + dir}
	rb.ssh = []string{
		"-F", filepath.Join(srv.Home, ".ssh", "config"),
		"-o", "UserKnownHostsFile=" + srv.KnownHostsPath(),
		"-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes",
	}
	rb.master = append(rb.ssh[:len(rb.ssh):len(rb.ssh)],
		"-o", "ControlMaster=auto",
		"-o", "ControlPath="+filepath.Join(dir, "cm-%C"),
		"-o", "ControlPersist=300")
	stop := func() {
		_ = exec.Command("ssh", append(rb.master, "-O", "exit", sshd.Alias)...).Run()
		srv.Stop()
	}
	return rb, stop, nil
}

// outputPairs spools remoteOutBytes of remote output through the helper
// and sends the same through the ControlMaster into a file, remoteOutRuns
// times in turn after one unmeasured pair, and returns the MB/s of each.
//
// It also prints the CPU time per MiB of each side's client process, the
// helper and the ControlMaster's ssh: a figure the machine's load changes
// far less than the rates.
func (rb *remoteBench) outputPairs(ctx context.Context, s *session) (outHelper, outSSH []float64, err error) {
	progress("remote: %d x (%d MiB of output into the spool, through the ControlMaster into a file), after one of each unmeasured", remoteOutRuns, remoteOutBytes/mib)
	masterPid := rb.masterPid(ctx)
	var cpuHelper, cpuSSH int64
	ticks := func(pid int) int64 {
		if pid <= 0 {
			return 0
		}
		n, _ := cpuTicks(pid)
		return n
	}
	defer func() {
		if err == nil && masterPid > 0 {
			perMiB := func(t int64) float64 {
				return float64(t) * 1000 / clockTicks / float64(remoteOutRuns*remoteOutBytes/mib)
			}
			fmt.Printf("remote output: client CPU per MiB, helper %.2f ms, ControlMaster ssh %.2f ms\n", perMiB(cpuHelper), perMiB(cpuSSH))
			// What a flood's garbage costs in memory (the collector's
			// headroom during floods, remote/flood.go).
			if hwm, err := testsupport.PeakRSS(s.h.pid()); err == nil {
				rss, _ := testsupport.StatusField(s.h.pid(), "VmRSS")
				fmt.Printf("remote output: helper peak RSS (VmHWM) %.1f MiB, RSS after the pairs %.1f MiB\n", float64(hwm)/mib, float64(rss)/mib)
			}
		}
	}()
	// The first pair writes into page cache the machine has not touched
	// yet, which on a virtual machine costs both sides several times what
	// later pairs pay: it warms, unmeasured.
	for i := range remoteOutRuns + 1 {
		c0 := ticks(s.h.pid())
		t0 := time.Now()
		o, err := s.startWait(ctx, producer(remoteOutBytes), rb.cwd)
		if err != nil {
			return nil, nil, err
		}
		d := time.Since(t0)
		c1 := ticks(s.h.pid())
		if o.Facts.OutputBytes != remoteOutBytes {
			return nil, nil, fmt.Errorf("spooled %d bytes, want %d", o.Facts.OutputBytes, remoteOutBytes)
		}
		removeAndSync(s.spoolPath(o.Facts.ExecutionID))
		m0 := ticks(masterPid)
		dSSH, err := rb.sshToFile(ctx, producer(remoteOutBytes))
		if err != nil {
			return nil, nil, err
		}
		if i > 0 {
			cpuHelper += c1 - c0
			cpuSSH += ticks(masterPid) - m0
			outHelper = append(outHelper, mbps(remoteOutBytes, d))
			outSSH = append(outSSH, mbps(remoteOutBytes, dSSH))
		}
	}
	return outHelper, outSSH, nil
}

// remoteOutput is the remote output row alone, through the host agent.
func (b *bench) remoteOutput(ctx context.Context) ([]row, error) {
	rb, stop, err := b.newRemoteBench()
	if err != nil {
		return nil, err
	}
	defer stop()
	var outHelper, outSSH []float64
	err = b.withHelper(ctx, rb.srv.Home, func(h *helper, s *session) error {
		progress("remote: warm-up (dial, login environment, agent, ControlMaster)")
		for range remoteWarmups {
			if _, err := s.startWait(ctx, "true", rb.cwd); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		if _, err := rb.sshRun(ctx, rb.master); err != nil { // starts the master
			return err
		}
		outHelper, outSSH, err = rb.outputPairs(ctx, s)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("remote output: %w", err)
	}
	return []row{outputRow("agent", outHelper, outSSH, true)}, nil
}

// outputRow is the remote output row; judged says whether the target
// applies (the host agent's mode).
func outputRow(mode string, outHelper, outSSH []float64, judged bool) row {
	fmt.Printf("remote output (%s): helper %s MB/s; ssh to a file %s MB/s\n", mode, joinFloats(outHelper), joinFloats(outSSH))
	var paired []float64
	for i := range outHelper {
		paired = append(paired, outHelper[i]/outSSH[i])
	}
	fmt.Printf("remote output (%s): helper/ssh per pair %s\n", mode, joinRatios(paired))
	r := row{
		measure:  mode + fmt.Sprintf(": remote output into the spool, %d MiB, median of %d pairs", remoteOutBytes/mib, remoteOutRuns),
		helper:   fmt.Sprintf("%.0f MB/s", medianFloat(outHelper)),
		baseline: fmt.Sprintf("%.0f MB/s (ssh, ControlMaster, > file)", medianFloat(outSSH)),
		ratio:    fmt.Sprintf("%.3f", medianFloat(outHelper)/medianFloat(outSSH)),
		target:   "-",
		result:   "-",
	}
	if judged {
		r.target = ">= 1x ControlMaster"
		r.result = verdict(medianFloat(outHelper) >= medianFloat(outSSH))
	}
	return r
}

type remoteBench struct {
	*bench
	srv    *sshd.Server
	dir    string   // the sshd fixture's directory, also a cwd on the host
	cwd    string   // the TRAMP name the helper runs in
	ssh    []string // ssh options for the fixture, fresh connections
	master []string // the same through a ControlMaster
}

// masterPid is the ControlMaster's pid, or 0 when ssh does not say.
func (rb *remoteBench) masterPid(ctx context.Context) int {
	out, _ := exec.CommandContext(ctx, "ssh", append(rb.master, "-O", "check", sshd.Alias)...).CombinedOutput()
	_, rest, ok := strings.Cut(string(out), "pid=")
	if !ok {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimRight(strings.Fields(rest)[0], ")"))
	return pid
}

// sshRun times one `ssh OPTIONS testhost true`.
func (rb *remoteBench) sshRun(ctx context.Context, opts []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "ssh", append(opts, sshd.Alias, "true")...)
	cmd.Env = minimalEnv(rb.srv.Home)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("ssh %s: %w: %s", strings.Join(opts, " "), err, strings.TrimSpace(out.String()))
	}
	return time.Since(t0), nil
}

// sshToFile runs command through the ControlMaster with its output in a
// file, and times it.
func (rb *remoteBench) sshToFile(ctx context.Context, command string) (time.Duration, error) {
	path := filepath.Join(rb.work, "ssh-out")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer removeAndSync(path)
	defer f.Close()
	cmd := exec.CommandContext(ctx, "ssh", append(rb.master, sshd.Alias, command)...)
	cmd.Env = minimalEnv(rb.srv.Home)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &errOut
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("ssh %s: %w: %s", command, err, strings.TrimSpace(errOut.String()))
	}
	d := time.Since(t0)
	if fi, err := f.Stat(); err != nil {
		return 0, err
	} else if fi.Size() != remoteOutBytes {
		return 0, fmt.Errorf("ssh %s wrote %d bytes, want %d", command, fi.Size(), remoteOutBytes)
	}
	return d, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func joinFloats(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strings.Join(parts, ", ")
}

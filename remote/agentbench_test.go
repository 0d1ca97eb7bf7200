package remote

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// TestMain lets this test binary serve as the host agent it deploys to
// the fixture (`TEST_BINARY host`), as the helper's executable does: the
// agent benchmarks measure the agent's data path with the helper's side
// in this process, where a profile sees it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "host" {
		os.Exit(agent.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// agentPool is a pool whose commands run under the host agent (this test
// binary), deployed before it returns. The benchmarks use it, and the
// flood test: the other tests of this package exercise the wrapper, the
// e2e tests the agent through the real helper.
func agentPool(b testing.TB) (*Pool, *sshd.Server) {
	s := sshd.Start(b)
	agent.Deployable = true
	b.Cleanup(func() { agent.Deployable = false })
	p := NewPool(Config{Home: s.Home})
	b.Cleanup(func() { p.Close() })
	proc := agentRun(b, p, "true")
	if m := proc.(interface{ RemoteMode() string }).RemoteMode(); m != ModeAgent {
		b.Fatalf("remote mode %s, want %s", m, ModeAgent)
	}
	return p, s
}

// agentRun runs command as an execution does: Start, the output to its
// end, the exit status.
func agentRun(b testing.TB, p *Pool, command string) process.Process {
	proc, err := Runner{Pool: p, Target: target("")}.Start(b.Context(), process.Spec{Command: command, Tag: "MEVEDEL_EXEC_TAG=bench-agent"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, proc.Output()); err != nil {
		b.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		b.Fatal(err)
	}
	_ = proc.CloseOutput()
	return proc
}

// BenchmarkAgentStartTrue is `true` under the host agent: Start to its
// exit status and output EOF, as exec/start waits for them.
func BenchmarkAgentStartTrue(b *testing.B) {
	p, _ := agentPool(b)
	for b.Loop() {
		agentRun(b, p, "true")
	}
}

// BenchmarkAgentOutput is 64 MiB of output under the host agent, read as
// the spool reads it (up to 256 KiB at a time) and dropped: the transport
// alone, with the CPU each side spends on it.
func BenchmarkAgentOutput(b *testing.B) {
	p, s := agentPool(b)
	benchOutput(b, p, s)
}

// BenchmarkWrapperOutput is the same through the wrapper, for
// comparison.
func BenchmarkWrapperOutput(b *testing.B) {
	s := sshd.Start(b)
	p := NewPool(Config{Home: s.Home})
	b.Cleanup(func() { p.Close() })
	benchOutput(b, p, s)
}

func benchOutput(b *testing.B, p *Pool, s *sshd.Server) {
	const size = 64 << 20
	buf := make([]byte, 256<<10)
	b.SetBytes(size)
	here0 := cpuTime(0)
	runs := 0
	defer func() { reportCPU(b, p, s, here0, float64(runs*size)/(1<<20)) }()
	for b.Loop() {
		runs++
		proc, err := Runner{Pool: p, Target: target("")}.Start(b.Context(), process.Spec{Command: "head -c " + strconv.Itoa(size) + " /dev/zero"})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(onlyWriter{io.Discard}, proc.Output(), buf)
		if err != nil || n != size {
			b.Fatalf("copied %d bytes (%v), want %d", n, err, size)
		}
		if _, err := proc.Wait(); err != nil {
			b.Fatal(err)
		}
		_ = proc.CloseOutput()
	}
}

// onlyWriter hides a writer's ReadFrom, so the copy goes through the
// buffer as the spool's does.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(b []byte) (int, error) { return o.w.Write(b) }

// cpuTime is this process's CPU time (pid 0), or that of pid's reaped
// children: for the fixture's sshd, what its connections and the commands
// they ran (the agent included) spent.
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	cu, _ := strconv.Atoi(f[13])
	cs, _ := strconv.Atoi(f[14])
	return time.Duration(cu+cs) * 10 * time.Millisecond // USER_HZ is 100
}

// reportCPU reports the CPU the output cost on each side, per MiB: on a
// shared machine a steadier figure than the wall time. It closes p.
func reportCPU(b *testing.B, p *Pool, s *sshd.Server, here0 time.Duration, mib float64) {
	here := cpuTime(0) - here0
	p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Connections()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The listener reaps its connections' processes after they end.
	host := cpuTime(s.Pid())
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		h := cpuTime(s.Pid())
		if h == host && h > 0 {
			break
		}
		host = h
	}
	b.ReportMetric(float64(here.Microseconds())/1000/mib, "helper-cpu-ms/MiB")
	b.ReportMetric(float64(host.Microseconds())/1000/mib, "host-cpu-ms/MiB")
}

// BenchmarkAgentRequest is one request's round trip to the host agent
// (whether a live command is alive).
func BenchmarkAgentRequest(b *testing.B) {
	p, _ := agentPool(b)
	proc, err := Runner{Pool: p, Target: target("")}.Start(b.Context(), process.Spec{Command: "exec sleep 1000", Tag: "MEVEDEL_EXEC_TAG=bench-agent"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = proc.Signal(syscall.SIGKILL)
		_, _ = proc.Wait()
		_ = proc.CloseOutput()
	}()
	for b.Loop() {
		if !proc.Alive() {
			b.Fatal("not alive")
		}
	}
}

// BenchmarkLocalStartTrue is `true` started here by the local runner, the
// agent's own code: the floor of BenchmarkAgentStartTrue, less a round
// trip.
func BenchmarkLocalStartTrue(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		var l process.Local
		proc, err := l.Start(b.Context(), process.Spec{Command: "true", Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, proc.Output()); err != nil {
			b.Fatal(err)
		}
		if _, err := proc.Wait(); err != nil {
			b.Fatal(err)
		}
		_ = proc.CloseOutput()
	}
}

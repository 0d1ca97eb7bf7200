package remote

import (
	"io"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/process"

	"github.com/mevedel/mevedel-exec/test/sshd"
)

// BenchmarkStartTrue is one command on a pooled connection: Start of
// `true` to its exit status and output EOF.
func BenchmarkStartTrue(b *testing.B) {
	s := sshd.Start(b)
	p := NewPool(Config{Home: s.Home})
	defer p.Close()
	run := func() {
		proc, err := p.Start(b.Context(), target(""), process.Spec{Command: "true", Tag: "MEVEDEL_EXEC_TAG=bench"})
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, proc.Output())
		if _, err := proc.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	run() // dial outside the measurement
	b.ResetTimer()
	for b.Loop() {
		run()
	}
}

// BenchmarkProbe is one probe over the connection's control shell, of a
// live leader (the fast path) and of a group that has ended (a full scan).
func BenchmarkProbe(b *testing.B) {
	s := sshd.Start(b)
	p := NewPool(Config{Home: s.Home})
	defer p.Close()
	proc, err := p.Start(b.Context(), target(""), process.Spec{Command: "exec sleep 1000", Tag: "MEVEDEL_EXEC_TAG=bench-probe"})
	if err != nil {
		b.Fatal(err)
	}
	defer proc.Wait()
	defer proc.Signal(syscall.SIGKILL)
	dead, err := p.Start(b.Context(), target(""), process.Spec{Command: "true", Tag: "MEVEDEL_EXEC_TAG=bench-dead"})
	if err != nil {
		b.Fatal(err)
	}
	dead.Wait()
	for _, c := range []struct {
		name string
		g    *Group
	}{{"live", proc.Group()}, {"dead", dead.Group()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				// A fresh Group: no cached verdict.
				g, _ := p.Group(target(""), c.g.Identity())
				if _, err := g.Probe(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Every goroutine the pool starts ends by Close.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	s := sshd.Start(t)
	before := runtime.NumGoroutine()
	p := NewPool(Config{Home: s.Home})
	// A tag of its own: another run of this test at the same time (on the
	// same machine) must not reap this one's command.
	tag := "MEVEDEL_EXEC_TAG=leak-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	proc, err := p.Start(testCtx(t), target(""), process.Spec{Command: "echo started; exec sleep 1000", Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	reap(t, proc.Pgid(), tag)
	out := collect(proc.Output())
	out.waitFor(t, "started\n")
	if _, err := p.LoginEnv(testCtx(t), target("")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(testCtx(t), target(""), t.TempDir()+"/x", emptyReader{}, 0); err != nil {
		t.Fatal(err)
	}
	if l, err := proc.Probe(testCtx(t)); err != nil || l != Live {
		t.Fatalf("not alive: %v, %v", l, err)
	}
	proc.Signal(syscall.SIGKILL)
	p.Close()
	out.all(t)
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}

type emptyReader struct{}

func (emptyReader) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }

package process

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// tagged reports whether a live child of this process carries tag in its
// environment. A child's exec closes the pipe its start waits on before
// the kernel has set the bounds of its new environment, so for a moment
// it shows an empty one: that is read again, within a bound, until it
// fills.
func tagged(tag string) bool {
	pids, ok := ownChildren()
	if !ok {
		return false
	}
	var buf []byte
	for _, pid := range pids {
		for deadline := time.Now().Add(5 * time.Second); ; {
			b, ok := readEnviron(pid, &buf)
			if p, alive := Stat(pid); !ok || !alive || !p.Alive() {
				break
			}
			if len(b) > 0 {
				if bytes.Contains(b, []byte(tag+"\x00")) {
					return true
				}
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Microsecond) // polling, bounded by deadline
		}
	}
	return false
}

// A start's BeforeRun runs while the command's first process exists but
// waits at the shim's gate: when it fails, the command never runs and the
// process is gone; when it succeeds, the command runs.
func TestBeforeRunHoldsTheCommandAtItsGate(t *testing.T) {
	_ = UseShim() // without a native shim, the executable's shim mode
	defer shimExe.Store("")
	t.Run("native", testGate)
	// The executable's shim mode (this test binary's), as where no native
	// shim runs, or a start through the memfd was refused.
	native := nativeShimFd
	nativeShimFd = -1
	defer func() { nativeShimFd = native }()
	t.Run("executable", testGate)
}

func testGate(t *testing.T) {
	dir := t.TempDir()
	for _, allow := range []bool{false, true} {
		marker := filepath.Join(dir, strconv.FormatBool(allow))
		tag := "MEVEDEL_GATE_TEST=" + strconv.FormatBool(allow) + strconv.Itoa(os.Getpid())
		refusal := errors.New("not durable")
		called := false
		var l Local
		p, err := l.Start(context.Background(), Spec{Command: "touch " + marker, Dir: dir, Tag: tag,
			BeforeRun: func() error {
				called = true
				if _, err := os.Stat(marker); err == nil {
					t.Errorf("allow %v: the command ran before BeforeRun returned", allow)
				}
				if !tagged(tag) {
					t.Errorf("allow %v: no process of the command existed while BeforeRun ran (not gated)", allow)
				}
				if allow {
					return nil
				}
				return refusal
			}})
		if !called {
			t.Fatalf("allow %v: BeforeRun was not called", allow)
		}
		if !allow {
			if !errors.Is(err, refusal) || p != nil {
				t.Fatalf("a refused start: %v, %v", p, err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran after BeforeRun failed")
			}
			if tagged(tag) {
				t.Error("the gated process outlived the refused start")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if ex, _ := p.Wait(); ex.Code != 0 || ex.Signaled {
			t.Fatalf("the allowed command: %+v", ex)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the allowed command did not run: %v", err)
		}
	}
}

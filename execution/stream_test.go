package execution

import (
	"bytes"
	"testing"
)

// What exec/output carries: contiguous bytes with their offset, an
// incomplete character held back, and past the cap a gap rather than
// bytes sent twice or out of place.
func TestKeptOutputIsTakenInPlace(t *testing.T) {
	e := &Execution{}
	if _, _, _, ok := e.TakeOutput(); ok {
		t.Fatal("output taken before any was kept")
	}
	e.keepOutput(0, []byte("caf\xc3"))
	off, n, text, ok := e.TakeOutput()
	if !ok || off != 0 || n != 3 || text != "caf" {
		t.Fatalf("took %d %d %q %v, want 0 3 \"caf\"", off, n, text, ok)
	}
	e.keepOutput(4, []byte("\xa9!"))
	if off, n, text, _ = e.TakeOutput(); off != 3 || n != 3 || text != "é!" {
		t.Fatalf("took %d %d %q, want 3 3 \"é!\"", off, n, text)
	}
	// Two halves of a burst over the cap: only the second is kept, at
	// its own offset.
	half := bytes.Repeat([]byte("a"), maxStreamBytes/2+1)
	e.keepOutput(6, half)
	e.keepOutput(6+int64(len(half)), half)
	if off, n, _, _ = e.TakeOutput(); off != 6+int64(len(half)) || n != len(half) {
		t.Fatalf("took %d bytes at %d, want %d at %d", n, off, len(half), 6+len(half))
	}
	// One write over the cap is not kept at all, but the gap is told.
	e.keepOutput(100000, bytes.Repeat([]byte("b"), maxStreamBytes+1))
	if off, n, _, ok = e.TakeOutput(); !ok || n != 0 || off != 100000+maxStreamBytes+1 {
		t.Fatalf("took %d bytes at %d (%v), want none, at %d", n, off, ok, 100000+maxStreamBytes+1)
	}
	if _, _, _, ok = e.TakeOutput(); ok {
		t.Fatal("the gap was told twice")
	}
}

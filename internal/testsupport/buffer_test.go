package testsupport

import (
	"strings"
	"testing"
	"time"
)

func TestBufferWait(t *testing.T) {
	var b Buffer
	go func() {
		for range 3 {
			b.Write([]byte("tick\n"))
		}
		b.Close()
	}()
	if !b.Wait(30*time.Second, func(s string) bool { return strings.Count(s, "tick") == 3 }) {
		t.Fatalf("three ticks not seen: %q", b.String())
	}
	if !b.Wait(30*time.Second, nil) || !b.Closed() {
		t.Fatal("close not seen")
	}
	// Closed, a condition that never holds ends the wait at once.
	if b.Wait(30*time.Second, func(s string) bool { return strings.Contains(s, "tock") }) {
		t.Fatal("a condition that does not hold was reported")
	}
}

func TestBufferWaitBound(t *testing.T) {
	var b Buffer
	// Nothing is written: the bound ends the wait (it is what is tested).
	if b.Wait(10*time.Millisecond, func(s string) bool { return s != "" }) || b.Wait(10*time.Millisecond, nil) {
		t.Fatal("an empty open buffer satisfied a wait")
	}
}

package testsupport

import (
	"bytes"
	"sync"
	"time"
)

// Buffer is an io.Writer that goroutines share: a child's stderr, a
// process's output. Readers can wait for its contents to change. The zero
// value is ready to use; a Buffer must not be copied.
type Buffer struct {
	mu     sync.Mutex
	cond   sync.Cond // L is &mu, set on first use
	b      bytes.Buffer
	closed bool
}

func (b *Buffer) lock() {
	b.mu.Lock()
	if b.cond.L == nil {
		b.cond.L = &b.mu
	}
}

// Write appends p and wakes waiters.
func (b *Buffer) Write(p []byte) (int, error) {
	b.lock()
	defer b.mu.Unlock()
	b.cond.Broadcast()
	return b.b.Write(p)
}

// String returns the contents so far.
func (b *Buffer) String() string {
	b.lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Close says nothing more will be written (the writer saw EOF), which
// ends every wait.
func (b *Buffer) Close() error {
	b.lock()
	defer b.mu.Unlock()
	b.closed = true
	b.cond.Broadcast()
	return nil
}

// Closed reports whether Close was called.
func (b *Buffer) Closed() bool {
	b.lock()
	defer b.mu.Unlock()
	return b.closed
}

// Wait waits until cond holds for the contents, the buffer is closed, or
// bound passes, and reports whether cond holds. A nil cond waits for the
// close and reports whether it came.
func (b *Buffer) Wait(bound time.Duration, cond func(string) bool) bool {
	holds := func() bool {
		if cond == nil {
			return b.closed
		}
		return cond(b.b.String())
	}
	expired := false // guarded by mu; set by the timer, so no wakeup is missed
	timer := time.AfterFunc(bound, func() {
		b.lock()
		expired = true
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer timer.Stop()
	b.lock()
	defer b.mu.Unlock()
	for !holds() && !b.closed && !expired {
		b.cond.Wait()
	}
	return holds()
}

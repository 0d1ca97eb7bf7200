package rpc

import (
	"io"
	"sync"
	"time"
)

// The outbox: every frame for one client goes through one writer
// goroutine, so a client that does not read can only fall behind, never
// block the read loop (stream.go frames and checks what is read).

// outbox holds frames until one goroutine has written them.
type outbox struct {
	w      io.Writer
	stall  time.Duration // 0: writes never stall
	onFail func(error)   // called once, when err is first set
	timer  *time.Timer   // the stall timer; nil without a stall timeout

	mu       sync.Mutex
	cond     sync.Cond
	queue    []outFrame // guarded by mu
	queued   int        // guarded by mu; bytes queued or being written
	closing  bool       // guarded by mu; no more frames: drain, then stop
	err      error      // guarded by mu; set once: nothing more can be written
	finished bool       // guarded by mu; the writer has returned
}

type outFrame struct {
	head, body []byte
	buf        *[]byte // from frameBufs, given back once written; or nil
}

func (f outFrame) size() int { return len(f.head) + len(f.body) }

// release gives the frame's buffer back to frameBufs.
func (f outFrame) release() {
	if f.buf != nil && cap(*f.buf) <= framePoolMax {
		*f.buf = (*f.buf)[:0]
		frameBufs.Put(f.buf)
	}
}

func newOutbox(w io.Writer, stall time.Duration, onFail func(error)) *outbox {
	o := &outbox{w: w, stall: stall, onFail: onFail}
	o.cond.L = &o.mu
	if stall > 0 {
		o.timer = time.AfterFunc(time.Hour, func() { o.fail(errStalled) })
		o.timer.Stop()
	}
	go o.run()
	return o
}

// put queues one frame, waiting while the outbox is full.
func (o *outbox) put(head, body []byte) error {
	return o.putFrame(outFrame{head: head, body: body})
}

// putFrame is put of a frame that may carry a pooled buffer.
func (o *outbox) putFrame(f outFrame) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.err == nil && !o.closing && o.queued > 0 && o.queued+f.size() > outboxBytes {
		o.cond.Wait()
	}
	switch {
	case o.err != nil:
		return o.err
	case o.closing:
		return errStreamClosed
	}
	o.queue = append(o.queue, f)
	o.queued += f.size()
	o.cond.Broadcast()
	return nil
}

func (o *outbox) backlog() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued
}

// waitBelow waits until at most n bytes wait, or nothing can be written.
func (o *outbox) waitBelow(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.err == nil && !o.closing && o.queued > n {
		o.cond.Wait()
	}
}

// fail gives the client up; the first failure is the one reported.
func (o *outbox) fail(err error) {
	o.mu.Lock()
	first := o.err == nil
	if first {
		o.err = err
		o.queue = nil
		o.cond.Broadcast()
	}
	o.mu.Unlock()
	if first && o.onFail != nil {
		o.onFail(err)
	}
}

// close takes no more frames and waits until the writer has written the
// queue or nothing more can be written.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closing = true
	o.cond.Broadcast()
	for !o.finished && o.err == nil {
		o.cond.Wait()
	}
}

func (o *outbox) run() {
	defer func() {
		o.mu.Lock()
		o.finished = true
		o.cond.Broadcast()
		o.mu.Unlock()
	}()
	for {
		o.mu.Lock()
		for len(o.queue) == 0 && !o.closing && o.err == nil {
			o.cond.Wait()
		}
		batch := o.queue
		o.queue = nil
		stop := o.err != nil || len(batch) == 0
		o.mu.Unlock()
		if stop {
			return
		}
		for _, f := range batch {
			if err := o.write(f.head); err == nil {
				err = o.write(f.body)
				if err != nil {
					o.fail(err)
					return
				}
			} else {
				o.fail(err)
				return
			}
			f.release()
			o.mu.Lock()
			o.queued -= f.size()
			o.cond.Broadcast()
			o.mu.Unlock()
		}
	}
}

// write writes b in chunks, each of which the client must take within the
// stall timeout.
func (o *outbox) write(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		if o.timer != nil {
			o.timer.Reset(o.stall)
		}
		_, err := o.w.Write(b[:n])
		if o.timer != nil && !o.timer.Stop() {
			return errStalled // the timer has fired: fail reports the stall
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

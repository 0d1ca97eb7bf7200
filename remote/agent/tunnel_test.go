package agent

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// tunnelPair is a helper's and a host's tunnels over one stream each
// way, each side's frames handled as the real loops do.
func tunnelPair(t *testing.T) (helper, host *Tunnels) {
	t.Helper()
	toHost, fromHelper := io.Pipe()
	toHelper, fromHost := io.Pipe()
	helper, host = NewTunnels(NewWriter(fromHelper), false), NewTunnels(NewWriter(fromHost), true)
	loop := func(r io.Reader, ts *Tunnels) {
		br := bufio.NewReader(r)
		for {
			f, err := ReadFrame(br)
			if err != nil {
				ts.CloseAll()
				return
			}
			if !ts.Handle(f) {
				t.Errorf("not a tunnel frame: %q", f.Type)
			}
		}
	}
	go loop(toHost, host)
	go loop(toHelper, helper)
	t.Cleanup(func() {
		fromHelper.Close()
		fromHost.Close()
	})
	return helper, host
}

// connect makes tunnel id between a connection of the helper's side and
// one of the host's, and returns the far ends a test uses.
func connect(t *testing.T, helper, host *Tunnels, id uint32) (here, there net.Conn) {
	t.Helper()
	a, here := tcpPair(t)
	b, there := tcpPair(t)
	hu, err := helper.Register(id, a)
	if err != nil {
		t.Fatal(err)
	}
	tu, err := host.Register(id, b)
	if err != nil {
		t.Fatal(err)
	}
	hu.Run()
	tu.Run()
	return here, there
}

// tcpPair is two ends of one TCP connection on the loopback: what a
// tunnel carries, with each direction's end (CloseWrite) its own.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

// A tunnel whose reader stalls holds back only itself: another tunnel
// on the same stream carries 4 MiB meanwhile, and the stalled one has
// no more than its window waiting at the far side, however much its
// sender writes.
func TestTunnelStalledReaderHoldsBackOnlyItself(t *testing.T) {
	helper, host := tunnelPair(t)
	stalledHere, _ := connect(t, helper, host, 1)
	go func() {
		big := make([]byte, 64<<20)
		_, _ = stalledHere.Write(big) // the host's end never reads
	}()
	here, there := connect(t, helper, host, 2)
	payload := bytes.Repeat([]byte("x"), 4<<20)
	go func() {
		_, _ = here.Write(payload)
		_ = here.(*net.TCPConn).CloseWrite()
	}()
	done := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, there)
		done <- int(n)
	}()
	select {
	case n := <-done:
		if n != len(payload) {
			t.Fatalf("carried %d bytes of %d", n, len(payload))
		}
	case <-time.After(30 * time.Second): // bounds the wait only
		t.Fatal("the second tunnel was held back by the stalled one")
	}
	// The stalled tunnel's sender spends its window and then waits.
	helper.mu.Lock()
	sender := helper.m[1]
	helper.mu.Unlock()
	host.mu.Lock()
	stalled := host.m[1]
	host.mu.Unlock()
	var credit int64
	var queued int
	spent := testsupport.Poll(30*time.Second, func() bool {
		sender.mu.Lock()
		credit = sender.credit
		sender.mu.Unlock()
		stalled.mu.Lock()
		queued = 0
		for _, b := range stalled.queue {
			queued += len(b)
		}
		stalled.mu.Unlock()
		return credit <= 0 || queued > TunnelWindow
	})
	if !spent || credit != 0 || queued > TunnelWindow {
		t.Fatalf("credit %d, %d bytes wait at the far side (window %d)", credit, queued, TunnelWindow)
	}
}

// One side's end of writing reaches the other: its connection reads EOF.
func TestTunnelShutReachesTheOtherSide(t *testing.T) {
	helper, host := tunnelPair(t)
	here, there := connect(t, helper, host, 7)
	_ = here.(*net.TCPConn).CloseWrite()
	_ = there.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := there.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the host's connection after the helper's end of writing: %v", err)
	}
}

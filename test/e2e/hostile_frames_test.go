package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// startListenerWith is startListener with extra serve flags.
func startListenerWith(t *testing.T, flags ...string) *listener {
	t.Helper()
	return startListenerAs(t, t.TempDir(), helperBin, nil, flags...)
}

// startListenerAs starts bin as `serve --listen` in home, as cred's user
// when cred is set. Its shutdown is a SIGTERM when the test's own client
// is not its user's (the helper refuses it).
func startListenerAs(t *testing.T, home, bin string, cred *syscall.Credential, flags ...string) *listener {
	t.Helper()
	l := &listener{t: t, home: home, sock: filepath.Join(home, "helper.sock"), stderr: &testsupport.Buffer{}}
	args := append([]string{"serve", "--listen", l.sock, "--linger", "30s"}, flags...)
	child, err := client.Spawn(client.Options{Bin: bin, Args: args, Env: baseEnv(home), Stderr: l.stderr, Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	l.child = child
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		c, err := client.Dial(ctx, l.sock, nil)
		if err == nil {
			err = c.Shutdown(waitBound)
		}
		if err != nil {
			_ = syscall.Kill(child.Pid(), syscall.SIGTERM)
		}
		cancel()
		if err := child.Wait(waitBound); err != nil {
			t.Errorf("listening helper did not exit: %v", err)
		}
		if s := l.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic") || strings.Contains(s, "BUG") {
			t.Errorf("helper stderr:\n%s", s)
		}
		if left := testsupport.UnderHome(home, true); len(left) > 0 {
			t.Errorf("processes left behind: %v", left)
		}
	})
	return l
}

// rawDial connects to a listening helper with a raw framing client, once
// it listens.
func (l *listener) rawDial() (*rawClient, net.Conn) {
	l.t.Helper()
	l.dial(nil).Close() // waits until the socket is there
	if !l.waitLog("client left without shutdown", 1) {
		l.t.Fatal("the first client was not seen leaving")
	}
	return l.rawDialNow()
}

// rawDialNow connects a raw framing client to a helper that listens.
func (l *listener) rawDialNow() (*rawClient, net.Conn) {
	l.t.Helper()
	nc, err := net.Dial("unix", l.sock)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { nc.Close() })
	return &rawClient{t: l.t, in: nc, out: bufio.NewReader(nc), stderr: l.stderr}, nc
}

// peakRSS is the helper's peak resident size so far.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	rss, err := testsupport.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return rss
}

// readToEOF reads a connection until the helper closes it: end of input,
// or a reset when it closed with our bytes still unread.
func readToEOF(t *testing.T, r io.Reader, deadline interface{ SetReadDeadline(time.Time) error }) {
	t.Helper()
	_ = deadline.SetReadDeadline(time.Now().Add(waitBound))
	if _, err := io.Copy(io.Discard, r); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the helper did not close the connection: %v", err)
	}
}

// initialized answers initialize, so the helper is up before a
// measurement.
func (c *rawClient) initialized() {
	c.t.Helper()
	c.sendFrame(`{"jsonrpc":"2.0","id":"init","method":"initialize"}`)
	if m := c.next(); m.Error != nil {
		c.t.Fatalf("initialize: %+v", m.Error)
	}
}

// A header line of 256 MiB is refused after its first kilobyte: the
// connection ends, and the helper never holds the line.
func TestHugeHeaderLineRefusedWithBoundedMemory(t *testing.T) {
	t.Parallel()
	l := startListener(t)
	c, nc := l.rawDial()
	c.initialized()
	before := peakRSS(t, l.child.Pid())
	go func() {
		chunk := []byte(strings.Repeat("9", 1<<20))
		if _, err := io.WriteString(nc, "Content-Length: "); err != nil {
			return
		}
		for range 256 {
			if _, err := nc.Write(chunk); err != nil {
				return // the helper closed the connection: expected
			}
		}
		_ = nc.(*net.UnixConn).CloseWrite()
	}()
	readToEOF(t, c.out, nc)
	after := peakRSS(t, l.child.Pid())
	t.Logf("peak RSS %d MiB before, %d MiB after", before>>20, after>>20)
	if after-before > 32<<20 {
		t.Fatalf("peak RSS grew by %d MiB reading a refused header", (after-before)>>20)
	}
	if !l.waitLog("frame header line longer than 1024 bytes", 1) {
		t.Fatalf("the refusal was not logged:\n%s", l.stderr.String())
	}
	// The helper serves the next client.
	next := l.dial(nil)
	defer next.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := next.Call(ctx, "initialize", nil, nil); err != nil {
		t.Fatal(err)
	}
}

// A frame over 64 MiB is answered -32600 and skipped without being kept;
// the connection goes on.
func TestOversizedFrameSkippedUnread(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	c.initialized()
	before := peakRSS(t, c.child.Pid())
	const size = 96 << 20
	go func() {
		if _, err := fmt.Fprintf(c.in, "Content-Length: %d\r\n\r\n", size); err != nil {
			return
		}
		chunk := []byte(strings.Repeat(" ", 1<<20))
		for range size >> 20 {
			if _, err := c.in.Write(chunk); err != nil {
				return
			}
		}
	}()
	m := c.next()
	if string(m.ID) != "null" || m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "over the limit of 67108864 bytes") {
		t.Fatalf("oversized frame: id %s error %+v", m.ID, m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`)
	if m := c.next(); string(m.ID) != "1" || m.Error != nil {
		t.Fatalf("after the skipped frame: %s %+v", m.ID, m.Error)
	}
	after := peakRSS(t, c.child.Pid())
	t.Logf("peak RSS %d MiB before, %d MiB after", before>>20, after>>20)
	if after-before > 32<<20 {
		t.Fatalf("peak RSS grew by %d MiB skipping a frame", (after-before)>>20)
	}
}

// A 60 MB frame of 30 million small numbers is refused before it is
// parsed: little time, no gigabytes, and the connection goes on.
func TestManyValuesRefusedBeforeParsing(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	c.initialized()
	before := peakRSS(t, c.child.Pid())
	body := `{"jsonrpc":"2.0","id":1,"method":"owner/attend","params":{"sessionId":"s","deliveryIds":[` +
		strings.Repeat("0,", 30_000_000) + `0]}}`
	written := make(chan time.Time, 1)
	go func() {
		_, _ = fmt.Fprintf(c.in, "Content-Length: %d\r\n\r\n%s", len(body), body)
		written <- time.Now()
	}()
	m := c.next()
	took := time.Since(<-written) // from the last byte to the answer
	if string(m.ID) != "null" || m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "at most 65536") {
		t.Fatalf("many values: id %s error %+v", m.ID, m.Error)
	}
	c.sendFrame(`{"jsonrpc":"2.0","id":2,"method":"initialize"}`)
	if m := c.next(); string(m.ID) != "2" || m.Error != nil {
		t.Fatalf("after the refused frame: %s %+v", m.ID, m.Error)
	}
	after := peakRSS(t, c.child.Pid())
	t.Logf("answered in %v; peak RSS %d MiB before, %d MiB after", took, before>>20, after>>20)
	// The body itself is read whole (60 MB, and the race detector's
	// shadow of it); what must not come is the decoding's gigabytes.
	if after-before > 512<<20 {
		t.Fatalf("peak RSS grew by %d MiB refusing a frame", (after-before)>>20)
	}
}

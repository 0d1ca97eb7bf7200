package e2e

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

type logStat struct {
	Address       string
	LogicalBytes  int64
	Physical      string
	PhysicalBytes int64
	Retired       bool
}

type readResult struct {
	Text       string
	Offset     int64
	Length     int64
	TotalBytes int64
	EOF        bool
}

type grepResult struct {
	Matches []struct {
		Address string
		Line    int64
		Text    string
		Context bool
	}
	Truncated bool
}

func (s *session) stat(addr string, extra map[string]any) (logStat, error) {
	p := map[string]any{"sessionId": s.id, "address": addr}
	for k, v := range extra {
		p[k] = v
	}
	var st logStat
	err := s.h.call("spool/stat", p, &st)
	return st, err
}

// waitPhysical waits until the log's physical form is want.
func (s *session) waitPhysical(addr, want string) logStat {
	s.h.t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		st, err := s.stat(addr, map[string]any{"as": "user"})
		if err != nil {
			s.h.t.Fatal(err)
		}
		if st.Physical == want {
			return st
		}
		if time.Now().After(deadline) {
			s.h.t.Fatalf("%s still %s (want %s) after %v", addr, st.Physical, want, waitBound)
		}
		time.Sleep(20 * time.Millisecond) // polling a background job, bounded by deadline
	}
}

// views returns the answers a reader sees of one log.
func (s *session) views(addr string) []any {
	s.h.t.Helper()
	var tail, lines, whole readResult
	var grep grepResult
	var glob struct{ Addresses []string }
	s.h.mustCall("spool/read", map[string]any{"sessionId": s.id, "address": addr, "offset": 2000000 - 4096, "length": 4096}, &tail)
	s.h.mustCall("spool/read", map[string]any{"sessionId": s.id, "address": addr, "line": 30000, "lines": 5}, &lines)
	s.h.mustCall("spool/read", map[string]any{"sessionId": s.id, "address": addr, "offset": 1048000, "length": 1 << 20}, &whole)
	s.h.mustCall("spool/grep", map[string]any{"sessionId": s.id, "pattern": `^line 5000[0-9] `, "context": 1}, &grep)
	s.h.mustCall("spool/glob", map[string]any{"sessionId": s.id, "pattern": "executions/*.log"}, &glob)
	return []any{tail, lines, whole, grep, glob}
}

func TestSpoolViewsIdenticalAcrossRetirement(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"retainMs": 200, "retireAfterMs": 200})
	// Random output does not compress: it must stay raw.
	rnd := s.mustStart("head -c 300000 /dev/urandom | base64", nil)
	// Build-log-like output compresses well.
	o := s.mustStart(`for i in $(seq 1 300000); do printf 'line %d of the build: ok\n' $i; done | head -c 2000000`, nil)
	addr := o.Facts.OutputAddress
	if o.Facts.OutputBytes != 2000000 {
		t.Fatalf("output: %+v", o.Facts)
	}
	st, err := s.stat(addr, nil)
	if err != nil || st.Physical != "raw" || st.LogicalBytes != 2000000 {
		t.Fatalf("before: %+v %v", st, err)
	}
	before := s.views(addr)
	after := s.waitPhysical(addr, "gzip")
	if !after.Retired || after.LogicalBytes != 2000000 || after.PhysicalBytes >= after.LogicalBytes {
		t.Fatalf("after retirement: %+v", after)
	}
	if got := s.views(addr); !reflect.DeepEqual(before, got) {
		t.Fatalf("views differ after retirement:\nbefore %+v\nafter  %+v", before, got)
	}
	g := before[3].(grepResult)
	if len(g.Matches) != 12 || g.Matches[0].Line != 49999 || !g.Matches[0].Context || g.Matches[1].Text != "line 50000 of the build: ok" || !g.Matches[11].Context {
		t.Fatalf("grep: %+v", g)
	}
	// The random log was tried first and kept raw, being no smaller.
	if st, _ := s.stat(rnd.Facts.OutputAddress, nil); st.Physical != "raw" || st.Retired {
		t.Fatalf("random output: %+v", st)
	}
	gz := filepath.Join(s.stateDir, "executions", o.Facts.ExecutionID+".log.gz")
	if fi, err := os.Stat(gz); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", gz, fi, err)
	}
}

func TestSpoolAuthorityAndClosedAddresses(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	w := s.mustStart("echo secret of the worker", map[string]any{"owner": "/root/worker"})
	r := s.mustStart("echo root output", nil)
	var glob struct{ Addresses []string }
	h.mustCall("spool/glob", map[string]any{"sessionId": s.id}, &glob)
	if len(glob.Addresses) != 1 || glob.Addresses[0] != r.Facts.OutputAddress {
		t.Fatalf("/root sees %v", glob.Addresses)
	}
	h.mustCall("spool/glob", map[string]any{"sessionId": s.id, "as": "user"}, &glob)
	if len(glob.Addresses) != 2 {
		t.Fatalf("user sees %v", glob.Addresses)
	}
	h.wantError("spool/read", map[string]any{"sessionId": s.id, "address": w.Facts.OutputAddress}, -32001, "not-found")
	var g grepResult
	h.mustCall("spool/grep", map[string]any{"sessionId": s.id, "pattern": "secret"}, &g)
	if len(g.Matches) != 0 {
		t.Fatalf("/root grepped the worker's log: %+v", g)
	}
	var rr readResult
	h.mustCall("spool/read", map[string]any{"sessionId": s.id, "address": w.Facts.OutputAddress, "owner": "/root/worker"}, &rr)
	if rr.Text != "secret of the worker\n" || !rr.EOF {
		t.Fatalf("owner read: %+v", rr)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(s.stateDir, "executions", "evil.log")); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{
		"artifact://executions/../lock", "/etc/passwd", "file:///etc/passwd", "artifact://other/x.log",
		"artifact://executions/evil.log", "executions/sub/x.log",
	} {
		e := h.wantError("spool/read", map[string]any{"sessionId": s.id, "address": addr, "as": "user"}, -32003, "refused")
		if strings.Contains(e.Message, "root:") {
			t.Fatalf("%s: content leaked: %s", addr, e.Message)
		}
	}
}

func TestSpoolGrepCancelReleasesViews(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(map[string]any{"retainMs": 100, "retireAfterMs": 100, "outputLimitBytes": 128 << 20})
	// A large log that a pattern never matching takes a while to scan.
	o := s.mustStart(`yes 'a line of build output that never matches the pattern' | head -c 20000000`, nil)
	done := make(chan error, 1)
	go func() {
		done <- h.c.Call(context.Background(), "spool/grep",
			map[string]any{"sessionId": s.id, "pattern": `(x+x+)+y`, "addresses": []string{o.Facts.OutputAddress}},
			nil, jsonrpc2.PickID(jsonrpc2.ID{Str: "grep-1", IsString: true}))
	}()
	_ = h.c.Notify(context.Background(), "$/cancelRequest", map[string]any{"id": "grep-1"})
	select {
	case err := <-done:
		// Either it was cancelled, or it had already finished: one reply.
		if e, ok := rpcError(err); err != nil && (!ok || e.Code != -32003) {
			t.Fatalf("cancelled grep: %v", err)
		}
	case <-time.After(waitBound):
		t.Fatal("a cancelled grep never answered")
	}
	// No view outlives its request: retirement can remove the raw file.
	st := s.waitPhysical(o.Facts.OutputAddress, "gzip")
	if _, err := os.Stat(filepath.Join(s.stateDir, "executions", o.Facts.ExecutionID+".log")); !os.IsNotExist(err) || !st.Retired {
		t.Fatalf("raw log kept after retirement (a view still held it?): %v %+v", err, st)
	}
}

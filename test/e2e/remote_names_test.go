package e2e

// TRAMP names of a remote cwd: the SSH methods, hop chains, and the names
// the helper refuses.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// helperConns counts the TCP connections the helper holds to port.
func helperConns(h *helper, port int) int {
	n := 0
	for _, pid := range testsupport.ConnectedTo(port) {
		if pid == h.c.Child().Pid() {
			n++
		}
	}
	return n
}

// /ssh:, /scp:, /sshx:, /scpx: and /rsync: names of one host run on the
// same pooled connection; the facts name the one target, and the method
// as written. Behind a jump host the helper's one connection is the jump
// host's, and none goes to the host itself.
func TestRemoteSSHMethodsShareTheConnection(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteSSHMethodsShareTheConnection)
}

func testRemoteSSHMethodsShareTheConnection(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	dir := t.TempDir()
	for _, m := range remote.Methods {
		cwd := fmt.Sprintf("/%s%s:%s@127.0.0.1#%d:%s", via(srv), m, srv.User, srv.Port, dir)
		o := s.mustStart("pwd", map[string]any{"cwd": cwd})
		f := o.Facts
		if o.Output != dir+"\n" || f.Status != execution.StatusCompleted {
			t.Fatalf("%s: %q %+v", cwd, o.Output, f)
		}
		if f.Target != targetOf(srv) || f.TargetMethod != m || f.SupportTier != remote.TierSupported || f.Cwd != cwd || f.RemoteMode != modeOf(t) {
			t.Fatalf("%s: target %q method %q tier %q cwd %q mode %q", cwd, f.Target, f.TargetMethod, f.SupportTier, f.Cwd, f.RemoteMode)
		}
	}
	port, direct := srv.Port, 1
	if j, ok := jumps.Load(srv); ok {
		port, direct = j.(*sshd.Server).Port, 0
	}
	if n := helperConns(h, port); n != 1 {
		t.Fatalf("the helper holds %d connections to port %d after %d methods; want one", n, port, len(remote.Methods))
	}
	if n := helperConns(h, srv.Port); n != direct {
		t.Fatalf("the helper holds %d connections to the host itself; want %d", n, direct)
	}
	// A local command is a supported target with no method.
	if f := s.mustStart("true", nil).Facts; f.Target != "local" || f.TargetMethod != "" || f.SupportTier != remote.TierSupported {
		t.Fatalf("local: target %q method %q tier %q", f.Target, f.TargetMethod, f.SupportTier)
	}
}

// A name the helper does not run is refused at once with invalid params
// that name the wrong part, and nothing is left: no execution, no log, no
// connection (the helper's stop checks that no process of an execution
// is).
func TestRemoteBadNamesRefused(t *testing.T) {
	t.Parallel()
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	host := fmt.Sprintf("%s@127.0.0.1#%d", srv.User, srv.Port)
	for _, tc := range []struct {
		cwd  string
		want []string
	}{
		{"/adb:phone:/tmp", []string{`method "adb"`, "ssh, scp, sshx, scpx, rsync, sudo, podman, docker, kubernetes"}},
		{"/kubernetes:me@pod:/", []string{`a user ("me") has no meaning for method "kubernetes"`}},
		{"/sudo:root@elsewhere.example:/tmp", []string{"sudo runs on this machine", `"elsewhere.example"`}},
		{"/podman:-box:/tmp", []string{`malformed container name "-box"`}},
		{"/ssh:" + host + "|sudo:root@localhost:/tmp", []string{`hop 2`, `sudo runs on the host of the hop before it ("127.0.0.1"), not on "localhost"`}},
		{"/ssh:" + host + "|podman:box:/tmp", []string{`hop 2`, `"podman"`, "SSH only"}},
		{"/ssh:" + host + "|docker:box|ssh:" + host + ":/tmp", []string{`hop 2`, `"docker"`}},
		{"/ssh:" + host + "|ssh::/tmp", []string{`hop 2`, "empty host"}},
		{"/ssh:" + host + "|ssh:h#x:/tmp", []string{`hop 2 ("ssh:h#x:/tmp")`, "port"}},
		{"/ssh:me@h#0:/tmp", []string{"port must be a number"}},
		{"/ssh:[::1:/tmp", []string{"unclosed ["}},
		{"/ssh:h", []string{"no ':' after the host"}},
	} {
		// The answer comes within 2 s: a bound on the wait, not a speed.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.c.Call(ctx, "exec/start", map[string]any{"sessionId": s.id, "command": "echo never", "cwd": tc.cwd}, nil)
		cancel()
		e, ok := rpcError(err)
		if !ok || e.Code != -32602 || errKind(e) != "invalid-params" {
			t.Fatalf("%s: %v; want invalid params within 2 s", tc.cwd, err)
		}
		for _, w := range append(tc.want, tc.cwd) {
			if !strings.Contains(e.Message, w) {
				t.Fatalf("%s: message %q does not name %q", tc.cwd, e.Message, w)
			}
		}
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	logs, _ := filepath.Glob(filepath.Join(s.stateDir, "executions", "*"))
	if len(list.Executions) != 0 || len(logs) != 0 {
		t.Fatalf("executions %+v, logs %v", list.Executions, logs)
	}
	// (Not sshd's processes: the fixture's own readiness probe may leave
	// one for a moment.)
	if n := helperConns(h, srv.Port); n != 0 {
		t.Fatalf("a refused name connected: the helper holds %d connections", n)
	}
}

// A sandbox path of the cwd's host may be written with any SSH method,
// through the same hops; the same host reached another way (directly,
// not through the hop) is another target, and refused.
func TestRemoteSandboxPathsOfAnyMethodThroughTheHop(t *testing.T) {
	t.Parallel()
	srv, jump := sshd.Start(t), sshd.Start(t)
	if err := jump.Admit(srv); err != nil {
		t.Fatal(err)
	}
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	in := t.TempDir()
	hop := fmt.Sprintf("%s@127.0.0.1#%d", jump.User, jump.Port)
	host := fmt.Sprintf("%s@127.0.0.1#%d", srv.User, srv.Port)
	cwd := "/ssh:" + hop + "|ssh:" + host + ":" + in
	o := s.mustStart("echo yes > in.txt", map[string]any{"cwd": cwd, "sandbox": confined("/scpx:" + hop + "|rsync:" + host + ":" + in)})
	wantHostBubblewrap(t, o.Facts)
	if got, err := os.ReadFile(filepath.Join(in, "in.txt")); err != nil || string(got) != "yes\n" || o.Facts.TargetMethod != "ssh" {
		t.Fatalf("write inside the root named through the hop: %q, %v; facts %+v", got, err, o.Facts)
	}
	e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "cwd": cwd,
		"sandbox": confined("/scp:" + host + ":" + in)}, -32602, "invalid-params")
	if !strings.Contains(e.Message, "another host") {
		t.Fatalf("a root of the host reached directly: %s", e.Message)
	}
}

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// The same policy on an SSH host: its host agent resolves it against the
// host's paths and runs the command under bubblewrap there. The private
// sshd runs on this machine, so the test sees the host's files directly.

// agentHelper starts a helper that runs srv's commands under its host
// agent.
func agentHelper(t *testing.T, srv *sshd.Server) *helper {
	t.Helper()
	h := startHelper(t, withEnv("HOME="+srv.Home, execution.RemoteModeVar+"="+remote.ModeAgent))
	h.home = srv.Home
	return h
}

func wantHostBubblewrap(t *testing.T, f execution.Facts) {
	t.Helper()
	wantBubblewrap(t, f)
	if f.RemoteMode != remote.ModeAgent {
		t.Fatalf("remoteMode %q, want %q", f.RemoteMode, remote.ModeAgent)
	}
}

func TestRemoteSandboxWritesOnlyInsideWritableRoots(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	in, out := t.TempDir(), t.TempDir()
	// The root named as a TRAMP name of the same host, as Emacs gives it.
	o := s.mustStart(fmt.Sprintf("echo yes > %s/in.txt; echo no > %s/out.txt", in, out),
		map[string]any{"cwd": tramp(srv, in), "sandbox": confined(tramp(srv, in))})
	if !o.Final {
		t.Fatalf("not final: %+v", o)
	}
	wantHostBubblewrap(t, o.Facts)
	if got, err := os.ReadFile(filepath.Join(in, "in.txt")); err != nil || string(got) != "yes\n" {
		t.Errorf("write inside the writable root: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(out, "out.txt")); !os.IsNotExist(err) {
		t.Errorf("write outside the writable roots reached the host's disk: %v", err)
	}
	if o.Facts.Outcome != execution.Failure || !hasDenial(o.Facts, filepath.Join(out, "out.txt"), "write") {
		t.Errorf("outcome %s, denials %+v; want failure with %s/out.txt write; output %q", o.Facts.Outcome, o.Facts.SandboxDenials, out, o.Output)
	}
	if hasDenial(o.Facts, filepath.Join(in, "in.txt"), "write") {
		t.Errorf("the allowed write is listed as a denial: %+v", o.Facts.SandboxDenials)
	}
	// The policy as applied holds the host's paths: the root, the host
	// home's ~/.ssh, the agents' own directory.
	p := o.Facts.Sandbox.Policy
	for _, want := range []string{filepath.Join(srv.HostHome, ".ssh"), filepath.Join(srv.HostHome, ".cache", "mevedel-exec")} {
		if !slices.Contains(p.InaccessiblePaths, want) {
			t.Errorf("applied policy %+v lacks the inaccessible %s", p, want)
		}
	}
	if !slices.Equal(p.WritableRoots, []string{in}) {
		t.Errorf("applied writable roots %v, want [%s]", p.WritableRoots, in)
	}
	// A root on another host is a mistake, not a path here.
	h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "cwd": tramp(srv, in),
		"sandbox": confined("/ssh:elsewhere.invalid:" + in)}, -32602, "invalid-params")
	// A root missing on the host is too.
	h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "true", "cwd": tramp(srv, in),
		"sandbox": confined(filepath.Join(in, "missing"))}, -32602, "invalid-params")
}

func TestRemoteSandboxHidesTheHostsSecrets(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	ssh := filepath.Join(srv.HostHome, ".ssh")
	if err := os.MkdirAll(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ssh, "id_test"), []byte("HOST-PRIVATE-KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The whole host home (~ there) is writable, yet its ~/.ssh stays
	// hidden and ~/.gnupg cannot be made.
	cwd := tramp(srv, "~")
	o := s.mustStart("cat ~/.ssh/id_*; echo cat=$?; mkdir -p ~/.gnupg/k; echo mkdir=$?; echo ok > ~/note; echo note=$?",
		map[string]any{"cwd": cwd, "sandbox": confined("~")})
	wantHostBubblewrap(t, o.Facts)
	if strings.Contains(o.Output, "HOST-PRIVATE-KEY") {
		t.Fatalf("the confined command read the host's ~/.ssh: %q", o.Output)
	}
	for _, want := range []string{"cat=1", "note=0"} {
		if !strings.Contains(o.Output, want) {
			t.Errorf("output %q lacks %q", o.Output, want)
		}
	}
	if strings.Contains(o.Output, "mkdir=0") {
		t.Errorf("the command created ~/.gnupg: %q", o.Output)
	}
	if _, err := os.Stat(filepath.Join(srv.HostHome, ".gnupg")); !os.IsNotExist(err) {
		t.Errorf("~/.gnupg exists on the host after the command: %v", err)
	}
	if _, err := os.Stat(filepath.Join(srv.HostHome, "note")); err != nil {
		t.Errorf("the allowed write in the host home: %v", err)
	}
	o = s.mustStart("cat ~/.ssh/id_*", map[string]any{"cwd": cwd, "sandbox": confined("~")})
	if !hasDenial(o.Facts, filepath.Join(ssh, "id_*"), "read") {
		t.Errorf("denials %+v lack the hidden key; output %q", o.Facts.SandboxDenials, o.Output)
	}
}

func TestRemoteSandboxGitDirectoryIsReadOnly(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	sub := filepath.Join(repo, "src")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// The root is inside the repository: its .git, found on the host, is
	// read-only.
	o := s.mustStart("cat ../.git/HEAD && echo evil > ../.git/hooks/pre-commit; echo hook=$?; echo fine > work.txt",
		map[string]any{"cwd": tramp(srv, sub), "sandbox": confined(sub)})
	wantHostBubblewrap(t, o.Facts)
	if !strings.Contains(o.Output, "ref: refs/heads/") || !strings.Contains(o.Output, "hook=1") {
		t.Fatalf("output %q: want .git readable and its hook not writable", o.Output)
	}
	if _, err := os.Stat(filepath.Join(repo, ".git/hooks/pre-commit")); !os.IsNotExist(err) {
		t.Errorf("the hook was written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sub, "work.txt")); err != nil {
		t.Errorf("the work tree write: %v", err)
	}
	if !slices.Contains(o.Facts.Sandbox.Policy.ReadOnlyPaths, filepath.Join(repo, ".git")) {
		t.Errorf("applied policy %+v lacks the repository's .git", o.Facts.Sandbox.Policy)
	}
}

func TestRemoteSandboxNetworkDeny(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	srv := sshd.Start(t)
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	cwd := tramp(srv, t.TempDir())
	cmd := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port)
	o := s.mustStart(cmd, map[string]any{"cwd": cwd, "sandbox": map[string]any{"mode": "required", "network": "deny"}})
	wantHostBubblewrap(t, o.Facts)
	if strings.Contains(o.Output, "connected") || o.Facts.Sandbox.Network != sandbox.NetworkDeny {
		t.Errorf("network deny: output %q, sandbox %+v", o.Output, o.Facts.Sandbox)
	}
	// The same command with the network allowed connects: the port is real.
	o = s.mustStart(cmd, map[string]any{"cwd": cwd, "sandbox": map[string]any{"mode": "required", "network": "allow"}})
	if !strings.Contains(o.Output, "connected") {
		t.Errorf("network allow: output %q", o.Output)
	}
}

func TestRemoteSandboxHoldsThroughYieldPollAndStop(t *testing.T) {
	t.Parallel()
	holdsThroughYieldPollAndStop(t, onHost(t))
}

func TestRemoteSandboxCommandKeepsItsSignalsAndDescriptors(t *testing.T) {
	t.Parallel()
	keepsItsSignalsAndDescriptors(t, onHost(t))
}

// hostPathWithout makes a PATH directory for the host's sessions holding
// everything of /usr/bin but bwrap.
func hostPathWithout(t *testing.T, tool string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir("/usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == tool {
			continue
		}
		if err := os.Symlink(filepath.Join("/usr/bin", e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runningWith lists the processes whose command line holds marker.
func runningWith(marker string) []int {
	var out []int
	for _, p := range process.Table() {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/cmdline"); err == nil && strings.Contains(string(b), marker) {
			out = append(out, p.Pid)
		}
	}
	return out
}

func TestRemoteSandboxRequiredWithoutBackendRefuses(t *testing.T) {
	t.Parallel()
	// The host's sessions, its agent's included, find no bwrap.
	srv := sshd.StartEnv(t, "PATH="+hostPathWithout(t, "bwrap"))
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "touch " + marker + "; sleep 30", "cwd": tramp(srv, dir),
		"sandbox": map[string]any{"mode": "required"}}, -32003, "refused")
	if !strings.Contains(e.Message, "bwrap") {
		t.Errorf("the refusal does not name the reason: %s", e.Message)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the refused command ran: %v", err)
	}
	if pids := runningWith(marker); len(pids) > 0 {
		t.Errorf("the refused command left processes %v", pids)
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 0 {
		t.Errorf("a refused start left an execution: %+v", list.Executions)
	}
	// Best effort runs unconfined, under the agent, and says why.
	o := s.mustStart("touch "+marker, map[string]any{"cwd": tramp(srv, dir), "sandbox": map[string]any{"mode": "best-effort"}})
	if f := o.Facts.Sandbox; f == nil || f.Backend != sandbox.BackendNone || !strings.Contains(f.Reason, "bwrap") || o.Facts.RemoteMode != remote.ModeAgent {
		t.Errorf("best effort without a backend on the host: facts.sandbox %+v, remoteMode %q", f, o.Facts.RemoteMode)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the best-effort command did not run: %v", err)
	}
}

// hostGroupsLeft lists the cgroups that srv's host agents made and that
// are still there.
func hostGroupsLeft(srv *sshd.Server) []string {
	var left []string
	for _, p := range process.Table() {
		if exe, ok := testsupport.Exe(p.Pid); ok && strings.HasPrefix(exe, srv.HostHome+"/") {
			left = append(left, groupsOf(p.Pid)...)
		}
	}
	return left
}

// onHost is a private sshd's host, run through its agent, with a fresh
// helper and session.
func onHost(t *testing.T) where {
	srv := sshd.Start(t)
	h := agentHelper(t, srv)
	s, _ := openRemote(h)
	return where{h: h, s: s, home: srv.HostHome, dir: func(d string) string { return tramp(srv, d) }, wantBubblewrap: wantHostBubblewrap,
		wantGroupsGone: func(t *testing.T) {
			t.Helper()
			// The agent removes its groups before the execution settles.
			if left := hostGroupsLeft(srv); len(left) > 0 {
				t.Errorf("cgroups left on the host after settlement: %v", left)
			}
		}}
}

func TestRemoteLimitsMemoryHogEndsWithResourceLimit(t *testing.T) {
	t.Parallel()
	memoryHogEndsWithResourceLimit(t, onHost(t))
}

func TestRemoteLimitsPidsCapAForkLoop(t *testing.T) {
	t.Parallel()
	f := pidsCapAForkLoop(t, onHost(t))
	if f.Resources == nil || f.Resources.Applied[sandbox.LimitPids] == "" {
		t.Errorf("facts.resources %+v", f.Resources)
	}
	// Without a sandbox asked, the facts say it is off.
	if f.Sandbox == nil || f.Sandbox.Backend != sandbox.BackendNone || f.Sandbox.Reason != "sandbox mode is off" {
		t.Errorf("facts.sandbox %+v", f.Sandbox)
	}
}

// Through the wrapper there is no backend: required is refused before
// anything runs, best-effort runs and says why, limits are listed as not
// applied.
func TestRemoteSandboxThroughTheWrapper(t *testing.T) {
	t.Parallel()
	srv := sshd.Start(t)
	h := startHelper(t, withEnv("HOME="+srv.Home, execution.RemoteModeVar+"="+remote.ModeWrapper))
	h.home = srv.Home
	s, _ := openRemote(h)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "touch " + marker, "cwd": tramp(srv, dir),
		"sandbox": map[string]any{"mode": "required"}}, -32003, "refused")
	if !strings.Contains(e.Message, "wrapper") {
		t.Errorf("the refusal does not name the reason: %s", e.Message)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the refused remote command ran: %v", err)
	}
	o := s.mustStart("echo hi", map[string]any{"cwd": tramp(srv, dir), "sandbox": map[string]any{"mode": "best-effort"},
		"resources": map[string]any{"memoryBytes": 1 << 30}})
	if f := o.Facts.Sandbox; f == nil || f.Backend != sandbox.BackendNone || !strings.Contains(f.Reason, "wrapper") || o.Facts.RemoteMode != remote.ModeWrapper {
		t.Errorf("facts.sandbox %+v, remoteMode %q", f, o.Facts.RemoteMode)
	}
	if r := o.Facts.Resources; r == nil || !strings.Contains(r.NotApplied[sandbox.LimitMemory], "wrapper") || len(r.Applied) != 0 {
		t.Errorf("facts.resources %+v", r)
	}
}

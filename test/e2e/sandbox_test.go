package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// confined is a sandbox object that requires bubblewrap.
func confined(roots ...string) map[string]any {
	return map[string]any{"mode": "required", "writableRoots": roots}
}

func hasDenial(f execution.Facts, path, op string) bool {
	return slices.Contains(f.SandboxDenials, sandbox.Denial{Path: path, Operation: op})
}

func wantBubblewrap(t *testing.T, f execution.Facts) {
	t.Helper()
	if f.Sandbox == nil || f.Sandbox.Backend != sandbox.BackendBubblewrap || f.Sandbox.Policy == nil {
		t.Fatalf("facts.sandbox = %+v, want backend bubblewrap with its policy", f.Sandbox)
	}
}

// where is a place confined commands run: this machine, or an SSH host
// through its agent (onHost). The tests that hold in both share a body.
type where struct {
	h *helper
	s *session
	// home is the home of the commands there.
	home string
	// dir names a local directory as a start's cwd there.
	dir func(string) string
	// wantBubblewrap checks that bubblewrap confined the command there.
	wantBubblewrap func(*testing.T, execution.Facts)
	// wantGroupsGone checks that no resource group outlived settlement.
	wantGroupsGone func(*testing.T)
}

// here is this machine, with a fresh helper and session.
func here(t *testing.T) where {
	h := startHelper(t)
	return where{h: h, s: h.open(nil), home: h.home, dir: func(d string) string { return d }, wantBubblewrap: wantBubblewrap,
		wantGroupsGone: func(t *testing.T) {
			t.Helper()
			if left := groupsLeft(t, h); len(left) > 0 {
				t.Errorf("cgroups left after settlement: %v", left)
			}
		}}
}

func TestSandboxWritesOnlyInsideWritableRoots(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	in, out := t.TempDir(), t.TempDir()
	o := s.mustStart(fmt.Sprintf("echo yes > %s/in.txt; echo no > %s/out.txt", in, out),
		map[string]any{"cwd": in, "sandbox": confined(in)})
	if !o.Final {
		t.Fatalf("not final: %+v", o)
	}
	wantBubblewrap(t, o.Facts)
	if got, err := os.ReadFile(filepath.Join(in, "in.txt")); err != nil || string(got) != "yes\n" {
		t.Errorf("write inside the writable root: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(out, "out.txt")); !os.IsNotExist(err) {
		t.Errorf("write outside the writable roots reached the disk: %v", err)
	}
	if o.Facts.Outcome != execution.Failure || !hasDenial(o.Facts, filepath.Join(out, "out.txt"), "write") {
		t.Errorf("outcome %s, denials %+v; want failure with %s/out.txt write; output %q", o.Facts.Outcome, o.Facts.SandboxDenials, out, o.Output)
	}
	if hasDenial(o.Facts, filepath.Join(in, "in.txt"), "write") {
		t.Errorf("the allowed write is listed as a denial: %+v", o.Facts.SandboxDenials)
	}
	// The policy as applied is in the facts: the state directory is always
	// hidden.
	if p := o.Facts.Sandbox.Policy; !slices.Contains(p.WritableRoots, in) || !slices.Contains(p.InaccessiblePaths, s.stateDir) {
		t.Errorf("applied policy %+v lacks the root %s or the state directory %s", p, in, s.stateDir)
	}
}

func TestSandboxHidesSecretsInsideAWritableRoot(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	ssh := filepath.Join(h.home, ".ssh")
	if err := os.Mkdir(ssh, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ssh, "id_ed25519"), []byte("PRIVATE-KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The whole home is writable, yet ~/.ssh stays hidden and ~/.gnupg,
	// which does not exist, cannot be made.
	o := s.mustStart("cat ~/.ssh/id_*; echo cat=$?; mkdir -p ~/.gnupg/private-keys; echo mkdir=$?; echo ok > ~/note; echo note=$?",
		map[string]any{"sandbox": confined(h.home)})
	if strings.Contains(o.Output, "PRIVATE-KEY") {
		t.Fatalf("the confined command read ~/.ssh: %q", o.Output)
	}
	for _, want := range []string{"cat=1", "note=0"} {
		if !strings.Contains(o.Output, want) {
			t.Errorf("output %q lacks %q", o.Output, want)
		}
	}
	if strings.Contains(o.Output, "mkdir=0") {
		t.Errorf("the command created ~/.gnupg: %q", o.Output)
	}
	if _, err := os.Stat(filepath.Join(h.home, ".gnupg")); !os.IsNotExist(err) {
		t.Errorf("~/.gnupg exists on the host after the command: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.home, "note")); err != nil {
		t.Errorf("the allowed write in the home: %v", err)
	}
	o = s.mustStart("cat ~/.ssh/id_*", map[string]any{"sandbox": confined(h.home)})
	if !hasDenial(o.Facts, filepath.Join(ssh, "id_*"), "read") {
		t.Errorf("denials %+v lack the hidden key; output %q", o.Facts.SandboxDenials, o.Output)
	}
}

func TestSandboxGitDirectoryIsReadOnly(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	o := s.mustStart("cat .git/HEAD && echo evil > .git/hooks/pre-commit; echo hook=$?; echo fine > work.txt",
		map[string]any{"cwd": repo, "sandbox": confined(repo)})
	if !strings.Contains(o.Output, "ref: refs/heads/") || !strings.Contains(o.Output, "hook=1") {
		t.Fatalf("output %q: want .git readable and its hook not writable", o.Output)
	}
	if _, err := os.Stat(filepath.Join(repo, ".git/hooks/pre-commit")); !os.IsNotExist(err) {
		t.Errorf("the hook was written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(repo, "work.txt")); err != nil {
		t.Errorf("the work tree write: %v", err)
	}
}

func TestSandboxNetworkDeny(t *testing.T) {
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
	h := startHelper(t)
	s := h.open(nil)
	cmd := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port)
	deny := map[string]any{"mode": "required", "network": "deny"}
	o := s.mustStart(cmd, map[string]any{"sandbox": deny})
	if strings.Contains(o.Output, "connected") || o.Facts.Sandbox == nil || o.Facts.Sandbox.Network != sandbox.NetworkDeny {
		t.Errorf("network deny: output %q, sandbox %+v", o.Output, o.Facts.Sandbox)
	}
	// Loopback inside the namespace still works.
	o = s.mustStart("bash -c 'exec 3<>/dev/tcp/127.0.0.1/1' 2>&1 | grep -q 'Connection refused' && echo loopback-up", map[string]any{"sandbox": deny})
	if strings.TrimSpace(o.Output) != "loopback-up" {
		t.Errorf("loopback in the private namespace: %q", o.Output)
	}
	// The same command with the network allowed connects: the port is real.
	o = s.mustStart(cmd, map[string]any{"sandbox": map[string]any{"mode": "required", "network": "allow"}})
	if !strings.Contains(o.Output, "connected") {
		t.Errorf("network allow: output %q", o.Output)
	}
}

func TestSandboxHoldsThroughYieldPollAndStop(t *testing.T) {
	t.Parallel()
	holdsThroughYieldPollAndStop(t, here(t))
}

// holdsThroughYieldPollAndStop: a yielded confined command is still
// confined when it writes after a poll, and when it is stopped.
func holdsThroughYieldPollAndStop(t *testing.T, w where) {
	h, s := w.h, w.s
	work, outside := t.TempDir(), t.TempDir()
	gate := fifo(t, "gate")
	o := s.mustStart(fmt.Sprintf("echo ready; read _ < %s; echo x > %s/late; echo late=$?; echo y > %s/ok; echo ok=$?; read _ < %s", gate, outside, work, gate),
		map[string]any{"cwd": w.dir(work), "sandbox": confined(work), "yieldMs": 100})
	if o.Final {
		t.Fatalf("did not yield: %+v", o)
	}
	id := o.Facts.ExecutionID
	w.wantBubblewrap(t, o.Facts)
	s.observeUntil(o, "ready")
	release(t, gate)
	out := s.observeUntil(s.mustObserve(id, nil), "ok=")
	if !strings.Contains(out, "late=1") || !strings.Contains(out, "ok=0") {
		t.Fatalf("after the yield: %q", out)
	}
	if _, err := os.Stat(filepath.Join(outside, "late")); !os.IsNotExist(err) {
		t.Errorf("the yielded command wrote outside its roots: %v", err)
	}
	h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id}, nil)
	_, final := s.waitFinal(id, nil)
	if final.Facts.Termination != execution.Stopped {
		t.Errorf("termination %s, want stopped", final.Facts.Termination)
	}
	w.wantBubblewrap(t, final.Facts)
}

func TestSandboxCommandKeepsItsSignalsAndDescriptors(t *testing.T) {
	strayDescriptor(t)
	keepsItsSignalsAndDescriptors(t, here(t))
}

// strayDescriptor leaves a descriptor open without close-on-exec in this
// process, as a careless parent would, for the helper started next to
// inherit.
func strayDescriptor(t *testing.T) {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const stray = 100
	if err := unix.Dup3(int(f.Fd()), stray, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(stray) })
}

// keepsItsSignalsAndDescriptors: inside the box the command starts with
// the signal dispositions and descriptors it has outside (nothing the
// shielding of bwrap used leaks in), and a stop's SIGTERM reaches its
// trap, whose exit code is the execution's.
func keepsItsSignalsAndDescriptors(t *testing.T, w where) {
	s := w.s
	work := t.TempDir()
	// The shell's own descriptors, listed by the shell itself: a pipeline
	// or a command substitution would hold pipes of its own meanwhile.
	show := `grep -E '^Sig(Ign|Blk)' /proc/self/status; cd /proc/$$/fd && echo *`
	outside := s.mustStart(show, map[string]any{"cwd": w.dir(work)})
	inside := s.mustStart(show, map[string]any{"cwd": w.dir(work), "sandbox": confined(work)})
	w.wantBubblewrap(t, inside.Facts)
	if !outside.Final || !inside.Final || outside.Output == "" || inside.Output != outside.Output {
		t.Errorf("the command's signals and descriptors differ inside the box:\noutside %q\ninside  %q", outside.Output, inside.Output)
	}
	// Stdio and the directory being listed, nothing the helper or its
	// parent held (this test's own process has more open).
	if !strings.HasSuffix(outside.Output, "\n0 1 2 3\n") {
		t.Errorf("the command has descriptors besides stdio: %q", outside.Output)
	}
	o := s.mustStart(`trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done`,
		map[string]any{"cwd": w.dir(work), "sandbox": confined(work), "yieldMs": 100})
	if o.Final {
		t.Fatalf("did not yield: %+v", o)
	}
	id := o.Facts.ExecutionID
	s.observeUntil(o, "ready")
	w.h.mustCall("exec/stop", map[string]any{"sessionId": s.id, "executionId": id}, nil)
	out, final := s.waitFinal(id, nil)
	if !strings.Contains(out, "got TERM") || final.Facts.ExitCode == nil || *final.Facts.ExitCode != 7 {
		t.Errorf("the trap's exit did not end the stopped command: code %v, output %q, facts %+v", final.Facts.ExitCode, out, final.Facts)
	}
	w.wantBubblewrap(t, final.Facts)
}

// pathWithout makes a PATH directory holding only the tools the helper
// and the test commands need: no bwrap.
func pathWithout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"bash", "sh", "env", "cat", "touch", "sleep"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSandboxRequiredWithoutBackendRefuses(t *testing.T) {
	t.Parallel()
	h := startHelper(t, func(o *client.Options, _ string) {
		for i, kv := range o.Env {
			if strings.HasPrefix(kv, "PATH=") {
				o.Env[i] = "PATH=" + pathWithout(t)
			}
		}
	})
	s := h.open(nil)
	marker := filepath.Join(t.TempDir(), "ran")
	e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "touch " + marker + "; sleep 30", "cwd": h.home,
		"sandbox": map[string]any{"mode": "required"}}, -32003, "refused")
	if !strings.Contains(e.Message, "bwrap") {
		t.Errorf("the refusal does not name the reason: %s", e.Message)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the refused command ran: %v", err)
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 0 {
		t.Errorf("a refused start left an execution: %+v", list.Executions)
	}
	// Best effort runs unconfined and says so.
	o := s.mustStart("touch "+marker, map[string]any{"sandbox": map[string]any{"mode": "best-effort"}})
	if f := o.Facts.Sandbox; f == nil || f.Backend != sandbox.BackendNone || !strings.Contains(f.Reason, "bwrap") {
		t.Errorf("best effort without a backend: facts.sandbox %+v", f)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the best-effort command did not run: %v", err)
	}
}

func TestSandboxSessionDefaultAndBadPolicies(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	root := t.TempDir()
	outside := t.TempDir()
	id := "sandbox-default"
	h.mustCall("session/open", map[string]any{"sessionId": id, "stateDir": filepath.Join(t.TempDir(), "state"),
		"sandbox": confined(root), "resources": map[string]any{"pids": 64}}, nil)
	s := &session{h: h, id: id}
	o := s.mustStart("touch "+outside+"/x", nil)
	wantBubblewrap(t, o.Facts)
	if !hasDenial(o.Facts, filepath.Join(outside, "x"), "write") {
		t.Errorf("the session default did not confine: %+v, output %q", o.Facts.SandboxDenials, o.Output)
	}
	if o.Facts.Resources == nil || o.Facts.Resources.Pids != 64 {
		t.Errorf("the session's resources default: %+v", o.Facts.Resources)
	}
	// A start's own mode wins over the default.
	o = s.mustStart("touch "+outside+"/y", map[string]any{"sandbox": map[string]any{"mode": "off"}})
	if o.Facts.Sandbox == nil || o.Facts.Sandbox.Backend != sandbox.BackendNone || o.Facts.Outcome != execution.Success {
		t.Errorf("mode off over the default: %+v %s", o.Facts.Sandbox, o.Output)
	}
	for _, bad := range []map[string]any{
		{"mode": "strict"},
		{"network": "some"},
		{"writableRoots": []string{"relative/dir"}},
		{"writableRoots": []string{filepath.Join(root, "missing")}},
	} {
		h.wantError("exec/start", map[string]any{"sessionId": id, "command": "true", "sandbox": bad}, -32602, "invalid-params")
	}
	h.wantError("exec/start", map[string]any{"sessionId": id, "command": "true", "resources": map[string]any{"pids": -1}}, -32602, "invalid-params")
	h.wantError("session/open", map[string]any{"sessionId": "bad", "stateDir": filepath.Join(t.TempDir(), "s"), "sandbox": map[string]any{"mode": "x"}}, -32602, "invalid-params")
}

func TestSandboxKeepsTerminalInputAndInterrupt(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	work := t.TempDir()
	// A terminal: typed input reaches the confined command.
	o := s.mustStart("test -t 0 && echo on-a-tty; read -r line; echo got $line",
		map[string]any{"cwd": work, "sandbox": confined(work), "tty": true, "yieldMs": 100})
	if o.Final {
		t.Fatalf("did not wait for input: %+v", o)
	}
	s.observeUntil(o, "on-a-tty")
	id := o.Facts.ExecutionID
	// The answer may already come in the reply to the input.
	typed, err := s.observe(id, map[string]any{"chars": "hello\n"})
	if err != nil {
		t.Fatal(err)
	}
	out, final := s.waitFinal(id, nil)
	out = typed.Output + out
	if !strings.Contains(out, "got hello") || final.Facts.Outcome != execution.Success {
		t.Errorf("terminal input inside the sandbox: %q, %s", out, final.Facts.Outcome)
	}
	// Pipe stdin.
	o = s.mustStart("cat", map[string]any{"cwd": work, "sandbox": confined(work), "stdin": "piped\n"})
	if o.Output != "piped\n" {
		t.Errorf("stdin inside the sandbox: %q", o.Output)
	}
	// Interrupt reaches the confined command's group.
	o = s.mustStart("trap 'echo interrupted; exit 7' INT; echo armed; while :; do sleep 0.05; done",
		map[string]any{"cwd": work, "sandbox": confined(work), "yieldMs": 100})
	s.observeUntil(o, "armed")
	h.mustCall("exec/interrupt", map[string]any{"sessionId": s.id, "executionId": o.Facts.ExecutionID}, nil)
	out, final = s.waitFinal(o.Facts.ExecutionID, nil)
	if !strings.Contains(out, "interrupted") || final.Facts.ExitCode == nil || *final.Facts.ExitCode != 7 {
		t.Errorf("interrupt inside the sandbox: %q, exit %v", out, final.Facts.ExitCode)
	}
}

func TestSandboxOnAMonitor(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	work, outside := t.TempDir(), t.TempDir()
	var info execution.MonitorInfo
	h.mustCall("monitor/start", map[string]any{"sessionId": s.id, "command": "touch " + outside + "/m; echo done=$?", "cwd": work,
		"sandbox": confined(work)}, &info)
	_, final := s.waitFinal(info.ExecutionID, nil)
	wantBubblewrap(t, final.Facts)
	if _, err := os.Stat(filepath.Join(outside, "m")); !os.IsNotExist(err) {
		t.Errorf("the monitor's command wrote outside its roots: %v", err)
	}
}

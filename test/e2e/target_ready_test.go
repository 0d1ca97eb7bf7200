package e2e

// A target's readiness and its description at session/open: what it
// lacks (a missing bash refuses every start there; a missing bwrap or
// rg is reported), its incarnation, recorded in the state directory and
// a replacement reported once, and a target that cannot be reached
// described rather than failing the open.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

// openTarget opens session id on dir with target and returns its answer.
func openTarget(h *helper, id, dir, target string) execution.SessionInfo {
	h.t.Helper()
	var info execution.SessionInfo
	h.mustCall("session/open", map[string]any{"sessionId": id, "stateDir": dir, "target": target}, &info)
	if info.Target == nil {
		h.t.Fatalf("session/open of %q describes no target: %+v", target, info)
	}
	return info
}

// lackedHere are the probed programs this machine lacks, as a host
// agent or the wrapper would look for them here.
func lackedHere(t *testing.T) []string {
	var lacks []string
	for _, p := range remote.ProbedPrograms {
		if _, err := exec.LookPath(p); err != nil {
			lacks = append(lacks, p)
		}
	}
	return lacks
}

// An SSH host, named as session/open's target, is described: its name
// as the facts say it, method, tier, mode, boot and host name, and the
// programs it lacks.
func TestSessionOpenDescribesSSHTarget(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, func(t *testing.T) {
		srv, _ := rebootable(t)
		if strings.Contains(t.Name(), "/"+hopMode) {
			jump := sshd.Start(t)
			if err := jump.Admit(srv); err != nil {
				t.Fatal(err)
			}
			jumps.Store(srv, jump)
			t.Cleanup(func() { jumps.Delete(srv) })
		}
		h := remoteHelperOn(t, srv)
		ti := openTarget(h, "s", filepath.Join(t.TempDir(), "state"), tramp(srv, "")).Target
		host, _ := os.Hostname()
		mode := modeOf(t)
		if ti.Name != targetOf(srv) || ti.TargetMethod != "ssh" || ti.SupportTier != remote.TierSupported || ti.RemoteMode != mode ||
			ti.Error != "" || ti.Replaced != nil || len(ti.Missing) != 0 {
			t.Fatalf("target %+v", ti)
		}
		if in := ti.Incarnation; in == nil || in.BootID != bootBefore || in.Hostname != host {
			t.Fatalf("incarnation %+v, want boot %s on %s", in, bootBefore, host)
		}
		if want := lackedHere(t); !slices.Equal(ti.Lacks, want) && !(len(want) == 0 && len(ti.Lacks) == 0) {
			t.Fatalf("lacks %v, want %v", ti.Lacks, want)
		}
	})
}

// This machine is the target of a session opened without one: its boot
// (the helper's test hook) and name, and what it lacks.
func TestSessionOpenDescribesLocalTarget(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(file, []byte(bootBefore+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, withEnv(agent.BootIDFileVar+"="+file))
	dir := filepath.Join(t.TempDir(), "state")
	var info execution.SessionInfo
	h.mustCall("session/open", map[string]any{"sessionId": "a", "stateDir": dir}, &info)
	host, _ := os.Hostname()
	ti := info.Target
	if ti == nil || ti.Name != "local" || ti.SupportTier != remote.TierSupported || ti.Incarnation == nil ||
		ti.Incarnation.BootID != bootBefore || ti.Incarnation.Hostname != host || ti.Replaced != nil {
		t.Fatalf("target %+v", ti)
	}
	if want := lackedHere(t); !slices.Equal(ti.Lacks, want) && !(len(want) == 0 && len(ti.Lacks) == 0) {
		t.Fatalf("lacks %v, want %v", ti.Lacks, want)
	}
	// A local path names this machine too.
	h.mustCall("session/close", map[string]any{"sessionId": "a"}, nil)
	if ti := openTarget(h, "a", dir, t.TempDir()).Target; ti.Name != "local" || ti.Replaced != nil {
		t.Fatalf("target of a local path %+v", ti)
	}
}

// The state directory records the target's incarnation: the first open
// after the host came back in another boot, with nothing live there,
// reports it once as replaced (the previous boot named); the open after
// does not. Through the agent and the wrapper (whose probe reads the
// boot itself).
func TestSessionOpenReportsReplacedTargetOnce(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T) {
		srv, reboot := rebootable(t)
		dir := filepath.Join(t.TempDir(), "state")
		target := tramp(srv, "")
		h1 := remoteHelperOn(t, srv)
		if ti := openTarget(h1, "s", dir, target).Target; ti.Incarnation == nil || ti.Incarnation.BootID != bootBefore || ti.Replaced != nil {
			t.Fatalf("first open: %+v", ti)
		}
		h1.mustCall("session/close", map[string]any{"sessionId": "s"}, nil)
		// The same boot again: nothing to report.
		if ti := openTarget(h1, "s", dir, target).Target; ti.Replaced != nil {
			t.Fatalf("reopened in the same boot: %+v", ti)
		}
		h1.mustCall("session/close", map[string]any{"sessionId": "s"}, nil)
		h1.stop()

		reboot()
		h2 := remoteHelperOn(t, srv)
		info := openTarget(h2, "s", dir, target)
		ti := info.Target
		if len(info.Recovered) != 0 || ti.Incarnation == nil || ti.Incarnation.BootID != bootAfter ||
			ti.Replaced == nil || ti.Replaced.Previous.BootID != bootBefore || ti.Error != "" {
			t.Fatalf("open after the reboot: %+v (replaced %+v)", ti, ti.Replaced)
		}
		if fi, err := os.Stat(filepath.Join(dir, "target.json")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the record: %v %v", fi, err)
		}
		h2.mustCall("session/close", map[string]any{"sessionId": "s"}, nil)
		if ti := openTarget(h2, "s", dir, target).Target; ti.Replaced != nil || ti.Incarnation.BootID != bootAfter {
			t.Fatalf("the open after the report reports again: %+v", ti)
		}
	})
}

// An execution that was live in the replaced boot is settled by
// recovery as target-replaced; the open does not report the replacement
// a second time.
func TestSessionOpenReplacementSettledByRecoveryNotReportedTwice(t *testing.T) {
	t.Parallel()
	srv, reboot := rebootable(t)
	dir := filepath.Join(t.TempDir(), "state")
	target := tramp(srv, "")
	h1 := remoteHelperOn(t, srv)
	openTarget(h1, "first", dir, target)
	s1 := &session{h: h1, id: "first", stateDir: dir}
	f := sleeper(t, s1, tramp(srv, t.TempDir()))
	s1.checkpoint()
	h1.kill()
	reboot()

	h2 := remoteHelperOn(t, srv)
	info := openTarget(h2, "second", dir, target)
	if len(info.Recovered) != 1 || info.Recovered[0].ExecutionID != f.ExecutionID || info.Recovered[0].Reason != execution.ReasonTargetReplaced {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	if ti := info.Target; ti.Replaced != nil || ti.Incarnation == nil || ti.Incarnation.BootID != bootAfter {
		t.Fatalf("target %+v: the replacement is reported twice", ti)
	}
	h2.mustCall("session/close", map[string]any{"sessionId": "second"}, nil)
	if ti := openTarget(h2, "second", dir, target).Target; ti.Replaced != nil {
		t.Fatalf("reported later: %+v", ti)
	}
}

// A replacement seen while the session was open (a command there
// settled lost as target-replaced) is not reported by the next open.
func TestSessionOpenLiveReplacementNotReportedAgain(t *testing.T) {
	t.Parallel()
	srv, reboot := rebootable(t)
	dir := filepath.Join(t.TempDir(), "state")
	target := tramp(srv, "")
	h := remoteHelperOn(t, srv)
	openTarget(h, "s", dir, target)
	s := &session{h: h, id: "s", stateDir: dir}
	f := sleeper(t, s, tramp(srv, t.TempDir()))
	reboot()
	if srv.KillConnections() == 0 {
		t.Fatal("no connection to cut")
	}
	d := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == f.ExecutionID })
	if d.Observation == nil || d.Observation.Facts.Reason != execution.ReasonTargetReplaced {
		t.Fatalf("delivery %+v", d)
	}
	h.mustCall("session/close", map[string]any{"sessionId": "s"}, nil)
	h.stop()
	h2 := remoteHelperOn(t, srv)
	if ti := openTarget(h2, "s", dir, target).Target; ti.Replaced != nil || ti.Incarnation == nil || ti.Incarnation.BootID != bootAfter {
		t.Fatalf("reported again at the next open: %+v", ti)
	}
}

// A target that cannot be reached is described with the reason, and the
// open succeeds: nothing listens; a host that accepts and never answers
// (bounded by the dial's timeout); a container that does not exist. A
// name of no method the helper knows is bad input.
func TestSessionOpenUnreachableTargetDescribed(t *testing.T) {
	t.Parallel()
	h, srv := remoteHelper(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	for i, c := range []struct{ target, says string }{
		{trampAt(srv, closed, ""), strconv.Itoa(closed)},
		{trampAt(srv, silent.Addr().(*net.TCPAddr).Port, ""), strconv.Itoa(silent.Addr().(*net.TCPAddr).Port)},
		{"/podman:mvx-e2e-no-such-box:/", "mvx-e2e-no-such-box"},
	} {
		begun := time.Now()
		ti := openTarget(h, fmt.Sprint("u", i), filepath.Join(t.TempDir(), "state"), c.target).Target
		if ti.Error == "" || !strings.Contains(ti.Error, c.says) || ti.Incarnation != nil {
			t.Errorf("%s: target %+v", c.target, ti)
		}
		t.Logf("%s: described in %v: %s", c.target, time.Since(begun).Round(time.Millisecond), ti.Error)
	}
	e := h.wantError("session/open", map[string]any{"sessionId": "bad", "stateDir": filepath.Join(t.TempDir(), "state"),
		"target": "/nosuch:host:/"}, -32602, "invalid-params")
	if !strings.Contains(e.Message, "nosuch") {
		t.Errorf("the refusal does not name the method: %s", e.Message)
	}
}

// containerWithout is a root file system like the shared one, built apart
// and then changed by edit (programs removed), and a container on it.
func containerWithout(t *testing.T, edit func(rootfs string) error) string {
	t.Helper()
	containerSetup(t)
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := testsupport.BuildRootfs(rootfs, helperBin); err != nil {
		t.Fatal(err)
	}
	if err := edit(rootfs); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Dir(rootfs), 0o755)
	name := fmt.Sprintf("mvx-e2e-%d-%d", os.Getpid(), containers.n.Add(1))
	containers.mu.Lock()
	containers.made = append(containers.made, name)
	containers.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testsupport.RunContainer(ctx, name, rootfs, containers.work); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testsupport.RemoveContainer(name) })
	return name
}

// A container without bash (its /bin/sh is dash): the agent deploys and
// runs, but no command can, so every start there is refused with the
// missing program named, and the open describes it as missing.
func TestTargetWithoutBashRefused(t *testing.T) {
	t.Parallel()
	name := containerWithout(t, func(rootfs string) error {
		bin := filepath.Join(rootfs, "usr", "bin")
		if err := os.Remove(filepath.Join(bin, "bash")); err != nil {
			return err
		}
		b, err := os.ReadFile("/usr/bin/dash")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(bin, "dash"), b, 0o755); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(bin, "sh"))
		return os.Symlink("dash", filepath.Join(bin, "sh"))
	})
	h := startHelper(t)
	s := h.open(nil)
	marker := filepath.Join(workDir(t), "ran")
	for range 2 { // the first start probes, the second finds the probe
		e := h.wantError("exec/start", map[string]any{"sessionId": s.id, "command": "echo x > " + inWork(marker),
			"cwd": "/podman:" + name + ":/work"}, -32005, "unavailable")
		if !strings.Contains(e.Message, "lacks bash") || !strings.Contains(e.Message, name) {
			t.Fatalf("the refusal does not name what is missing where: %s", e.Message)
		}
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id, "as": "user"}, &list)
	if _, err := os.Stat(marker); !os.IsNotExist(err) || len(list.Executions) != 0 {
		t.Fatalf("a refused start ran or was registered: %v %+v", err, list.Executions)
	}
	ti := openTarget(h, "d", filepath.Join(t.TempDir(), "state"), "/podman:"+name+":/work").Target
	if !slices.Equal(ti.Missing, []string{"bash"}) || !slices.Contains(ti.Lacks, "bash") || ti.RemoteMode != remote.ModeAgent || ti.Error != "" {
		t.Fatalf("target %+v", ti)
	}
}

// A container without setsid, bwrap or rg: the host agent needs none of
// them, so commands run; the open reports them lacking, with the
// container's incarnation, and a best-effort sandbox falls back with
// the reason in the facts.
func TestTargetLackingOptionalProgramsReported(t *testing.T) {
	t.Parallel()
	name := containerWithout(t, func(rootfs string) error {
		return os.Remove(filepath.Join(rootfs, "usr", "bin", "setsid"))
	})
	h := startHelper(t)
	ti := openTarget(h, "o", filepath.Join(t.TempDir(), "state"), "/podman:"+name+":/work").Target
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	out, err := testsupport.Podman(ctx, "inspect", "--format", "{{.Id}}", name)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Name != "podman:"+name || ti.TargetMethod != "podman" || ti.RemoteMode != remote.ModeAgent || len(ti.Missing) != 0 ||
		!slices.Equal(ti.Lacks, []string{"setsid", "bwrap", "rg"}) || ti.Incarnation == nil || ti.Incarnation.ContainerID != strings.TrimSpace(out) {
		t.Fatalf("target %+v (incarnation %+v)", ti, ti.Incarnation)
	}
	s := &session{h: h, id: "o"}
	o := s.mustStart("echo ran", map[string]any{"cwd": "/podman:" + name + ":/work", "sandbox": map[string]any{"mode": "best-effort"}})
	if o.Output != "ran\n" || o.Facts.Sandbox == nil || o.Facts.Sandbox.Backend != sandbox.BackendNone || !strings.Contains(o.Facts.Sandbox.Reason, "bwrap") {
		t.Fatalf("%q %+v", o.Output, o.Facts.Sandbox)
	}
}

package e2e

// A host's incarnation: the boot its host agent runs in. The fixture's
// host is this machine, so a reboot is played by the agent's test hook,
// a boot id file the test rewrites (agent.BootIDFileVar).

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote/agent"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

const (
	bootBefore = "0b00a11e-0000-4000-8000-000000000001"
	bootAfter  = "0b00a11e-0000-4000-8000-000000000002"
)

// rebootable starts a host whose agents read their boot id from a file
// of the test, set to bootBefore; reboot rewrites it.
func rebootable(t *testing.T) (srv *sshd.Server, reboot func()) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "boot_id")
	write := func(id string) {
		if err := os.WriteFile(file, []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(bootBefore)
	return sshd.StartEnv(t, agent.BootIDFileVar+"="+file), func() { write(bootAfter) }
}

// sleeper starts a command that stays until killed and returns its
// facts once it runs; the test kills what is left of it at the end (a
// replaced host's commands are never signalled by the helper).
func sleeper(t *testing.T, s *session, cwd string) execution.Facts {
	t.Helper()
	o := s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0, "label": "long"})
	s.observeUntil(o, "started")
	f := s.h.waitState(o.Facts.ExecutionID, execution.Running)
	t.Cleanup(func() { _ = syscall.Kill(f.Pid, syscall.SIGKILL) })
	return f
}

// The facts name the host and boot a command started in. When the
// connection is lost and the host answers again from another boot, the
// execution settles lost at once with reason target-replaced, its owner
// gets the delivery, and nothing is signalled: after a reboot its pid
// may be another process's. (The same boot is found again and the
// command stopped: TestRemoteTransportLossIsUnknown.)
func TestRemoteReplacedHostSettlesLost(t *testing.T) {
	t.Parallel()
	srv, reboot := rebootable(t)
	h := remoteHelperOn(t, srv)
	s, _ := openRemote(h)
	cwd := tramp(srv, t.TempDir())
	f := sleeper(t, s, cwd)
	host, _ := os.Hostname()
	if in := f.TargetIncarnation; in == nil || in.BootID != bootBefore || in.Hostname != host {
		t.Fatalf("targetIncarnation %+v, want boot %s on %s", in, bootBefore, host)
	}
	reboot()
	if srv.KillConnections() == 0 {
		t.Fatal("no connection to cut")
	}
	d := h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == f.ExecutionID })
	if d.Observation == nil {
		t.Fatalf("delivery without an observation: %+v", d)
	}
	if g := d.Observation.Facts; g.Termination != execution.Lost || g.Status != execution.StatusLost ||
		g.Reason != execution.ReasonTargetReplaced || g.ExitCode != nil || g.Signal != "" {
		t.Fatalf("after the host came back in another boot: %+v", g)
	}
	// A replaced host is not an unknown outcome: commands that change
	// something still run, in the new boot.
	o := s.mustStart("echo again", map[string]any{"cwd": cwd})
	if in := o.Facts.TargetIncarnation; o.Output != "again\n" || in == nil || in.BootID != bootAfter {
		t.Fatalf("after the replacement: %q %+v", o.Output, in)
	}
	// Checked after that round trip, so a signal sent on the heels of
	// the delivery would have come by now.
	if !testsupport.Alive(f.Pid) {
		t.Fatalf("the command %d of the earlier boot was signalled", f.Pid)
	}
}

// Recovery after a helper's crash makes the same check: a run whose host
// is now in another boot is lost with reason target-replaced, and its
// pids are left alone.
func TestRemoteRecoveryOnReplacedHost(t *testing.T) {
	t.Parallel()
	srv, reboot := rebootable(t)
	h1 := remoteHelperOn(t, srv)
	dir := filepath.Join(t.TempDir(), "state")
	art := filepath.Join(t.TempDir(), "artifacts")
	h1.mustCall("session/open", map[string]any{"sessionId": "first", "stateDir": dir, "remoteArtifactDir": art}, nil)
	s1 := &session{h: h1, id: "first", stateDir: dir}
	f := sleeper(t, s1, tramp(srv, t.TempDir()))
	s1.checkpoint()
	h1.kill()
	reboot()

	h2 := remoteHelperOn(t, srv)
	var info execution.SessionInfo
	h2.mustCall("session/open", map[string]any{"sessionId": "second", "stateDir": dir, "remoteArtifactDir": art}, &info)
	if len(info.Recovered) != 1 {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	if r := info.Recovered[0]; r.ExecutionID != f.ExecutionID || r.Termination != execution.Lost || r.Reason != execution.ReasonTargetReplaced {
		t.Fatalf("recovered %+v", r)
	}
	if !testsupport.Alive(f.Pid) {
		t.Fatalf("the command %d of the earlier boot was signalled", f.Pid)
	}
}

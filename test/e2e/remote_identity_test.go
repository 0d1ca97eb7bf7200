package e2e

// Remote executions whose identity or transport goes wrong: pid reuse on
// the host, a cut connection.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// labelled extracts "NAME N" lines from output.
func labelled(out string) map[string]int {
	m := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			if n, err := strconv.Atoi(v); err == nil {
				m[k] = n
			}
		}
	}
	return m
}

// takePid starts `sleep 1000` with pid, by setting the last pid the
// kernel handed out (ns_last_pid, which needs CAP_SYS_ADMIN: the fixture
// runs as root). Other processes may take the pid first: try again, once
// one that holds it (the parallel tests start many) has ended.
func takePid(t *testing.T, pid int) *exec.Cmd {
	t.Helper()
	for attempt := 0; attempt < 1000; attempt++ {
		if !testsupport.WaitGone(pid, waitBound) {
			t.Fatalf("pid %d stays another process's", pid)
		}
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatalf("setting ns_last_pid: %v", err)
		}
		cmd := exec.Command("/bin/sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
			return cmd
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Fatalf("could not start a process with pid %d", pid)
	return nil
}

// When the leader's pid is someone else's (its start time changed), the
// group is never signalled again: not the impostor, and not what is left
// of the execution either, even at the end of the grace.
func TestRemoteAmbiguousIdentityNeverSignalled(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteAmbiguousIdentityNeverSignalled)
}

func testRemoteAmbiguousIdentityNeverSignalled(t *testing.T) {
	h, srv := remoteHelper(t)
	s := openWith(h, map[string]any{"limits": map[string]any{"graceMs": 60000}, "remoteArtifactDir": t.TempDir()})
	script := filepath.Join(t.TempDir(), "survivor.sh")
	// A tagged survivor that ignores TERM (from birth: an ignored signal
	// is inherited) keeps the execution alive after the leader's exit; the
	// helper then waits out the grace before KILL. It leaves the leader's
	// group and session: a pid still naming a group or session is never
	// handed out again.
	//
	// The leader waits for a gate, so the start yields: a leader already
	// gone when the yield timer fires makes the reply the completion,
	// after the whole grace.
	gate := filepath.Join(t.TempDir(), "gate")
	body := "trap '' TERM\nsetsid sleep 1000 >/dev/null 2>&1 &\necho \"survivor $!\"\necho \"leader $$\"\n" +
		"until [ -e " + gate + " ]; do sleep 0.01; done\n"
	if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o := s.mustStart("bash "+script, map[string]any{"cwd": tramp(srv, t.TempDir()), "yieldMs": 0})
	if o.Final {
		t.Fatalf("the start did not yield: %+v", o)
	}
	out := s.observeUntil(o, "leader")
	pids := labelled(out)
	survivor, leader := pids["survivor"], pids["leader"]
	if survivor == 0 || leader == 0 {
		t.Fatalf("no pids in %q", out)
	}
	t.Cleanup(func() { syscall.Kill(survivor, syscall.SIGKILL) })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The leader is gone (reaped by sshd) while the execution, still
	// stopping its survivor, probes the group.
	if !testsupport.WaitGone(leader, waitBound) {
		t.Fatalf("leader %d still in /proc", leader)
	}
	if f := s.mustObserve(o.Facts.ExecutionID, nil).Facts; f.State == execution.Settled {
		t.Fatalf("settled before the pid was reused: %+v", f)
	}
	impostor := takePid(t, leader)
	_, final := s.waitFinal(o.Facts.ExecutionID, nil)
	if f := final.Facts; f.Termination != execution.Exited || f.ExitCode == nil || *f.ExitCode != 0 {
		t.Fatalf("final: %+v", f)
	}
	if !testsupport.Alive(impostor.Process.Pid) {
		t.Fatal("the process that took the leader's pid was signalled")
	}
	if !testsupport.Alive(survivor) {
		t.Fatal("the group was signalled after its identity became ambiguous")
	}
}

// A transport cut during a run leaves the end unproven: termination
// unknown, never completed. The command, orphaned on the host, is found
// again over a new connection and stopped.
func TestRemoteTransportLossIsUnknown(t *testing.T) {
	t.Parallel()
	inModesAndHop(t, testRemoteTransportLossIsUnknown)
}

func testRemoteTransportLossIsUnknown(t *testing.T) {
	h, srv := remoteHelper(t)
	s, _ := openRemote(h)
	cwd := tramp(srv, t.TempDir())
	o := s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	s.observeUntil(o, "started")
	leader := s.mustObserve(o.Facts.ExecutionID, nil).Facts.Pid
	if srv.KillConnections() == 0 {
		t.Fatal("no connection to cut")
	}
	_, final := s.waitFinal(o.Facts.ExecutionID, nil)
	f := final.Facts
	if f.Termination != execution.Unknown || f.Outcome != execution.Failure || f.Status != execution.StatusFailed ||
		f.ExitCode != nil || f.Signal != "" || !strings.Contains(f.Reason, "lost") {
		t.Fatalf("transport loss: %+v", f)
	}
	if !testsupport.WaitGone(leader, 5*time.Second) {
		t.Fatalf("the orphaned command %d still runs on the host", leader)
	}

	// The person has looked (the unknown outcome gates what may change
	// something until then).
	h.mustCall("session/acknowledgeUnknown", map[string]any{"sessionId": s.id}, nil)

	// During a stop: the group ignores TERM, the transport goes while the
	// helper waits out the grace, and KILL goes over a new connection.
	o = s.mustStart("trap '' TERM; echo ready; while :; do sleep 0.05; done", map[string]any{"cwd": cwd, "yieldMs": 0})
	s.observeUntil(o, "ready")
	id := o.Facts.ExecutionID
	stopped := make(chan obs, 1)
	go func() {
		var o obs
		if err := h.call("exec/stop", map[string]any{"sessionId": s.id, "executionId": id}, &o); err != nil {
			t.Error(err)
		}
		stopped <- o
	}()
	leader = h.waitState(id, execution.Stopping).Pid
	if srv.KillConnections() == 0 {
		t.Fatal("no connection to cut")
	}
	final = <-stopped
	if f := final.Facts; !final.Final || f.Termination != execution.Unknown || f.ExitCode != nil || f.Signal != "" {
		t.Fatalf("transport loss during a stop: %+v", final)
	}
	if !testsupport.WaitGone(leader, 5*time.Second) {
		t.Fatalf("the stopped command %d still runs on the host", leader)
	}
}

package e2e

// /kubernetes: targets. No cluster runs here: the helper's kubectl is
// testdata/kubectl-stream-adapter, a kubectl-shaped adapter onto the
// Podman containers of target_podman_test.go FOR THE STREAM ONLY (a
// "pod" is the container of its name, its uid the container's id). What
// these tests prove is the transport over kubectl exec's byte stream and
// kubectl get's answers as the helper reads them, never a cluster's
// behaviour (docs/architecture.md lists what a real pod needs besides).

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote"
)

// kubectlStreamAdapter is the adapter's absolute path, for the helper.
func kubectlStreamAdapter(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "kubectl-stream-adapter"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeHelper is a helper whose kubectl is the stream adapter.
func kubeHelper(t *testing.T) *helper {
	t.Helper()
	return startHelper(t, withEnv(execution.KubectlVar+"="+kubectlStreamAdapter(t)))
}

// kubePlace is a session of h for the "pod" that is the container name,
// as host (POD or CONTAINER.POD) names it.
func kubePlace(t *testing.T, h *helper, name, host string) targetPlace {
	t.Helper()
	return targetPlace{h: h, s: h.open(nil), target: "kubernetes:" + host, method: "kubernetes",
		dir: func(t *testing.T) (string, string) {
			d := workDir(t)
			return d, "/kubernetes:" + host + ":" + inWork(d)
		},
		inside: inWork, alive: containerAlive(name),
		kill: func(t *testing.T, pid int) {
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			if _, err := testsupport.Podman(ctx, "exec", name, "bash", "-c", fmt.Sprintf("kill -KILL %d", pid)); err != nil {
				t.Fatal(err)
			}
		}}
}

// containerLabel names a pod's one container for the adapter.
const containerLabel = "io.kubernetes.container.name=app"

// The core remote checks in a pod, through kubectl exec's stream.
func TestKubernetesTargetCoreThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	targetCore(t, func(t *testing.T) targetPlace {
		return kubePlace(t, kubeHelper(t), containers.shared, containers.shared)
	})
}

// A container of a pod (CONTAINER.POD) runs there, kubectl exec -c;
// the facts say the method, the experimental tier and the pod's uid
// and start time as the incarnation.
func TestKubernetesTargetFactsThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	name := newContainer(t, "--label", containerLabel)
	p := kubePlace(t, kubeHelper(t), name, "app."+name)
	_, cwd := p.dir(t)
	o := p.s.mustStart("echo in-pod; id -u", map[string]any{"cwd": cwd})
	f := o.Facts
	if o.Output != "in-pod\n0\n" || f.Target != "kubernetes:app."+name || f.TargetMethod != "kubernetes" ||
		f.SupportTier != remote.TierExperimental || f.RemoteMode != remote.ModeAgent {
		t.Fatalf("%q %+v", o.Output, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	out, err := testsupport.Podman(ctx, "inspect", "--format", "{{.Id}}|{{.State.StartedAt}}", name)
	if err != nil {
		t.Fatal(err)
	}
	uid, started, _ := strings.Cut(strings.TrimSpace(out), "|")
	if in := f.TargetIncarnation; in == nil || in.PodUID != uid || in.StartedAt != started || in.ContainerID != "" || in.BootID == "" {
		t.Fatalf("targetIncarnation %+v, want pod uid %s started %s", in, uid, started)
	}
	// A container the pod does not have is named, with those it has.
	p.h.wantError("exec/start", map[string]any{"sessionId": p.s.id, "command": "echo never", "cwd": "/kubernetes:main." + name + ":/"},
		-32005, "unavailable")
}

// The pod made again under its name (rescheduled: another uid) while a
// command runs in it, and already there when the helper asks kubectl
// which pod runs: the execution settles lost with reason
// target-replaced by the uid, its owner gets one delivery, and the new
// pod runs the next command.
func TestKubernetesPodReplacedSettlesLostThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	name := newContainer(t)
	prog, hold, waiting, gate := gatedProgram(t, "kubectl", "get", kubectlStreamAdapter(t))
	p := kubePlace(t, startHelper(t, withEnv(execution.KubectlVar+"="+prog)), name, name)
	_, cwd := p.dir(t)
	o := p.s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	p.s.observeUntil(o, "started")
	f := p.h.waitState(o.Facts.ExecutionID, execution.Running)
	if in := f.TargetIncarnation; in == nil || in.PodUID == "" || in.ContainerID != "" {
		t.Fatalf("targetIncarnation %+v", in)
	}
	replaceHeldAtGate(t, p, name, f.ExecutionID, hold, waiting, gate)
	o = p.s.mustStart("echo again", map[string]any{"cwd": cwd})
	if in := o.Facts.TargetIncarnation; o.Output != "again\n" || in == nil || in.PodUID == f.TargetIncarnation.PodUID {
		t.Fatalf("after the replacement: %q %+v", o.Output, in)
	}
	if n := len(p.h.deliveriesOf(f.ExecutionID)); n != 1 {
		t.Fatalf("%d deliveries of the replaced execution, want 1", n)
	}
}

// A pod that does not exist or is not running, a container it does not
// have, and malformed names are refused at once, named, with nothing
// left running.
func TestKubernetesBadTargetsThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	stopped := newContainer(t, "--label", containerLabel)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testsupport.Podman(ctx, "stop", "-t", "0", stopped); err != nil {
		t.Fatal(err)
	}
	containerSetup(t)
	h := kubeHelper(t)
	s := h.open(nil)
	for _, tc := range []struct {
		cwd  string
		code int64
		want string
	}{
		{"/kubernetes:mvx-no-such-pod:/", -32005, `there is no pod "mvx-no-such-pod" in kubectl's current namespace`},
		{"/kubernetes:app.mvx-no-such-pod:/", -32005, `there is no pod "mvx-no-such-pod"`},
		{"/kubernetes:app." + stopped + ":/", -32005, fmt.Sprintf("pod %q is not running (Succeeded)", stopped)},
		{"/kubernetes:sidecar." + containers.shared + ":/", -32005, fmt.Sprintf("pod %q has no container %q (it has main)", containers.shared, "sidecar")},
		{"/kubernetes::/", -32602, "empty pod name"},
		{"/kubernetes:app.:/", -32602, "empty pod name"},
		{"/kubernetes:-pod:/", -32602, `malformed pod name "-pod"`},
		{"/kubernetes:a.b.pod:/", -32602, `malformed container name "a.b"`},
		{"/kubernetes:root@pod:/", -32602, `a user ("root") has no meaning for method "kubernetes"`},
		{"/kubernetes:pod#1:/", -32602, `a port has no meaning for method "kubernetes"`},
		{"/ssh:a|kubernetes:pod:/", -32602, `hop 2 of "/ssh:a|kubernetes:pod:/" uses method "kubernetes"`},
	} {
		start := time.Now()
		err := h.call("exec/start", map[string]any{"sessionId": s.id, "command": "echo never", "cwd": tc.cwd}, nil)
		e, ok := rpcError(err)
		if !ok || e.Code != tc.code || !strings.Contains(e.Message, tc.want) {
			t.Fatalf("%s: %v, want %d naming %q", tc.cwd, err, tc.code, tc.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: answered after %v", tc.cwd, d)
		}
	}
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 0 {
		t.Fatalf("registered: %+v", list.Executions)
	}
	wantNoChildren(t, h)
}

// Recovery after a helper's crash finds its pod made again under its
// name (another uid): the run is lost with reason target-replaced.
func TestKubernetesRecoveryOnReplacedPodThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	name := newContainer(t)
	p := kubePlace(t, kubeHelper(t), name, name)
	_, cwd := p.dir(t)
	dir := filepath.Join(t.TempDir(), "state")
	p.h.mustCall("session/open", map[string]any{"sessionId": "first", "stateDir": dir}, nil)
	s1 := &session{h: p.h, id: "first", stateDir: dir}
	o := s1.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	s1.observeUntil(o, "started")
	f := p.h.waitState(o.Facts.ExecutionID, execution.Running)
	s1.checkpoint()
	p.h.kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testsupport.Podman(ctx, "rm", "-f", "-t", "0", name); err != nil {
		t.Fatal(err)
	}
	if err := testsupport.RunContainer(ctx, name, containers.rootfs, containers.work); err != nil {
		t.Fatal(err)
	}
	h2 := kubeHelper(t)
	var info execution.SessionInfo
	h2.mustCall("session/open", map[string]any{"sessionId": "second", "stateDir": dir}, &info)
	if len(info.Recovered) != 1 {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	if r := info.Recovered[0]; r.ExecutionID != f.ExecutionID || r.Termination != execution.Lost || r.Reason != execution.ReasonTargetReplaced {
		t.Fatalf("recovered %+v", r)
	}
}

// A port of a pod with a network of its own (loopback only, unreachable
// from here) is forwarded through its host agent's stream over kubectl
// exec (not kubectl port-forward): the server answers from the pod's
// network namespace, and bytes go there and back.
func TestKubernetesPortForwardedThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	name := newContainer(t, "--network", "none", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro")
	p := kubePlace(t, kubeHelper(t), name, name)
	local, cwd := p.dir(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := testsupport.BuildPortServer(ctx, filepath.Join(local, "portserver")); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	o := p.s.mustStart(fmt.Sprintf("exec %s %d", p.inside(filepath.Join(local, "portserver")), port),
		map[string]any{"cwd": cwd, "readyPort": port, "yieldMs": 60000})
	if o.Final || !o.Facts.Ready || !listensOn(o.Facts, port) {
		t.Fatalf("start %q %+v", o.Output, o.Facts)
	}
	var fw struct{ LocalAddress string }
	p.h.mustCall("exec/forward", map[string]any{"sessionId": p.s.id, "executionId": o.Facts.ExecutionID, "port": port}, &fw)
	c, err := net.Dial("tcp", fw.LocalAddress)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitBound))
	payload := strings.Repeat("through the pod's stream\n", 4096)
	go func() {
		_, _ = c.Write([]byte(payload))
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	here, _ := os.Readlink("/proc/self/ns/net")
	greeting, rest, _ := strings.Cut(string(got), "\n")
	if !strings.HasPrefix(greeting, "netns net:") || greeting == "netns "+here || rest != payload {
		t.Fatalf("greeting %q (this machine's network %q), %d bytes echoed of %d", greeting, here, len(rest), len(payload))
	}
	p.h.mustCall("exec/stop", map[string]any{"sessionId": p.s.id, "executionId": o.Facts.ExecutionID}, nil)
}

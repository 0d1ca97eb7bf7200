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

// kubePlace is a fresh helper and session for the "pod" that is the
// container name, as host (POD or CONTAINER.POD) names it.
func kubePlace(t *testing.T, name, host string) targetPlace {
	t.Helper()
	p := podmanPlace(t, name, "")
	p.h = kubeHelper(t)
	p.s = p.h.open(nil)
	p.target, p.method = "kubernetes:"+host, "kubernetes"
	p.dir = func(t *testing.T) (string, string) {
		d := workDir(t)
		return d, "/kubernetes:" + host + ":" + inWork(d)
	}
	return p
}

// containerLabel names a pod's one container for the adapter.
const containerLabel = "io.kubernetes.container.name=app"

// The core remote checks in a pod, through kubectl exec's stream.
func TestKubernetesTargetCoreThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	targetCore(t, func(t *testing.T) targetPlace { return kubePlace(t, containers.shared, containers.shared) })
}

// A container of a pod (CONTAINER.POD) runs there, kubectl exec -c;
// the facts say the method, the experimental tier and the pod's uid
// and start time as the incarnation.
func TestKubernetesTargetFactsThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	name := newContainer(t, "--label", containerLabel)
	p := kubePlace(t, name, "app."+name)
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
// command runs in it: the execution settles lost with reason
// target-replaced as soon as the stream ends, its owner gets one
// delivery, and the new pod runs the next command.
func TestKubernetesPodReplacedSettlesLostThroughStreamAdapter(t *testing.T) {
	t.Parallel()
	name := newContainer(t)
	p := kubePlace(t, name, name)
	_, cwd := p.dir(t)
	o := p.s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	p.s.observeUntil(o, "started")
	f := p.h.waitState(o.Facts.ExecutionID, execution.Running)
	if in := f.TargetIncarnation; in == nil || in.PodUID == "" {
		t.Fatalf("targetIncarnation %+v", in)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testsupport.Podman(ctx, "rm", "-f", "-t", "0", name); err != nil {
		t.Fatal(err)
	}
	if err := testsupport.RunContainer(ctx, name, containers.rootfs, containers.work); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	d := p.h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == f.ExecutionID })
	if since := time.Since(back); since > 5*time.Second {
		t.Errorf("settled %v after the pod came back", since)
	}
	if d.Observation == nil {
		t.Fatalf("delivery without an observation: %+v", d)
	}
	if g := d.Observation.Facts; g.Termination != execution.Lost || g.Status != execution.StatusLost ||
		g.Reason != execution.ReasonTargetReplaced || g.ExitCode != nil || g.Signal != "" {
		t.Fatalf("after the pod was replaced: %+v", g)
	}
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

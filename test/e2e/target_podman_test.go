package e2e

// /podman: targets against real Podman containers (runc, a root file
// system made of this machine's binaries; testsupport.BuildRootfs). One
// container serves the tests that only run commands in it; a test that
// removes, stops or recreates a container has its own. Every container
// is removed at the end (no grace).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// containers is the state the container tests share: one root file
// system, one directory bind-mounted at /work in every container, and
// the shared container.
var containers struct {
	once   sync.Once
	err    error
	rootfs string
	work   string
	shared string // the shared container's name
	n      atomic.Int64
	mu     sync.Mutex
	made   []string // guarded by mu; names to remove at the end
}

// containerSetup builds the root file system (with the helper's
// libraries, so its build runs there) and starts the shared container.
func containerSetup(t *testing.T) {
	t.Helper()
	containers.once.Do(func() {
		base := filepath.Dir(helperBin)
		containers.rootfs = filepath.Join(base, "rootfs")
		containers.work = filepath.Join(base, "work")
		if containers.err = os.MkdirAll(containers.work, 0o755); containers.err != nil {
			return
		}
		_ = os.Chmod(base, 0o755)
		if containers.err = testsupport.BuildRootfs(containers.rootfs, helperBin); containers.err != nil {
			return
		}
		atEnd(removeContainers)
		removeStaleContainers()
		containers.shared, containers.err = runContainer(context.Background())
	})
	if containers.err != nil {
		t.Fatalf("container setup: %v", containers.err)
	}
}

// runContainer starts a container of a fresh name.
func runContainer(ctx context.Context, extra ...string) (string, error) {
	name := fmt.Sprintf("mvx-e2e-%d-%d", os.Getpid(), containers.n.Add(1))
	containers.mu.Lock()
	containers.made = append(containers.made, name)
	containers.mu.Unlock()
	return name, testsupport.RunContainer(ctx, name, containers.rootfs, containers.work, extra...)
}

// newContainer starts a container of this test's own, removed at its end.
func newContainer(t *testing.T, extra ...string) string {
	t.Helper()
	containerSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, err := runContainer(ctx, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testsupport.RemoveContainer(name) })
	return name
}

// removeStaleContainers removes what a test binary that was killed
// (and so removed nothing at its end) left: its name says its pid.
func removeStaleContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := testsupport.Podman(ctx, "ps", "-a", "--format", "{{.Names}}")
	for _, n := range strings.Fields(out) {
		var pid, k int
		if _, err := fmt.Sscanf(n, "mvx-e2e-%d-%d", &pid, &k); err == nil && pid != os.Getpid() && !testsupport.Alive(pid) {
			_ = testsupport.RemoveContainer(n)
		}
	}
}

func removeContainers() {
	containers.mu.Lock()
	defer containers.mu.Unlock()
	for _, n := range containers.made {
		_ = testsupport.RemoveContainer(n)
	}
}

// workDir is a fresh directory of the shared /work, writable by anyone
// (a container's user may be another uid).
func workDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(containers.work, "t")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(d, 0o777)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// inWork names a path of the shared directory as a container sees it.
func inWork(local string) string {
	rel, err := filepath.Rel(containers.work, local)
	if err != nil || strings.HasPrefix(rel, "..") {
		panic("not under the shared work directory: " + local)
	}
	return "/work/" + rel
}

// containerAlive asks the container whether pid (as it numbers it) is a
// live process there.
func containerAlive(name string) func(int) bool {
	return func(pid int) bool {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		out, err := testsupport.Podman(ctx, "exec", name, "bash", "-c",
			fmt.Sprintf(`s=$(cat /proc/%d/stat 2>/dev/null) || exit 0; s=${s##*) }; [ "${s%%%% *}" = Z ] || echo alive`, pid))
		return err == nil && strings.TrimSpace(out) == "alive"
	}
}

// podmanPlace is a fresh helper and session for a container as user
// (empty: the container's own).
func podmanPlace(t *testing.T, name, user string, opts ...helperOpt) targetPlace {
	t.Helper()
	h := startHelper(t, opts...)
	host := name
	if user != "" {
		host = user + "@" + name
	}
	return targetPlace{h: h, s: h.open(nil), target: "podman:" + host, method: "podman",
		dir: func(t *testing.T) (string, string) {
			d := workDir(t)
			return d, "/podman:" + host + ":" + inWork(d)
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

// podmanWrapperPlace is podmanPlace with the wrapper forced.
func podmanWrapperPlace(t *testing.T, name, user string) targetPlace {
	t.Helper()
	p := podmanPlace(t, name, user, withEnv(execution.RemoteModeVar+"="+remote.ModeWrapper))
	p.mode = remote.ModeWrapper
	return p
}

// The core remote checks in a container, as its root and as another
// uid (whose home cannot be written: the agent goes to a private
// directory of /tmp), through the host agent and through the wrapper.
func TestPodmanTargetCore(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	for _, c := range []struct {
		name, user string
		place      func(t *testing.T, name, user string) targetPlace
	}{
		{"root", "", func(t *testing.T, name, user string) targetPlace { return podmanPlace(t, name, user) }},
		{"nobody", "65534", func(t *testing.T, name, user string) targetPlace { return podmanPlace(t, name, user) }},
		{"wrapper-root", "", podmanWrapperPlace},
		{"wrapper-nobody", "65534", podmanWrapperPlace},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			targetCore(t, func(t *testing.T) targetPlace { return c.place(t, containers.shared, c.user) })
		})
	}
}

// The facts of a container target, its incarnation the engine's id and
// start time, and a user@container running as that user.
func TestPodmanTargetFacts(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	p := podmanPlace(t, containers.shared, "65534")
	_, cwd := p.dir(t)
	o := p.s.mustStart("id -u; echo $HOME", map[string]any{"cwd": cwd})
	f := o.Facts
	if !strings.HasPrefix(o.Output, "65534\n") || f.SupportTier != remote.TierSupported || f.TargetMethod != "podman" || f.Target != "podman:65534@"+containers.shared {
		t.Fatalf("%q %+v", o.Output, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	out, err := testsupport.Podman(ctx, "inspect", "--format", "{{.Id}} {{.State.StartedAt}}", containers.shared)
	if err != nil {
		t.Fatal(err)
	}
	id, started, _ := strings.Cut(strings.TrimSpace(out), " ")
	if in := f.TargetIncarnation; in == nil || in.ContainerID != id || in.StartedAt != started || in.BootID == "" {
		t.Fatalf("targetIncarnation %+v, want container %s started %s", in, id, started)
	}
	// The container's cgroups are not the agent's to write here: a
	// limit asked is not applied, and the facts say why.
	o = p.s.mustStart("true", map[string]any{"cwd": cwd, "resources": map[string]any{"pids": 8}})
	if r := o.Facts.Resources; r == nil || r.NotApplied[sandbox.LimitPids] == "" || o.Facts.Termination != execution.Exited {
		t.Fatalf("facts.resources %+v", r)
	}
}

// A read-only container: the home cannot take the agent, a private
// directory of the /tmp the engine mounts does.
func TestPodmanReadOnlyContainer(t *testing.T) {
	t.Parallel()
	name := newContainer(t, "--read-only")
	p := podmanPlace(t, name, "")
	_, cwd := p.dir(t)
	o := p.s.mustStart("readlink /proc/$PPID/exe", map[string]any{"cwd": cwd})
	if want := "/tmp/mevedel-exec-0/bin/"; !strings.HasPrefix(o.Output, want) || o.Facts.RemoteMode != remote.ModeAgent {
		t.Fatalf("the agent runs from %q (mode %q), want %s…", o.Output, o.Facts.RemoteMode, want)
	}
}

// A container removed and made again under its name while a command
// runs in it: the execution settles lost with reason target-replaced as
// soon as the agent's stream ends, its owner gets one delivery, and
// nothing is signalled in the new container (its pids are others').
// Through the agent, and through the wrapper.
//
// The helper's look at the container is held (a gate on its podman
// inspect) until the new container runs: the incarnation's id, not the
// container's absence, is what settles it.
func TestPodmanContainerReplacedSettlesLost(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	for _, mode := range []string{remote.ModeAgent, remote.ModeWrapper} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			name := newContainer(t)
			real, err := exec.LookPath("podman")
			if err != nil {
				t.Fatal(err)
			}
			prog, hold, waiting, gate := gatedProgram(t, "podman", "inspect", real)
			opts := []helperOpt{withEnv(execution.PodmanVar + "=" + prog)}
			if mode == remote.ModeWrapper {
				opts = append(opts, withEnv(execution.RemoteModeVar+"="+remote.ModeWrapper))
			}
			p := podmanPlace(t, name, "", opts...)
			if mode == remote.ModeWrapper {
				p.mode = remote.ModeWrapper
			}
			podmanContainerReplacedSettlesLost(t, name, p, hold, waiting, gate)
		})
	}
}

// gatedProgram is a program that runs real, except that while the file
// hold exists a call whose first word is verb first makes the file
// waiting and then waits for a line on the fifo gate (releaseGate): so a
// test can make a target again before the helper asks which
// incarnation runs.
func gatedProgram(t *testing.T, name, verb, real string) (prog, hold, waiting, gate string) {
	t.Helper()
	d := t.TempDir()
	prog, hold, waiting, gate = filepath.Join(d, name), filepath.Join(d, "hold"), filepath.Join(d, "waiting"), filepath.Join(d, "gate")
	if err := mkfifo(gate); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = %[1]s ] && [ -e %[2]s ]; then : > %[3]s; read _ < %[4]s; fi\nexec %[5]s \"$@\"\n",
		verb, hold, waiting, gate, real)
	if err := os.WriteFile(prog, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return prog, hold, waiting, gate
}

// releaseGate lets every call held at gate go on, one line each
// (several may wait); the gate stays open for one that comes late.
func releaseGate(t *testing.T, gate string) {
	t.Helper()
	g, err := os.OpenFile(gate, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if _, err := g.WriteString(strings.Repeat("go\n", 64)); err != nil {
		t.Fatal(err)
	}
}

// eachMode runs f with a place on a container of its own, through the
// host agent and with the wrapper forced.
func eachMode(t *testing.T, f func(t *testing.T, name string, p targetPlace)) {
	containerSetup(t)
	t.Run("agent", func(t *testing.T) {
		t.Parallel()
		name := newContainer(t)
		f(t, name, podmanPlace(t, name, ""))
	})
	t.Run("wrapper", func(t *testing.T) {
		t.Parallel()
		name := newContainer(t)
		f(t, name, podmanWrapperPlace(t, name, ""))
	})
}

// replaceHeldAtGate removes container name while execution id runs in
// it and makes it again under the name while the helper's look at it
// waits at gate (gatedProgram): nothing of the new one may be signalled
// for the old. The execution must then settle lost, target-replaced,
// within 5 s of the gate's release, and its owner get the delivery.
func replaceHeldAtGate(t *testing.T, p targetPlace, name, id, hold, waiting, gate string) {
	t.Helper()
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testsupport.Podman(ctx, "rm", "-f", "-t", "0", name); err != nil {
		t.Fatal(err)
	}
	// The transport ended; the helper's look at the target waits at the
	// gate until the new one runs.
	if !testsupport.Poll(waitBound, func() bool { _, err := os.Stat(waiting); return err == nil }) {
		t.Fatal("the helper did not ask about the target after its transport ended")
	}
	if err := testsupport.RunContainer(ctx, name, containers.rootfs, containers.work); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	releaseGate(t, gate)
	back := time.Now()
	d := p.h.waitDelivery(func(d delivery) bool { return d.Attrs.ExecutionID == id })
	if since := time.Since(back); since > 5*time.Second {
		t.Errorf("settled %v after the target came back", since)
	}
	if d.Observation == nil {
		t.Fatalf("delivery without an observation: %+v", d)
	}
	if g := d.Observation.Facts; g.Termination != execution.Lost || g.Status != execution.StatusLost ||
		g.Reason != execution.ReasonTargetReplaced || g.ExitCode != nil || g.Signal != "" {
		t.Fatalf("after the target was replaced: %+v", g)
	}
}

func podmanContainerReplacedSettlesLost(t *testing.T, name string, p targetPlace, hold, waiting, gate string) {
	_, cwd := p.dir(t)
	o := p.s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	p.s.observeUntil(o, "started")
	f := p.h.waitState(o.Facts.ExecutionID, execution.Running)
	if in := f.TargetIncarnation; in == nil || in.ContainerID == "" || f.RemoteMode != p.remoteMode() {
		t.Fatalf("targetIncarnation %+v, remoteMode %q", in, f.RemoteMode)
	}
	replaceHeldAtGate(t, p, name, f.ExecutionID, hold, waiting, gate)
	// The new incarnation runs the next command, and its pid 1 (the
	// sleep that keeps it) was never signalled.
	o = p.s.mustStart("echo again; cat /proc/1/cmdline | tr '\\0' ' '", map[string]any{"cwd": cwd})
	if in := o.Facts.TargetIncarnation; !strings.HasPrefix(o.Output, "again\n") || in == nil || in.ContainerID == f.TargetIncarnation.ContainerID {
		t.Fatalf("after the replacement: %q %+v", o.Output, in)
	}
	if n := len(p.h.deliveriesOf(f.ExecutionID)); n != 1 {
		t.Fatalf("%d deliveries of the replaced execution, want 1", n)
	}
}

// A container that does not exist, or is stopped, is unavailable, named,
// at once; a malformed or unsupported name is invalid.
func TestPodmanBadTargets(t *testing.T) {
	t.Parallel()
	stopped := newContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testsupport.Podman(ctx, "stop", "-t", "0", stopped); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, withEnv(execution.DockerVar+"=podman"))
	s := h.open(nil)
	for _, tc := range []struct {
		cwd  string
		code int64
		want string
	}{
		{"/podman:mvx-no-such-container:/", -32005, `there is no container "mvx-no-such-container"`},
		{"/podman:" + stopped + ":/", -32005, fmt.Sprintf("container %q is not running (exited)", stopped)},
		{"/docker:mvx-no-such-container:/", -32005, `no container "mvx-no-such-container"`},
		{"/podman::/", -32602, "empty container name"},
		{"/podman:-rm:/", -32602, `malformed container name "-rm"`},
		{"/podman:box#3:/", -32602, `a port has no meaning for method "podman"`},
		{"/ssh:a|podman:box:/", -32602, `hop 2 of "/ssh:a|podman:box:/" uses method "podman"`},
		{"/adb:phone:/", -32602, `method "adb" of "/adb:phone:/" is not supported`},
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
	// Nothing of the attempts runs: the engine's processes are gone.
	wantNoChildren(t, h)
	// The same through the wrapper, which asks the engine first too.
	hw := startHelper(t, withEnv(execution.RemoteModeVar+"="+remote.ModeWrapper))
	sw := hw.open(nil)
	sw.mustStart("true", nil) // the session's login environment is captured: its shell is gone
	for _, tc := range []struct{ cwd, want string }{
		{"/podman:mvx-no-such-container:/", `there is no container "mvx-no-such-container"`},
		{"/podman:" + stopped + ":/", fmt.Sprintf("container %q is not running (exited)", stopped)},
	} {
		start := time.Now()
		err := hw.call("exec/start", map[string]any{"sessionId": sw.id, "command": "echo never", "cwd": tc.cwd}, nil)
		if e, ok := rpcError(err); !ok || e.Code != -32005 || !strings.Contains(e.Message, tc.want) {
			t.Fatalf("through the wrapper, %s: %v, want -32005 naming %q", tc.cwd, err, tc.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("through the wrapper, %s: answered after %v", tc.cwd, d)
		}
	}
	wantNoChildren(t, hw)
}

// /docker: runs through the same code with the docker command line:
// here podman's, which takes the same arguments (no Docker engine runs
// on this machine). Its tier is experimental.
func TestDockerTargetThroughPodmanCLI(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	h := startHelper(t, withEnv(execution.DockerVar+"=podman"))
	s := h.open(nil)
	d := workDir(t)
	o := s.mustStart("echo in-docker; pwd", map[string]any{"cwd": "/docker:" + containers.shared + ":" + inWork(d)})
	f := o.Facts
	if o.Output != "in-docker\n"+inWork(d)+"\n" || f.Target != "docker:"+containers.shared || f.TargetMethod != "docker" ||
		f.SupportTier != remote.TierExperimental || f.RemoteMode != remote.ModeAgent {
		t.Fatalf("%q %+v", o.Output, f)
	}
}

// A container without bubblewrap refuses a required sandbox before
// anything runs, naming why.
func TestPodmanSandboxRequiredRefused(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	p := podmanPlace(t, containers.shared, "")
	local, cwd := p.dir(t)
	marker := filepath.Join(local, "ran")
	e := p.h.wantError("exec/start", map[string]any{"sessionId": p.s.id, "command": "touch " + inWork(marker), "cwd": cwd,
		"sandbox": map[string]any{"mode": "required"}}, -32003, "refused")
	if !strings.Contains(e.Message, "bwrap") {
		t.Errorf("the refusal does not name the reason: %s", e.Message)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the refused command ran: %v", err)
	}
}

// A port of a container with a network of its own (loopback only,
// unreachable from here) is forwarded through its host agent's stream:
// the server answers from the container's network namespace, a MiB goes
// there and back with each side's end of writing carried, unforward and
// the execution's end close the listener.
func TestPodmanPortForwardedThroughTheAgent(t *testing.T) {
	t.Parallel()
	name := newContainer(t, "--network", "none", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro")
	p := podmanPlace(t, name, "")
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
	id := o.Facts.ExecutionID
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		c.Close()
		t.Fatalf("port %d of the container is reachable here without a forward", port)
	}
	forward := func() string {
		t.Helper()
		var fw struct{ LocalAddress string }
		p.h.mustCall("exec/forward", map[string]any{"sessionId": p.s.id, "executionId": id, "port": port}, &fw)
		if !strings.HasPrefix(fw.LocalAddress, "127.0.0.1:") {
			t.Fatalf("localAddress %q", fw.LocalAddress)
		}
		return fw.LocalAddress
	}
	addr := forward()
	here, _ := os.Readlink("/proc/self/ns/net")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	// Two connections at once: each tunnel has its own flow.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(waitBound))
			go func() {
				_, _ = c.Write(payload)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Error(err)
				return
			}
			greeting, rest, _ := bytes.Cut(got, []byte("\n"))
			if !bytes.HasPrefix(greeting, []byte("netns net:")) || string(greeting) == "netns "+here {
				t.Errorf("greeting %q, this machine's network %q", greeting, here)
			}
			if !bytes.Equal(rest, payload) {
				t.Errorf("echoed %d bytes, want the %d sent", len(rest), len(payload))
			}
		})
	}
	wg.Wait()
	p.h.mustCall("exec/unforward", map[string]any{"sessionId": p.s.id, "executionId": id, "port": port}, nil)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after unforward", addr)
	}
	addr = forward()
	p.h.mustCall("exec/stop", map[string]any{"sessionId": p.s.id, "executionId": id}, nil)
	if !testsupport.Poll(waitBound, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatalf("%s still accepts after the execution ended", addr)
	}
}

// Recovery after a helper's crash finds its container made again under
// its name: the run is lost with reason target-replaced, and the new
// container's process that holds the old command's pid is not signalled.
// Through the agent, and through the wrapper.
func TestPodmanRecoveryOnReplacedContainer(t *testing.T) {
	t.Parallel()
	eachMode(t, podmanRecoveryOnReplacedContainer)
}

func podmanRecoveryOnReplacedContainer(t *testing.T, name string, p targetPlace) {
	_, cwd := p.dir(t)
	dir := filepath.Join(t.TempDir(), "state")
	p.h.mustCall("session/open", map[string]any{"sessionId": "first", "stateDir": dir}, nil)
	s1 := &session{h: p.h, id: "first", stateDir: dir}
	o := s1.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	s1.observeUntil(o, "started")
	f := p.h.waitState(o.Facts.ExecutionID, execution.Running)
	if f.RemoteMode != p.remoteMode() {
		t.Fatalf("remoteMode %q", f.RemoteMode)
	}
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
	// A process of the new container at the old command's pid: pids
	// are handed out one by one in a fresh pid namespace, and nothing
	// else runs there yet, so the loop reaches it.
	out, err := testsupport.Podman(ctx, "exec", name, "bash", "-c", fmt.Sprintf(
		`for i in {1..500}; do sleep 1000 >/dev/null 2>&1 & [ $! -ge %d ] && break; kill $!; wait $! 2>/dev/null; done; echo $!`, f.Pid))
	if err != nil {
		t.Fatal(err)
	}
	squatter := strings.TrimSpace(out)
	if squatter != fmt.Sprint(f.Pid) {
		t.Fatalf("the new container's process has pid %s, not the old command's %d: the check below would look at another process", squatter, f.Pid)
	}
	var opts []helperOpt
	if p.mode != "" {
		opts = append(opts, withEnv(execution.RemoteModeVar+"="+p.mode))
	}
	h2 := startHelper(t, opts...)
	var info execution.SessionInfo
	h2.mustCall("session/open", map[string]any{"sessionId": "second", "stateDir": dir}, &info)
	if len(info.Recovered) != 1 {
		t.Fatalf("recovered %+v", info.Recovered)
	}
	if r := info.Recovered[0]; r.ExecutionID != f.ExecutionID || r.Termination != execution.Lost || r.Reason != execution.ReasonTargetReplaced {
		t.Fatalf("recovered %+v", r)
	}
	pid := 0
	fmt.Sscan(squatter, &pid)
	if !containerAlive(name)(pid) {
		t.Fatalf("the new container's process %d was signalled", pid)
	}
}

// /docker: names with the docker command line itself, against Podman's
// Docker-compatible API service on a private socket (no Docker engine
// runs on this machine): the same exec, inspect and errors.
func TestDockerTargetThroughTheDockerCLI(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	if _, err := exec.LookPath("docker"); err != nil {
		t.Fatal("no docker command line (scripts/setup.sh installs Debian's docker.io for it)")
	}
	sock := filepath.Join(t.TempDir(), "podman.sock")
	// The service keeps each exec's monitor (conmon) for minutes after
	// its end, for a client that may ask for its exit code later; the
	// docker command line has asked by then.
	conf := filepath.Join(t.TempDir(), "containers.conf")
	if err := os.WriteFile(conf, []byte("[engine]\nexit_command_delay = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := exec.Command("podman", "system", "service", "--time=0", "unix://"+sock)
	svc.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Asked to end, it finishes its exec sessions first; killed, it
		// would leave their monitors (conmon) waiting minutes for it.
		_ = svc.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = svc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitBound):
			_ = svc.Process.Kill()
			<-done
		}
	})
	if !testsupport.Poll(waitBound, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatal("podman's API service did not listen")
	}
	h := startHelper(t, withEnv("DOCKER_HOST=unix://"+sock))
	s := h.open(nil)
	d := workDir(t)
	o := s.mustStart("echo via-docker; pwd", map[string]any{"cwd": "/docker:" + containers.shared + ":" + inWork(d)})
	if f := o.Facts; o.Output != "via-docker\n"+inWork(d)+"\n" || f.Target != "docker:"+containers.shared || f.RemoteMode != remote.ModeAgent ||
		f.TargetIncarnation == nil || f.TargetIncarnation.ContainerID == "" {
		t.Fatalf("%q %+v", o.Output, f)
	}
	err := h.call("exec/start", map[string]any{"sessionId": s.id, "command": "echo never", "cwd": "/docker:mvx-no-such-container:/"}, nil)
	if e, ok := rpcError(err); !ok || e.Code != -32005 || !strings.Contains(e.Message, `there is no container "mvx-no-such-container"`) {
		t.Fatalf("a missing container: %v", err)
	}
	// The wrapper through the docker command line: the true end; a
	// terminal the command line refuses (its input is not one).
	hw := startHelper(t, withEnv("DOCKER_HOST=unix://"+sock, execution.RemoteModeVar+"="+remote.ModeWrapper))
	sw := hw.open(nil)
	o = sw.mustStart("echo via-wrapper; kill -KILL $$", map[string]any{"cwd": "/docker:" + containers.shared + ":" + inWork(d)})
	if f := o.Facts; o.Output != "via-wrapper\n" || f.RemoteMode != remote.ModeWrapper || f.Termination != execution.Signaled || f.Signal != "SIGKILL" {
		t.Fatalf("through the wrapper: %q %+v", o.Output, f)
	}
	o = sw.mustStart("echo never", map[string]any{"cwd": "/docker:" + containers.shared + ":" + inWork(d), "tty": true})
	if f := o.Facts; f.Termination != execution.SpawnFailed || !strings.Contains(f.Reason, "not a TTY") {
		t.Fatalf("a terminal through the docker command line: %q %+v", o.Output, f)
	}
}

// A container restarted (the same id, another start) while a command
// runs in it is another incarnation too. Through the agent, and through
// the wrapper.
func TestPodmanContainerRestartedSettlesLost(t *testing.T) {
	t.Parallel()
	eachMode(t, podmanContainerRestartedSettlesLost)
}

func podmanContainerRestartedSettlesLost(t *testing.T, name string, p targetPlace) {
	_, cwd := p.dir(t)
	o := p.s.mustStart("echo started; exec sleep 1000", map[string]any{"cwd": cwd, "yieldMs": 0})
	p.s.observeUntil(o, "started")
	f := p.h.waitState(o.Facts.ExecutionID, execution.Running)
	if f.RemoteMode != p.remoteMode() {
		t.Fatalf("remoteMode %q", f.RemoteMode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := testsupport.Podman(ctx, "restart", "-t", "0", name); err != nil {
		t.Fatal(err)
	}
	_, final := p.s.waitFinal(f.ExecutionID, nil)
	if g := final.Facts; g.Termination != execution.Lost || g.Reason != execution.ReasonTargetReplaced || g.Signal != "" {
		t.Fatalf("after the container restarted: %+v", g)
	}
	o = p.s.mustStart("echo again", map[string]any{"cwd": cwd})
	if in := o.Facts.TargetIncarnation; o.Output != "again\n" || in == nil || in.ContainerID != f.TargetIncarnation.ContainerID || in.StartedAt == f.TargetIncarnation.StartedAt {
		t.Fatalf("after the restart: %q %+v (before %+v)", o.Output, in, f.TargetIncarnation)
	}
}

// The agent goes into a container once per version, 0700 in a 0700
// directory of its user's; a later helper finds it by its checksum, and
// a corrupted one is replaced. (User 65534, whose home is not there: a
// private directory of the container's own /tmp.)
func TestPodmanAgentDeployedOnceAndReplacedWhenCorrupt(t *testing.T) {
	t.Parallel()
	name := newContainer(t, "--tmpfs", "/tmp:rw,exec,mode=1777")
	runs := func() {
		t.Helper()
		p := podmanPlace(t, name, "65534")
		_, cwd := p.dir(t)
		if o := p.s.mustStart("echo ok", map[string]any{"cwd": cwd}); o.Output != "ok\n" || o.Facts.RemoteMode != remote.ModeAgent {
			t.Fatalf("%q %+v", o.Output, o.Facts)
		}
	}
	look := func(script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		out, err := testsupport.Podman(ctx, "exec", "--user", "65534", name, "bash", "-c", "cd /tmp/mevedel-exec-65534/bin/*/ && "+script)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	state := `ls -i mevedel-exec; sha256sum mevedel-exec; ls -A; ls -ld . ..; ls -l mevedel-exec`
	b, err := os.ReadFile(helperBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(b))
	runs()
	first := look(state)
	if !strings.Contains(first, sum+"  mevedel-exec") || strings.Count(first, "drwx------") != 2 || !strings.Contains(first, "-rwx------") {
		t.Fatalf("the deployed agent:\n%s\nwant the helper's build (%s), 0700 in 0700 directories", first, sum)
	}
	runs()
	if again := look(state); again != first {
		t.Fatalf("the agent was copied again for a second helper:\n%s\nthen\n%s", first, again)
	}
	// Corrupted (in use by the agents that run: replaced, not rewritten).
	look("rm mevedel-exec && echo corrupt > mevedel-exec")
	runs()
	after := look(state)
	if !strings.Contains(after, sum+"  mevedel-exec") || strings.Contains(after, ".mevedel-exec.tmp-") {
		t.Fatalf("the corrupted agent was not replaced, or a copy was left:\n%s", after)
	}
}

// Containers where the host agent cannot run: read-only with no writable
// /tmp (nowhere to put it), and read-only with a noexec /tmp (nowhere it
// may run). Their commands run through the wrapper instead, remoteMode
// says so, and the core checks hold; a required sandbox is refused
// before anything runs, and limits are listed as not applied, as on an
// SSH host through the wrapper.
func TestPodmanAgentThatCannotRunFallsBackToTheWrapper(t *testing.T) {
	t.Parallel()
	containerSetup(t)
	for _, c := range []struct {
		name, user string
		extra      []string
	}{
		{"nowhere-to-write", "", []string{"--read-only", "--read-only-tmpfs=false"}},
		{"noexec", "65534", []string{"--read-only", "--tmpfs", "/tmp:rw,noexec,mode=1777"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name := newContainer(t, c.extra...)
			p := podmanPlace(t, name, c.user)
			p.mode = remote.ModeWrapper
			targetEchoAndExitCodes(t, p)
			targetStopLeavesNoSurvivor(t, p)
			local, cwd := p.dir(t)
			marker := filepath.Join(local, "ran")
			e := p.h.wantError("exec/start", map[string]any{"sessionId": p.s.id, "command": "touch " + inWork(marker), "cwd": cwd,
				"sandbox": map[string]any{"mode": "required"}}, -32003, "refused")
			if !strings.Contains(e.Message, "wrapper") {
				t.Errorf("the refusal does not name the reason: %s", e.Message)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Errorf("the refused command ran: %v", err)
			}
			o := p.s.mustStart("echo hi", map[string]any{"cwd": cwd, "resources": map[string]any{"pids": 8}})
			if r := o.Facts.Resources; o.Output != "hi\n" || o.Facts.RemoteMode != remote.ModeWrapper || r == nil ||
				!strings.Contains(r.NotApplied[sandbox.LimitPids], "wrapper") || len(r.Applied) != 0 {
				t.Errorf("%q %+v", o.Output, o.Facts)
			}
		})
	}
}

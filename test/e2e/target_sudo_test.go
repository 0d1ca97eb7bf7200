package e2e

// /sudo: targets with Debian's real sudo: users and a sudoers rule that
// the tests make (root only: a test that is not root fails, it does not
// skip). mvx-e2e-nopw may run anything as anyone without a password,
// mvx-e2e-pw only with one (which the helper never types), and
// mvx-e2e-tgt is a user commands run as.

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/sandbox"
	"github.com/mevedel/mevedel-exec/test/sshd"
)

const (
	sudoNoPassword = "mvx-e2e-nopw"
	sudoPassword   = "mvx-e2e-pw"
	sudoTarget     = "mvx-e2e-tgt"
)

var sudoFixture struct {
	once sync.Once
	err  error
	uids map[string]int
	// bin is a copy of the helper that every user can run, written by
	// another process (install): a file this process had open for
	// writing could be held by a concurrent fork, and its exec fail with
	// ETXTBSY.
	bin string
}

// sudoSetup makes the users (kept: another test binary may use them)
// and this test binary's sudoers rule (removed at the end).
func sudoSetup(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the sudo tests make users and a sudoers rule, which needs root")
	}
	if _, err := exec.LookPath("sudo"); err != nil {
		t.Fatal("sudo is not installed (scripts/setup.sh installs it as root)")
	}
	sudoFixture.once.Do(func() {
		base := filepath.Dir(helperBin)
		sudoFixture.bin = filepath.Join(base, "any-user", "mevedel-exec")
		if out, err := exec.Command("install", "-D", "-m", "0755", helperBin, sudoFixture.bin).CombinedOutput(); err != nil {
			sudoFixture.err = fmt.Errorf("install: %v: %s", err, out)
			return
		}
		for _, d := range []string{base, filepath.Dir(sudoFixture.bin)} {
			if sudoFixture.err = os.Chmod(d, 0o755); sudoFixture.err != nil {
				return
			}
		}
		sudoFixture.uids = map[string]int{}
		for _, name := range []string{sudoNoPassword, sudoPassword, sudoTarget} {
			if _, err := user.Lookup(name); err != nil {
				out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/bash", name).CombinedOutput()
				if _, lerr := user.Lookup(name); err != nil && lerr != nil { // another binary may have won
					sudoFixture.err = fmt.Errorf("useradd %s: %v: %s", name, err, out)
					return
				}
			}
			u, _ := user.Lookup(name)
			sudoFixture.uids[name], _ = strconv.Atoi(u.Uid)
		}
		// Rules of test binaries that were killed before their end.
		stale, _ := filepath.Glob("/etc/sudoers.d/mvx-e2e-*")
		for _, f := range stale {
			if pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), "mvx-e2e-")); err == nil && !testsupport.Alive(pid) {
				os.Remove(f)
			}
		}
		rule := fmt.Sprintf("%s ALL=(ALL:ALL) NOPASSWD: ALL\n%s ALL=(ALL:ALL) ALL\n", sudoNoPassword, sudoPassword)
		file := fmt.Sprintf("/etc/sudoers.d/mvx-e2e-%d", os.Getpid())
		tmp := filepath.Join(filepath.Dir(helperBin), "sudoers")
		if sudoFixture.err = os.WriteFile(tmp, []byte(rule), 0o440); sudoFixture.err != nil {
			return
		}
		if out, err := exec.Command("visudo", "-cf", tmp).CombinedOutput(); err != nil {
			sudoFixture.err = fmt.Errorf("visudo: %v: %s", err, out)
			return
		}
		if sudoFixture.err = os.Rename(tmp, file); sudoFixture.err != nil {
			return
		}
		atEnd(func() { os.Remove(file) })
	})
	if sudoFixture.err != nil {
		t.Fatalf("sudo setup: %v", sudoFixture.err)
	}
}

// helperAs starts a helper (the copy any user can run) as name, with a
// home and state directory of that user's.
func helperAs(t *testing.T, name string) *helper {
	t.Helper()
	uid := sudoFixture.uids[name]
	dir := ownedDir(t, uid)
	home := filepath.Join(dir, "home")
	mkdirOwned(t, dir, home, uid)
	h := startHelper(t, func(o *client.Options, _ string) {
		o.Bin, o.Env, o.Credential = sudoFixture.bin, baseEnv(home), &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	})
	h.home = home
	return h
}

// sudoPlace is a helper of mvx-e2e-nopw running commands as root through
// /sudo:: (as = ""), or a helper of root running them as as.
func sudoPlace(t *testing.T, as string) targetPlace {
	t.Helper()
	sudoSetup(t)
	var h *helper
	var s *session
	prefix, target, owner := "/sudo::", "sudo:root@localhost", 0
	if as == "" {
		h = helperAs(t, sudoNoPassword)
		dir := ownedDir(t, sudoFixture.uids[sudoNoPassword])
		s = h.openAt(filepath.Join(dir, "state"), nil)
	} else {
		h = startHelper(t, func(o *client.Options, _ string) { o.Bin = sudoFixture.bin })
		s = h.open(nil)
		prefix, target, owner = "/sudo:"+as+"@localhost:", "sudo:"+as+"@localhost", sudoFixture.uids[as]
	}
	return targetPlace{h: h, s: s, target: target, method: "sudo",
		dir: func(t *testing.T) (string, string) {
			d := ownedDir(t, owner)
			return d, prefix + d
		},
		inside: func(p string) string { return p }, alive: testsupport.Alive,
		kill: func(t *testing.T, pid int) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}}
}

// The core remote checks through sudo on this machine: to root with
// /sudo:: from a user whose rule needs no password, and to another user
// from root.
func TestSudoTargetCore(t *testing.T) {
	t.Parallel()
	t.Run("root", func(t *testing.T) {
		t.Parallel()
		targetCore(t, func(t *testing.T) targetPlace { return sudoPlace(t, "") })
	})
	t.Run("user", func(t *testing.T) {
		t.Parallel()
		targetCore(t, func(t *testing.T) targetPlace { return sudoPlace(t, sudoTarget) })
	})
}

// Commands run as the user sudo names, from the helper's own build, and
// the facts say where.
func TestSudoTargetFacts(t *testing.T) {
	t.Parallel()
	for _, as := range []string{"", sudoTarget} {
		p := sudoPlace(t, as)
		_, cwd := p.dir(t)
		o := p.s.mustStart("id -un", map[string]any{"cwd": cwd})
		want := as
		if as == "" {
			want = "root"
		}
		f := o.Facts
		if o.Output != want+"\n" || f.Target != p.target || f.TargetMethod != "sudo" || f.SupportTier != remote.TierSupported || f.RemoteMode != remote.ModeAgent {
			t.Fatalf("%s: %q %+v", cwd, o.Output, f)
		}
		boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if in := f.TargetIncarnation; in == nil || in.BootID != strings.TrimSpace(string(boot)) || in.ContainerID != "" {
			t.Fatalf("targetIncarnation %+v", in)
		}
	}
}

// A target on this machine yields the CPU like a local command: its
// commands descend from the sudo process the helper starts at its nice.
func TestSudoTargetCommandsRunAtTheHelpersNiceness(t *testing.T) {
	t.Parallel()
	sudoSetup(t)
	h := startHelper(t, func(o *client.Options, _ string) {
		o.Bin, o.Args = sudoFixture.bin, []string{"serve", "--nice", "7"}
	})
	s := h.open(nil)
	cwd := "/sudo:" + sudoTarget + "@localhost:" + ownedDir(t, sudoFixture.uids[sudoTarget])
	if o := s.mustStart("nice; id -un", map[string]any{"cwd": cwd}); o.Output != "7\n"+sudoTarget+"\n" {
		t.Fatalf("on %s: printed %q (%s), want nice 7 as %s", cwd, o.Output, ended(o), sudoTarget)
	}
}

// sudo that wants a password is unavailable at once, says so, and
// leaves nothing running; a user sudo does not know is named.
func TestSudoWantingAPasswordRefused(t *testing.T) {
	t.Parallel()
	sudoSetup(t)
	h := helperAs(t, sudoPassword)
	s := h.openAt(filepath.Join(ownedDir(t, sudoFixture.uids[sudoPassword]), "state"), nil)
	for _, tc := range []struct{ cwd, want string }{
		{"/sudo::/tmp", "sudo wants a password, and the helper cannot type one (it runs sudo -n)"},
		{"/sudo:root@localhost:/tmp", "sudo wants a password"},
		{"/sudo:mvx-e2e-nosuchuser@localhost:/tmp", "unknown user mvx-e2e-nosuchuser"},
	} {
		start := time.Now()
		err := h.call("exec/start", map[string]any{"sessionId": s.id, "command": "echo never", "cwd": tc.cwd}, nil)
		e, ok := rpcError(err)
		if !ok || e.Code != -32005 || !strings.Contains(e.Message, tc.want) {
			t.Fatalf("%s: %v, want -32005 naming %q", tc.cwd, err, tc.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: answered after %v", tc.cwd, d)
		}
	}
	// Nothing of the attempts runs: the helper has no child left.
	wantNoChildren(t, h)
	var list struct{ Executions []execution.Facts }
	h.mustCall("exec/list", map[string]any{"sessionId": s.id}, &list)
	if len(list.Executions) != 0 {
		t.Fatalf("registered: %+v", list.Executions)
	}
}

// wantNoChildren fails t unless h's helper has no child left within a
// bound: nothing of a refused or failed start runs.
func wantNoChildren(t *testing.T, h *helper) {
	t.Helper()
	pid := h.c.Child().Pid()
	if !testsupport.Poll(5*time.Second, func() bool { return len(childrenOf(pid)) == 0 }) {
		t.Fatalf("the helper still has children %v", childrenOf(pid))
	}
}

// childrenOf lists pid's children (every thread's).
func childrenOf(pid int) []string {
	var out []string
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// underSudo is this machine's root through /sudo:: from a helper of
// mvx-e2e-nopw, for the confinement and limits tests: the host agent
// that sudo starts applies them, as on an SSH host.
func underSudo(t *testing.T) where {
	t.Helper()
	p := sudoPlace(t, "")
	bin := sudoFixture.bin
	return where{h: p.h, s: p.s, home: "/root", dir: func(d string) string { return "/sudo::" + d }, wantBubblewrap: wantHostBubblewrap,
		wantGroupsGone: func(t *testing.T) {
			t.Helper()
			// The agent is the helper's executable, run by root.
			var left []string
			for _, q := range process.Table() {
				if exe, ok := testsupport.Exe(q.Pid); ok && exe == bin && q.Pid != p.h.c.Child().Pid() {
					left = append(left, groupsOf(q.Pid)...)
				}
			}
			if len(left) > 0 {
				t.Errorf("cgroups left after settlement: %v", left)
			}
		}}
}

func TestSudoSandboxHoldsThroughYieldPollAndStop(t *testing.T) {
	t.Parallel()
	holdsThroughYieldPollAndStop(t, underSudo(t))
}

func TestSudoLimitsPidsCapAForkLoop(t *testing.T) {
	t.Parallel()
	if f := pidsCapAForkLoop(t, underSudo(t)); f.Resources == nil || f.Resources.Applied[sandbox.LimitPids] == "" {
		t.Errorf("facts.resources %+v", f.Resources)
	}
}

// A server started through sudo makes its start ready when it listens
// (the host agent reads the ports of its tree), and its port, on this
// machine, is forwarded as itself.
func TestSudoReadyPortAndForward(t *testing.T) {
	t.Parallel()
	w := underSudo(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("through sudo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	o := w.s.mustStart(fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1 --directory %s", port, dir),
		map[string]any{"cwd": w.dir(dir), "readyPort": port, "yieldMs": 60000})
	if o.Final || !o.Facts.Ready || o.Facts.ReadyPort != port || !listensOn(o.Facts, port) {
		t.Fatalf("start %+v", o.Facts)
	}
	var fw struct{ LocalAddress string }
	w.h.mustCall("exec/forward", map[string]any{"sessionId": w.s.id, "executionId": o.Facts.ExecutionID, "port": port}, &fw)
	if got := fetch(t, fw.LocalAddress); fw.LocalAddress != fmt.Sprintf("127.0.0.1:%d", port) || got != "through sudo\n" {
		t.Fatalf("GET %s: %q", fw.LocalAddress, got)
	}
	w.h.mustCall("exec/stop", map[string]any{"sessionId": w.s.id, "executionId": o.Facts.ExecutionID}, nil)
}

// sudo on an SSH host, /ssh:host|sudo::/path: the host's own agent
// build, deployed for the SSH user, run as root by sudo over one more
// channel of the host's connection. (The fixture's host is this machine,
// its SSH user root, whom sudo asks no password.)
func TestSudoOnAnSSHHostTargetCore(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Fatal("sudo on the fixture's host runs as its SSH user, which must be root here")
	}
	targetCore(t, func(t *testing.T) targetPlace {
		srv := sshd.Start(t)
		h := startHelper(t, withEnv("HOME="+srv.Home))
		h.home = srv.Home
		s, _ := openRemote(h)
		host := fmt.Sprintf("ssh:%s@127.0.0.1#%d", srv.User, srv.Port)
		return targetPlace{h: h, s: s, target: host + "|sudo:root@127.0.0.1", method: "sudo",
			dir: func(t *testing.T) (string, string) {
				d := t.TempDir()
				return d, "/" + host + "|sudo::" + d
			},
			inside: func(p string) string { return p }, alive: testsupport.Alive,
			kill: func(t *testing.T, pid int) {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}}
	})
}

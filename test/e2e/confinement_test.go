package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

// What a box holds against a command that tries its way out as an
// attacker would: no capabilities (even as root), no remount or umount,
// no other process visible (its environment, its root), no raw device,
// a /dev/shm of its own, and no socket of ours to reach: the daemon's
// directory hidden, and a helper whose socket it can reach refuses it.

// boxPlace is where the box is tried: its helper, session and home (in
// w), the uid its commands run as, and a directory of that uid for the
// test's files.
type boxPlace struct {
	w   where
	uid int
	dir string
	// listen is another helper of the same uid serving a socket the box
	// can reach, or nil.
	listen *listener
}

func TestSandboxBoxHasNoPowersAsRoot(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Fatal("this test is about a helper running as root")
	}
	p := boxPlace{w: here(t), uid: 0, dir: t.TempDir()}
	p.listen = startListenerAs(t, t.TempDir(), helperBin, nil)
	boxHasNoPowers(t, p)
}

func TestSandboxBoxHasNoPowersAsAUser(t *testing.T) {
	t.Parallel()
	const uid = 65534
	p := boxPlace{uid: uid, dir: ownedDir(t, uid)}
	bin := reachable(t, helperBin)
	cred := &syscall.Credential{Uid: uid, Gid: uid}
	p.w = hereAs(t, bin, cred, p.dir)
	home := filepath.Join(p.dir, "listener")
	mkdirOwned(t, p.dir, home, uid)
	p.listen = startListenerAs(t, home, bin, cred)
	boxHasNoPowers(t, p)
}

func TestRemoteSandboxBoxHasNoPowers(t *testing.T) {
	t.Parallel()
	boxHasNoPowers(t, boxPlace{w: onHost(t), uid: os.Getuid(), dir: t.TempDir()})
}

// ownedDir is a fresh directory of uid that uid can reach.
func ownedDir(t *testing.T, uid int) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("this test runs a helper as another uid, which needs root")
	}
	dir := filepath.Join(t.TempDir(), "u")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, dir, uid)
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	return dir
}

func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// mkdirOwned makes dir (0700) and its missing parents below base as uid's.
func mkdirOwned(t *testing.T, base, dir string, uid int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for d := dir; d != base && strings.HasPrefix(d, base); d = filepath.Dir(d) {
		chown(t, d, uid)
	}
}

// hereAs is this machine with a helper (bin) running as cred's user, its
// home and session in dir.
func hereAs(t *testing.T, bin string, cred *syscall.Credential, dir string) where {
	t.Helper()
	home := filepath.Join(dir, "home")
	mkdirOwned(t, dir, home, int(cred.Uid))
	h := startHelper(t, func(o *client.Options, _ string) {
		o.Bin, o.Env, o.Credential = bin, baseEnv(home), cred
	})
	h.home = home
	return where{h: h, s: h.openAt(filepath.Join(dir, "state"), nil), home: home, dir: func(d string) string { return d }, wantBubblewrap: wantBubblewrap}
}

// boxHasNoPowers tries every way out of a required box at p.
func boxHasNoPowers(t *testing.T, p boxPlace) {
	work, outside := filepath.Join(p.dir, "work"), filepath.Join(p.dir, "outside")
	mkdirOwned(t, p.dir, work, p.uid)
	mkdirOwned(t, p.dir, outside, p.uid)
	// A hidden key, to be unmounted into view.
	ssh := filepath.Join(p.w.home, ".ssh")
	if _, err := os.Stat(ssh); os.IsNotExist(err) {
		mkdirOwned(t, p.w.home, ssh, p.uid)
	}
	if err := os.WriteFile(filepath.Join(ssh, "id_box"), []byte("PRIVATE-KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, filepath.Join(ssh, "id_box"), p.uid)
	// A daemon's socket where a daemon of this user keeps it: a listener
	// of this test, which counts who reaches it.
	daemonDir := filepath.Join(p.w.home, ".cache", "mevedel-exec")
	mkdirOwned(t, p.w.home, daemonDir, p.uid)
	sock := filepath.Join(daemonDir, "daemon.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	chown(t, sock, p.uid)
	var reached atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	// A process of the same uid outside the box, with a secret in its
	// environment.
	outsider := exec.Command("sleep", "1000")
	outsider.Env = []string{"MEVEDEL_SECRET=cloud-credential"}
	if p.uid != os.Getuid() {
		outsider.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.uid)}}
	}
	if err := outsider.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = outsider.Process.Kill()
		_ = outsider.Wait()
	}()
	// Something in the host's /dev/shm the box must not see.
	shm, err := os.CreateTemp("/dev/shm", "mevedel-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	shm.Close()
	defer os.Remove(shm.Name())
	boxedShm := filepath.Join("/dev/shm", "mevedel-e2e-boxed-"+filepath.Base(p.dir))
	defer os.Remove(boxedShm)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if p.uid != os.Getuid() {
		self = reachable(t, self)
	}
	dial := func(what, sock string) string {
		return fmt.Sprintf("echo %s=[$(%s=%s %s 2>&1 | tr '\\n' ' ')]\n", what, dialAsEnv, sock, self)
	}
	script := fmt.Sprintf(`exec 2>/dev/null
echo "$(grep CapEff /proc/self/status | tr -d '\t ')"
mount -o remount,rw /; echo remount=$?
umount %[1]s/.ssh; echo umount=$?
echo key=[$(cat %[1]s/.ssh/id_box)]
echo x > /proc/%[2]d/root%[3]s/through; echo through=$?
echo environ=[$(tr '\0' '\n' < /proc/%[2]d/environ)]
echo outsider=$(test -e /proc/%[2]d && echo visible || echo absent)
cat /proc/$PPID/environ > /dev/null; echo parentenv=$?
echo procs=$(ls -d /proc/[0-9]* | wc -l)
echo daemondir=[$(ls -A %[4]s)]
ls -A %[4]s > /dev/null; echo lsdaemon=$?
echo shm=[$(ls -A /dev/shm)]
echo inbox > %[5]s; echo shmwrite=$?
echo blockdevs=$(find /dev -type b | wc -l)
`, p.w.home, outsider.Process.Pid, outside, daemonDir, boxedShm) + dial("daemon", sock)
	if p.listen != nil {
		if !testsupport.Poll(waitBound, func() bool { _, err := os.Stat(p.listen.sock); return err == nil }) {
			t.Fatalf("the --listen helper never listened: %s", p.listen.stderr)
		}
		script += dial("listen", p.listen.sock)
	}
	o := p.w.s.mustStart(script, map[string]any{"cwd": p.w.dir(work), "sandbox": confined(p.w.dir(work)), "timeoutMs": 20000})
	p.w.wantBubblewrap(t, o.Facts)
	out := o.Output
	want := func(what string) {
		t.Helper()
		if !strings.Contains(out, what+"\n") && !strings.Contains(out, what+" ") {
			t.Errorf("inside the box: want %q in:\n%s", what, out)
		}
	}
	want("CapEff:0000000000000000")
	for _, failed := range []string{"remount", "umount", "through", "parentenv", "lsdaemon"} {
		if strings.Contains(out, failed+"=0\n") {
			t.Errorf("%s succeeded inside the box:\n%s", failed, out)
		}
	}
	want("key=[]")
	want("environ=[]")
	want("outsider=absent")
	want("daemondir=[]")
	want("shm=[]")
	want("blockdevs=0")
	if _, err := os.Stat(filepath.Join(outside, "through")); !os.IsNotExist(err) {
		t.Errorf("the box wrote outside through /proc: %v", err)
	}
	if _, err := os.Stat(boxedShm); !os.IsNotExist(err) {
		t.Errorf("the box's /dev/shm is the host's: %v", err)
	}
	var procs int
	for _, l := range strings.Split(out, "\n") {
		if n, ok := strings.CutPrefix(l, "procs="); ok {
			fmt.Sscan(n, &procs)
		}
	}
	if procs == 0 || procs > 8 {
		t.Errorf("the box's /proc shows %d processes, want only its own:\n%s", procs, out)
	}
	// The daemon's socket is not there for the box to connect to.
	if n := reached.Load(); n != 0 || strings.Contains(out, "initialize: <nil>") {
		t.Errorf("the box reached a socket of ours (%d connections):\n%s", n, out)
	}
	if !strings.Contains(out, "daemon=[dial:") {
		t.Errorf("the daemon's socket answered the box:\n%s", out)
	}
	// Another helper's socket, which the box can reach, refuses it and
	// says why.
	if p.listen != nil {
		if !strings.Contains(out, "listen=[initialize:") || !strings.Contains(out, "pid namespace") {
			t.Errorf("the --listen helper did not refuse the box for running in one:\n%s", out)
		}
		if !p.listen.stderr.Wait(waitBound, func(s string) bool { return strings.Contains(s, "refusing a client") }) {
			t.Errorf("no refusal in the --listen helper's log:\n%s", p.listen.stderr)
		}
	}
}

// A daemon refuses a client that runs in a box of its own, whoever made
// it, and says why; its own user outside every box is still served.
func TestDaemonRefusesAConfinedClient(t *testing.T) {
	t.Parallel()
	d := newDaemonEnv(t)
	sock := d.start()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--", self)
	cmd.Env = []string{dialAsEnv + "=" + sock, "HOME=" + d.home}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the boxed client: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "pid namespace") || strings.Contains(string(out), "initialize: <nil>") {
		t.Fatalf("the daemon's answer to a boxed client: %q", out)
	}
	if !strings.Contains(d.logText(), "refusing a client: client pid") {
		t.Fatalf("no refusal in the log:\n%s", d.logText())
	}
	if answer := dialAs(t, sock, uint32(os.Getuid())); !strings.Contains(answer, "initialize: <nil>") {
		t.Fatalf("the daemon's own user: %q", answer)
	}
}

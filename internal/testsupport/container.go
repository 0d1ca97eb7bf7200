package testsupport

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Containers for the tests of /podman: and /docker: targets: a minimal
// root file system made of this machine's own binaries and their
// libraries, run by Podman with runc. The limits are explicit because
// root here may not raise them (runc fails setting RLIMIT_NPROC or
// NOFILE above the machine's), and removal never waits for a grace.

// RootfsBinaries are the programs a test container holds: what the host
// agent's deployment needs (sh, uname, id, mkdir, cat, sha256sum, chmod,
// mv, rm) and what the tests run.
var RootfsBinaries = []string{"bash", "sleep", "cat", "ls", "id", "env", "setsid", "uname", "sha256sum",
	"mkdir", "chmod", "mv", "rm", "head", "touch", "echo", "true", "readlink", "yes", "tr"}

// BuildRootfs makes dir a root file system holding RootfsBinaries, the
// given executables (at the same paths) and every library they load.
// /bin, /lib and /lib64 are links into /usr, /usr/bin/sh is bash, /tmp
// is world-writable and sticky, /root is root's home.
func BuildRootfs(dir string, extra ...string) error {
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64", "tmp", "root", "proc", "sys", "dev", "etc", "work"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(dir, "root"), 0o700); err != nil {
		return err
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}, {"usr/bin/sh", "bash"}} {
		if err := os.Symlink(l[1], filepath.Join(dir, l[0])); err != nil && !os.IsExist(err) {
			return err
		}
	}
	passwd := "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
	if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644); err != nil {
		return err
	}
	var files []string
	for _, b := range RootfsBinaries {
		p, err := exec.LookPath(b)
		if err != nil {
			return fmt.Errorf("rootfs: %s: %w", b, err)
		}
		files = append(files, p)
	}
	files = append(files, extra...)
	// The C.UTF-8 locale, which the helper's commands ask for.
	loc := "/usr/lib/locale/C.utf8"
	_ = filepath.WalkDir(loc, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			err = copyFile(p, filepath.Join(dir, p), 0o644)
		}
		return err
	})
	seen := map[string]bool{}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return err
		}
		dest := filepath.Join(dir, "usr/bin", filepath.Base(f))
		if filepath.IsAbs(f) && !strings.HasPrefix(f, "/usr/bin/") && !strings.HasPrefix(f, "/bin/") {
			dest = filepath.Join(dir, f)
		}
		if err := copyFile(real, dest, 0o755); err != nil {
			return err
		}
		libs, err := libraries(real)
		if err != nil {
			return err
		}
		for _, l := range libs {
			if seen[l] {
				continue
			}
			seen[l] = true
			lr, err := filepath.EvalSymlinks(l)
			if err != nil {
				return err
			}
			// /lib is a link to /usr/lib in the rootfs: put each library at
			// its path under /usr.
			p := strings.TrimPrefix(strings.TrimPrefix(l, "/usr"), "/")
			if err := copyFile(lr, filepath.Join(dir, "usr", p), 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// libraries lists the shared libraries ldd says exe loads, the
// interpreter included; none for a static executable.
func libraries(exe string) ([]string, error) {
	out, err := exec.Command("ldd", exe).Output()
	if err != nil {
		return nil, nil // static ("not a dynamic executable")
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}

func copyFile(src, dest string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dest + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// Podman runs podman with args and returns its stdout, or an error with
// its stderr.
func Podman(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// RunContainer starts a container named name on rootfs that sleeps
// until removed, with the limits runc may set here, the host's network
// (unless extra names another: a network of its own needs the host's
// cgroup file system bound in, as runc cannot mount one on this mixed
// cgroup machine) and work bind-mounted at /work. extra are more
// `podman run` options.
func RunContainer(ctx context.Context, name, rootfs, work string, extra ...string) error {
	args := []string{"run", "-d", "--name", name, "--runtime", "runc",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "-v", work + ":/work"}
	if !slices.Contains(extra, "--network") {
		args = append(args, "--network", "host")
	}
	args = append(append(args, extra...), "--rootfs", rootfs, "sleep", "infinity")
	_, err := Podman(ctx, args...)
	return err
}

// RemoveContainer removes name at once (no stop grace), whatever runs in
// it.
func RemoveContainer(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Podman(ctx, "rm", "-f", "-t", "0", "--", name)
	return err
}

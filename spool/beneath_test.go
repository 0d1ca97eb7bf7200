package spool

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/testsupport"
	"golang.org/x/sys/unix"
)

// eachOpenMode runs f with openat2, and again with the openat fallback
// that a kernel without openat2 gets.
func eachOpenMode(t *testing.T, f func(t *testing.T)) {
	for _, fallback := range []bool{false, true} {
		mode := "openat2"
		if fallback {
			mode = "openat"
		}
		t.Run(mode, func(t *testing.T) {
			was := noOpenat2.Load()
			noOpenat2.Store(fallback)
			defer noOpenat2.Store(was)
			f(t)
		})
	}
}

// stateUnder makes root/state with executions/ and returns the state
// directory; it lives below root so it can be renamed away and back.
func stateUnder(t *testing.T) (root, state string) {
	t.Helper()
	root = t.TempDir()
	state = filepath.Join(root, "state")
	if err := os.MkdirAll(filepath.Join(state, logDir), 0o700); err != nil {
		t.Fatal(err)
	}
	return root, state
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHardLinkRefused: a hard link planted in executions/ to a file
// elsewhere is never read, listed as readable, stated or retired.
func TestHardLinkRefused(t *testing.T) {
	t.Parallel()
	eachOpenMode(t, func(t *testing.T) {
		d := newDir(t)
		secret := filepath.Join(t.TempDir(), "secret")
		writeFile(t, secret, strings.Repeat("secret line\n", 20000))
		for _, f := range []string{"h.log", "hgz.log.gz"} {
			if err := os.Link(secret, filepath.Join(d.execDir, f)); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"executions/h.log", "executions/hgz.log"} {
			_, oerr := d.Open(name)
			_, rerr := d.Read(name, 0, 0)
			_, lerr := d.ReadLines(name, 1, 0)
			_, serr := d.Stat(name)
			_, gerr := d.Grep(context.Background(), []string{name}, regexp.MustCompile("secret"), GrepOptions{MaxMatches: 10})
			_, terr := d.Retire(name, RetireOptions{})
			for what, err := range map[string]error{"Open": oerr, "Read": rerr, "ReadLines": lerr, "Stat": serr, "Grep": gerr, "Retire": terr} {
				if fault.KindOf(err) != fault.Refused || !strings.Contains(err.Error(), "links") {
					t.Errorf("%s(%s) = %v; want refused for its links", what, name, err)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(d.execDir, "h.log.gz")); err == nil {
			t.Fatal("a hard-linked log was compressed")
		}
	})
}

// TestReplacedDirectoriesRefused: a state directory, or its executions/,
// replaced after the Dir was made (by another directory or a symbolic
// link) is refused, never read.
func TestReplacedDirectoriesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		what    string
		replace func(t *testing.T, root, state string)
	}{
		{"state directory by a directory", func(t *testing.T, root, state string) {
			must(t, os.Rename(state, filepath.Join(root, "old")))
			must(t, os.MkdirAll(filepath.Join(state, logDir), 0o700))
			writeFile(t, filepath.Join(state, logDir, "x.log"), "impostor\n")
		}},
		{"state directory by a link", func(t *testing.T, root, state string) {
			other := filepath.Join(root, "other")
			must(t, os.MkdirAll(filepath.Join(other, logDir), 0o700))
			writeFile(t, filepath.Join(other, logDir, "x.log"), "impostor\n")
			must(t, os.Rename(state, filepath.Join(root, "old")))
			must(t, os.Symlink(other, state))
		}},
		{"executions by a directory", func(t *testing.T, root, state string) {
			must(t, os.Rename(filepath.Join(state, logDir), filepath.Join(state, "old")))
			must(t, os.Mkdir(filepath.Join(state, logDir), 0o700))
			writeFile(t, filepath.Join(state, logDir, "x.log"), "impostor\n")
		}},
		{"executions by a link", func(t *testing.T, root, state string) {
			other := filepath.Join(root, "other")
			must(t, os.Mkdir(other, 0o700))
			writeFile(t, filepath.Join(other, "x.log"), "impostor\n")
			must(t, os.Rename(filepath.Join(state, logDir), filepath.Join(state, "old")))
			must(t, os.Symlink(other, filepath.Join(state, logDir)))
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			eachOpenMode(t, func(t *testing.T) {
				root, state := stateUnder(t)
				writeFile(t, filepath.Join(state, logDir, "x.log"), "genuine\n")
				d := NewDir(state)
				if r, err := d.Read("executions/x.log", 0, 0); err != nil || r.Text != "genuine\n" {
					t.Fatalf("before: %+v, %v", r, err)
				}
				tc.replace(t, root, state)
				_, oerr := d.Open("executions/x.log")
				_, serr := d.Stat("executions/x.log")
				_, gerr := d.Glob("executions/*.log")
				_, perr := d.ParseAddress("executions/x.log")
				_, rerr := d.Retire("executions/x.log", RetireOptions{})
				_, cerr := d.Create("y.log", 0)
				for what, err := range map[string]error{"Open": oerr, "Stat": serr, "Glob": gerr, "ParseAddress": perr, "Retire": rerr, "Create": cerr} {
					if fault.KindOf(err) != fault.Refused {
						t.Errorf("%s after the %s was replaced: %v; want refused", what, tc.what, err)
					}
				}
			})
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSwappedExecutionsNeverReadOutside swaps executions/ for a symbolic
// link to another directory, or for another directory, and back, on a
// goroutine of its own while readers read, stat and grep the log: every
// answer is the genuine log or an error, never the other directory's file.
func TestSwappedExecutionsNeverReadOutside(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"link", "directory"} {
		t.Run(by, func(t *testing.T) {
			eachOpenMode(t, func(t *testing.T) {
				swapRace(t, by)
			})
		})
	}
}

func swapRace(t *testing.T, by string) {
	root, state := stateUnder(t)
	const genuine = "genuine\n"
	exec := filepath.Join(state, logDir)
	writeFile(t, filepath.Join(exec, "x.log"), genuine)
	d := NewDir(state)

	other := filepath.Join(root, "other")
	must(t, os.Mkdir(other, 0o700))
	writeFile(t, filepath.Join(other, "x.log"), "outside!\n")
	standIn := filepath.Join(state, "stand-in")
	if by == "link" {
		must(t, os.Symlink(other, standIn))
	} else {
		must(t, os.Rename(other, standIn))
	}
	aside := filepath.Join(state, "aside")

	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, mv := range [][2]string{{exec, aside}, {standIn, exec}, {exec, standIn}, {aside, exec}} {
				if err := os.Rename(mv[0], mv[1]); err != nil {
					t.Error(err)
					return
				}
			}
			n++
		}
	}()

	const readers, reads = 4, 1500
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range readers {
		wg.Go(func() {
			re := regexp.MustCompile(".")
			for i := range reads {
				var text string
				var err error
				switch i % 3 {
				case 0:
					var r ReadResult
					r, err = d.Read("executions/x.log", 0, 0)
					text = r.Text
				case 1:
					var r ReadResult
					r, err = d.ReadLines("executions/x.log", 1, 0)
					text = r.Text
				default:
					var g GrepResult
					g, err = d.Grep(context.Background(), []string{"executions/x.log"}, re, GrepOptions{MaxMatches: 5})
					if err == nil && len(g.Matches) > 0 {
						text = g.Matches[0].Text + "\n"
					} else {
						text = genuine
					}
				}
				if err == nil && text != genuine {
					t.Errorf("read %q through a swapped %s/", text, logDir)
					return
				}
				if err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if k := fault.KindOf(err); k != fault.Refused && k != fault.NotFound {
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	n := <-swapped
	t.Logf("%d reads succeeded during %d swaps", ok, n)
	if r, err := d.Read("executions/x.log", 0, 0); err != nil || r.Text != genuine {
		t.Fatalf("after the swaps: %+v, %v", r, err)
	}
}

// TestRenderFileRefusesLinks: a log a previous helper left is rendered
// only when it is a regular file with one link in a directory reached
// without a link at its end.
func TestRenderFileRefusesLinks(t *testing.T) {
	t.Parallel()
	root, state := stateUnder(t)
	exec := filepath.Join(state, logDir)
	secret := filepath.Join(root, "secret")
	writeFile(t, secret, "secret\n")
	writeFile(t, filepath.Join(exec, "good.log"), "genuine\n")
	must(t, os.Link(secret, filepath.Join(exec, "hard.log")))
	must(t, os.Symlink(secret, filepath.Join(exec, "soft.log")))
	other := filepath.Join(root, "other")
	must(t, os.Mkdir(other, 0o700))
	writeFile(t, filepath.Join(other, "good.log"), "secret\n")
	must(t, os.Symlink(other, filepath.Join(state, "linked")))

	if o, err := RenderFile(filepath.Join(exec, "good.log"), 0, 8, 0); err != nil || o.Text != "genuine\n" {
		t.Fatalf("good log: %q, %v", o.Text, err)
	}
	for _, path := range []string{filepath.Join(exec, "hard.log"), filepath.Join(exec, "soft.log"), filepath.Join(state, "linked", "good.log")} {
		o, err := RenderFile(path, 0, 7, 0)
		if err == nil || strings.Contains(o.Text+err.Error(), "secret\n") {
			t.Errorf("RenderFile(%s) = %q, %v; want an error and no content", path, o.Text, err)
		}
	}
}

// TestCreateBeneath: a log is created 0600 whatever the umask, never over
// an existing file or through a planted link, and only as a plain name.
func TestCreateBeneath(t *testing.T) {
	t.Parallel()
	eachOpenMode(t, func(t *testing.T) {
		root, state := stateUnder(t)
		d := NewDir(state)
		old := unix.Umask(0o077)
		sp, err := d.Create("a.log", 0)
		unix.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		sp.Close()
		if r, err := d.Read("executions/a.log", 0, 0); err != nil || r.Text != "hello\n" {
			t.Fatalf("read back: %+v, %v", r, err)
		}
		if fi, err := os.Stat(filepath.Join(state, logDir, "a.log")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode: %v, %v", fi, err)
		}
		if _, err := d.Create("a.log", 0); err == nil {
			t.Fatal("created over an existing log")
		}
		secret := filepath.Join(root, "secret")
		writeFile(t, secret, "keep\n")
		must(t, os.Symlink(secret, filepath.Join(state, logDir, "b.log")))
		if _, err := d.Create("b.log", 0); err == nil {
			t.Fatal("created through a planted link")
		}
		if b, _ := os.ReadFile(secret); string(b) != "keep\n" {
			t.Fatalf("the link's target changed: %q", b)
		}
		for _, bad := range []string{"", ".", "..", "../x.log", "sub/x.log"} {
			if _, err := d.Create(bad, 0); fault.KindOf(err) != fault.InvalidParams {
				t.Errorf("Create(%q): %v, want invalid-params", bad, err)
			}
		}
	})
}

// A Create after the first names the unnamed file made ahead: a private
// file of one link in executions/; the name of one that exists is refused
// all the same.
func TestCreateNamesTheSpareMadeAhead(t *testing.T) {
	t.Parallel()
	_, state := stateUnder(t)
	d := NewDir(state)
	defer d.Close()
	spareReady := func() bool {
		d.spare.mu.Lock()
		defer d.spare.mu.Unlock()
		return d.spare.fd >= 0
	}
	first, err := d.Create("a.log", 0)
	must(t, err)
	first.Close()
	if !testsupport.Poll(10*time.Second, spareReady) {
		t.Fatal("no spare file was made after a Create")
	}
	if _, err := d.Create("a.log", 0); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("creating an existing log: %v", err)
	}
	if !testsupport.Poll(10*time.Second, spareReady) {
		t.Fatal("no spare file was made after a refused Create")
	}
	var made unix.Stat_t
	d.spare.mu.Lock()
	must(t, unix.Fstat(d.spare.fd, &made))
	d.spare.mu.Unlock()
	sp, err := d.Create("b.log", 0)
	must(t, err)
	if _, err := sp.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(state, logDir, "b.log"), &st))
	if st.Ino != made.Ino || st.Mode&0o777 != 0o600 || st.Nlink != 1 || st.Size != 6 {
		t.Errorf("the named spare: inode %d (the spare's %d), mode %o, %d links, %d bytes", st.Ino, made.Ino, st.Mode&0o777, st.Nlink, st.Size)
	}
	if !testsupport.Poll(10*time.Second, spareReady) {
		t.Fatal("no spare file was made after the second Create")
	}
	d.Close()
	if spareReady() {
		t.Errorf("a spare outlived Close")
	}
}

package remote

import (
	"bytes"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/test/sshd"
)

func TestPublishAppendsOnlyTheTail(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	root := t.TempDir()
	dest := filepath.Join(root, "art", "sess", "exec-1.log")
	first := bytes.Repeat([]byte("0123456789"), 10000)
	got, err := p.Publish(testCtx(t), target(""), dest, bytes.NewReader(first), int64(len(first)))
	if err != nil {
		t.Fatal(err)
	}
	if got != dest {
		t.Fatalf("published at %q, want %q", got, dest)
	}
	for _, d := range []string{filepath.Join(root, "art"), filepath.Join(root, "art", "sess")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want 0700", d, fi.Mode(), err)
		}
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, want 0600", dest, err)
	}
	inode := fi.Sys().(*syscall.Stat_t).Ino
	if n := p.published.Load(); n != int64(len(first)) {
		t.Fatalf("sent %d bytes, want %d", n, len(first))
	}
	// Mark the published head: a rewrite would undo the mark.
	f, err := os.OpenFile(dest, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), 0)
	f.Close()

	more := append(bytes.Clone(first), []byte("tail of the output\n")...)
	if _, err := p.Publish(testCtx(t), target(""), dest, bytes.NewReader(more), int64(len(more))); err != nil {
		t.Fatal(err)
	}
	if n := p.published.Load(); n != int64(len(more)) {
		t.Fatalf("sent %d bytes in all, want %d: only the tail the second time", n, len(more))
	}
	content, _ := os.ReadFile(dest)
	want := append([]byte("X"), more[1:]...)
	if !bytes.Equal(content, want) {
		t.Fatalf("remote content differs (len %d, want %d)", len(content), len(want))
	}
	fi, _ = os.Stat(dest)
	if fi.Sys().(*syscall.Stat_t).Ino != inode {
		t.Fatal("the file was replaced")
	}
	// Nothing new: nothing sent.
	if _, err := p.Publish(testCtx(t), target(""), dest, bytes.NewReader(more), int64(len(more))); err != nil {
		t.Fatal(err)
	}
	if n := p.published.Load(); n != int64(len(more)) {
		t.Fatalf("an unchanged source sent %d more bytes", n-int64(len(more)))
	}
}

func TestPublishRelativeIsUnderTheRemoteHome(t *testing.T) {
	t.Parallel()
	s := sshd.Start(t)
	p := newPool(t, s)
	u, _ := user.Current()
	rel := ".cache/mevedel-exec-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { os.RemoveAll(filepath.Join(u.HomeDir, rel)) })
	data := []byte("hello\n")
	got, err := p.Publish(testCtx(t), target(""), rel+"/s1/out.log", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(u.HomeDir, rel, "s1", "out.log"); got != want {
		t.Fatalf("published at %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, data) {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(u.HomeDir, rel)); fi.Mode().Perm() != 0o700 {
		t.Fatalf("created directory mode %v", fi.Mode())
	}
	// Same with "~/".
	got2, err := p.Publish(testCtx(t), target(""), "~/"+rel+"/s1/out.log", bytes.NewReader(data), int64(len(data)))
	if err != nil || got2 != got {
		t.Fatalf("~/ form: %q, %v", got2, err)
	}
}

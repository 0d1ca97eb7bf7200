package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHelloCarriesTheIncarnation(t *testing.T) {
	for _, inc := range []Incarnation{
		{Hostname: "build-1", BootID: "6f1c0b7e-0000-4000-8000-000000000001"},
		{Hostname: "", BootID: "b"},
		{},
	} {
		line := HelloLine(inc)
		if !strings.HasPrefix(line, Hello) || !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
			t.Fatalf("hello %q", line)
		}
		v, got := ParseHello(strings.TrimSuffix(strings.TrimPrefix(line, Hello), "\n"))
		if v != Version || got != inc {
			t.Fatalf("%q parsed as %q %+v, want %q %+v", line, v, got, Version, inc)
		}
	}
	// An agent of another version that says only its version is refused
	// by its version, not misread.
	if v, inc := ParseHello("0.9"); v != "0.9" || inc != (Incarnation{}) {
		t.Fatalf("old hello: %q %+v", v, inc)
	}
}

// The boot id comes from the kernel, or from the test hook's file,
// trimmed and made one word.
func TestReadIncarnation(t *testing.T) {
	inc := ReadIncarnation()
	if b, err := os.ReadFile(bootIDFile); err == nil && inc.BootID != strings.TrimSpace(string(b)) {
		t.Fatalf("boot id %q, the kernel says %q", inc.BootID, b)
	}
	if h, _ := os.Hostname(); inc.Hostname != h {
		t.Fatalf("hostname %q, want %q", inc.Hostname, h)
	}
	f := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(f, []byte("  a b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(BootIDFileVar, f)
	if got := ReadIncarnation().BootID; got != "a_b" {
		t.Fatalf("boot id from the hook's file: %q", got)
	}
}

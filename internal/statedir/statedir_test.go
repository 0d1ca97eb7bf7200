package statedir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/fault"
)

func TestNames(t *testing.T) {
	l := Layout{Root: "/s"}
	id := ExecutionID("ab12c", 7)
	for got, want := range map[string]string{
		id:                              "exec-ab12c-000007",
		LogName(id):                     "executions/exec-ab12c-000007.log",
		l.LogPath(id):                   "/s/executions/exec-ab12c-000007.log",
		LogAddress(id):                  "artifact://executions/exec-ab12c-000007.log",
		IDOf(LogName(id)):               id,
		PrefixOf(id):                    "ab12c",
		Tag(id):                         "MEVEDEL_EXEC_TAG=ab12c-exec-ab12c-000007",
		Tag("not-an-id"):                "",
		MonitorID("ab12c", 1):           "mon-ab12c-000001",
		DeliveryID("ab12c", 12):         "dlv-ab12c-000012",
		Layout{Root: "/s"}.Executions(): "/s/executions",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

func TestTakeIsPrivateExclusiveAndFresh(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	d, err := Take(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, d.Executions()} {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", dir, fi.Mode(), err)
		}
	}
	if _, err := Take(root); fault.KindOf(err) != fault.Conflict {
		t.Fatalf("a second holder: %v", err)
	}
	if err := os.WriteFile(d.LogPath(ExecutionID(d.Prefix, 1)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(); err != nil {
		t.Fatal(err)
	}
	// The next draw repeats the used prefix first: it must be passed over.
	draws := []string{d.Prefix, "zzzz9"}
	defer func(f func() string) { drawPrefix = f }(drawPrefix)
	drawPrefix = func() string { p := draws[0]; draws = draws[1:]; return p }
	d2, err := Take(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Release()
	if d2.Prefix != "zzzz9" {
		t.Fatalf("prefix %q, want the second draw: %q is used by a log", d2.Prefix, d.Prefix)
	}
}

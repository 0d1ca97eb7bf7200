package testsupport

import (
	"context"
	"fmt"
	"os/exec"
)

// helperPkg is built by import path, so the build works from any
// directory inside the module (a test's package directory, or the
// module root for the benchmark).
const helperPkg = "github.com/mevedel/mevedel-exec/cmd/mevedel-exec"

// BuildHelper builds the helper binary into out. Tests build it for
// testing: with the race detector, so every run also checks the helper's
// own goroutines, and with -tags strict, so an illegal state move panics
// (and the test that caused it fails). The benchmark builds it as shipped.
func BuildHelper(ctx context.Context, out string, forTests bool) error {
	args := []string{"build", "-o", out}
	if forTests {
		args = append(args, "-race", "-tags", "strict")
	}
	b, err := exec.CommandContext(ctx, "go", append(args, helperPkg)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("building the helper: %v\n%s", err, b)
	}
	return nil
}

// BuildPortServer builds the static TCP server of the forwarding tests
// (portserver/) to out: it runs in a test container too.
func BuildPortServer(ctx context.Context, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/mevedel/mevedel-exec/internal/testsupport/portserver")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the port server: %v\n%s", err, b)
	}
	return nil
}

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

// BuildHelper builds the helper binary into out. Tests build it with
// race, so every run also checks the helper's own goroutines; the
// benchmark builds it without.
func BuildHelper(ctx context.Context, out string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	b, err := exec.CommandContext(ctx, "go", append(args, helperPkg)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("building the helper: %v\n%s", err, b)
	}
	return nil
}

package agent

import (
	"os"
	"os/exec"
	"strings"

	"github.com/mevedel/mevedel-exec/process"
)

// A host's incarnation is its boot: a command the agent started lives no
// longer than the boot it started in, and after a reboot its pid and
// start time may name another process. The agent says which boot it runs
// in (and the host's name) in its hello, so the helper can tell a host
// that came back from one that was replaced.

// Incarnation is the host and boot an agent runs in.
type Incarnation struct {
	Hostname string
	BootID   string // the kernel's random boot id; "" when it cannot be read
}

// BootIDFileVar names a file the agent reads instead of the kernel's
// boot id: a test hook, set in the host's sessions by a test that makes
// its host look rebooted.
const BootIDFileVar = "MEVEDEL_EXEC_BOOT_ID_FILE"

const bootIDFile = "/proc/sys/kernel/random/boot_id"

// ReadIncarnation reads this host's incarnation.
func ReadIncarnation() Incarnation {
	file := bootIDFile
	if f := os.Getenv(BootIDFileVar); f != "" {
		file = f
	}
	var inc Incarnation
	if b, err := os.ReadFile(file); err == nil {
		inc.BootID = word(string(b))
	}
	if h, err := os.Hostname(); err == nil {
		inc.Hostname = word(h)
	}
	return inc
}

// word makes s one word of the hello line: trimmed, inner blanks
// replaced.
func word(s string) string {
	return strings.Join(strings.Fields(s), "_")
}

// HelloLine is the agent's first line: Hello, its version, the boot id
// and the host name ("-" for what is unknown).
func HelloLine(inc Incarnation) string {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	return Hello + Version + " " + dash(inc.BootID) + " " + dash(inc.Hostname) + "\n"
}

// ParseHello reads a hello line (after Hello, without the newline): the
// version, and the incarnation when the agent sent one.
func ParseHello(rest string) (version string, inc Incarnation) {
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", inc
	}
	undash := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	if len(f) >= 3 {
		inc = Incarnation{BootID: undash(f[1]), Hostname: undash(f[2])}
	}
	return f[0], inc
}

// Lacking returns the tools this host lacks: bash as the agent finds the
// shell of every command it starts, the others on the agent's own PATH
// (what sshd, sudo or the engine gave it), where its bwrap probe looks.
func Lacking(tools []string) []string {
	var lacks []string
	for _, t := range tools {
		var err error
		if t == "bash" {
			_, err = process.LookBash()
		} else {
			_, err = exec.LookPath(t)
		}
		if err != nil {
			lacks = append(lacks, t)
		}
	}
	return lacks
}

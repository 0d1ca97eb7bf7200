package process

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/mevedel/mevedel-exec/sandbox"
	"golang.org/x/sys/unix"
)

// maxRunOutput bounds what Run keeps of a program's stderr.
const maxRunOutput = 64 << 10

// Run runs a short program of the helper's own (a probe) to its end: the
// reaper owns every child, so exec.Cmd's Run and Wait cannot be used. It
// returns the program's stderr (at most 64 KiB) and an error unless it
// exited 0. After timeout its group is killed.
func Run(cmd *exec.Cmd, timeout time.Duration) ([]byte, error) {
	return run(cmd, timeout, false)
}

// ProbeSandbox probes the sandbox backend on this process's PATH, its
// programs run through the reaper within the probe's bound (the shielded
// one through the shim's shield, as a confined start's bwrap is).
func ProbeSandbox() sandbox.Probe {
	return sandbox.ProbeBubblewrap(os.Getenv("PATH"), InnerShim(), func(cmd *exec.Cmd, shield bool) ([]byte, error) {
		return run(cmd, sandbox.ProbeTimeout, shield)
	})
}

func run(cmd *exec.Cmd, timeout time.Duration, shield bool) ([]byte, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = pw
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &unix.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	c, _, err := spawn(cmd, "", spawnOpts{shield: shield})
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, err
	}
	read := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(&capped{r: pr, left: maxRunOutput})
		read <- b.Bytes()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = unix.Kill(-c.pid, unix.SIGKILL)
		c.wait()
		pr.Close()
		<-read
		return nil, fmt.Errorf("%s: no end after %v", filepath.Base(cmd.Path), timeout)
	}
	st := c.wait()
	// What the program left running may hold the pipe open: its output
	// is then cut at the bound.
	var out []byte
	select {
	case out = <-read:
	case <-t.C:
	}
	pr.Close()
	if st.Signaled() || st.ExitStatus() != 0 {
		return out, fmt.Errorf("%s: %s", filepath.Base(cmd.Path), exitText(st))
	}
	return out, nil
}

// capped reads r until left bytes were read, then drains the rest.
type capped struct {
	r    *os.File
	left int
}

func (c *capped) Read(p []byte) (int, error) {
	for c.left <= 0 {
		var sink [4096]byte
		if _, err := c.r.Read(sink[:]); err != nil {
			return 0, err
		}
	}
	n, err := c.r.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

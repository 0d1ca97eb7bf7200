package process

import (
	"os/exec"
)

// spawnConfined starts cmd inside spec's sandbox and resource group: the
// bubblewrap command line around the command, the cgroup trampoline
// around that, and a clone straight into a cgroup v2 group. Without
// either it is Spawn.
func spawnConfined(cmd *exec.Cmd, spec Spec) (*child, *Tree, error) {
	o := spawnOpts{beforeRun: spec.BeforeRun}
	if spec.Sandbox != nil {
		cmd.Path, cmd.Args = spec.Sandbox.Wrap(cmd.Path, cmd.Args)
		o.shield = spec.Sandbox.ShieldedByShim()
	}
	if spec.Resources != nil {
		cmd.Path, cmd.Args = spec.Resources.Wrap(cmd.Path, cmd.Args)
		if fd, ok := spec.Resources.CgroupFD(); ok {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	return spawn(cmd, spec.Tag, o)
}

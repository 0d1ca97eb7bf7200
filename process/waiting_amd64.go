package process

import "golang.org/x/sys/unix"

// The select and poll system calls that only some architectures have.
const (
	sysSelect = unix.SYS_SELECT
	sysPoll   = unix.SYS_POLL
)

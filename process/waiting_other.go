//go:build !amd64

package process

// Architectures without the old select and poll system calls (their libc
// uses pselect6 and ppoll).
const (
	sysSelect = -1
	sysPoll   = -1
)

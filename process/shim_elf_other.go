//go:build !amd64

package process

// No native shim on this architecture: the helper's own executable is the
// shim (see shim.go).
var subreaperCode []byte

const elfMachine = 0

// Package testsupport is what the tests and the benchmark share besides
// the client: one locked buffer that can be waited on, the build of the
// helper binary, and the few /proc questions tests ask (which processes
// of a test are left, a pid's state, waiting for a pid to be reaped).
// The /proc reading itself is package process's; this package only adds
// what tests need on top of it.
package testsupport

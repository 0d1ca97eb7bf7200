// Package process runs commands on this machine and knows their processes.
//
// It owns what is about processes rather than executions: the Runner and
// Process interfaces (package remote implements them for SSH hosts), the
// local runner (bash -c in its own process group, or a session on a pty),
// reading /proc (process table, start times, environments, the members of
// an execution's tree), the child subreaper that reaps adopted orphans
// without stealing os/exec's children, and the login-environment capture.
// It knows nothing of sessions, spools or the protocol.
package process

// Package process runs commands on this machine and knows their processes.
//
// It owns what is about processes rather than executions: the Runner and
// Process interfaces (package remote implements them for SSH hosts), the
// local runner (bash -c in its own process group, or a session on a pty),
// reading /proc (process table, start times, environments), the members of
// an execution (Tree: its group, recorded processes and their descendants,
// and its tag), the shim that makes a command's shell a child subreaper,
// the one reaper that collects every child's exit and attributes the
// orphans the helper adopts, and the login-environment capture. It knows
// nothing of sessions, spools or the protocol.
package process

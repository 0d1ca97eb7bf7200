// Package remote runs commands on SSH hosts named by TRAMP file names
// (/ssh:user@host#port:/path, any SSH method, hop chains /ssh:a|ssh:b:/path)
// and publishes files to them; and, under the same host agent over
// another stream (stream.go), as another user through sudo
// (/sudo:user@localhost:, /ssh:host|sudo::) or in a container
// (/podman:user@box:, /docker:user@box:).
//
// A Pool keeps one connection per (user, host, port), and per chain of
// hops one carried by the previous hop's connection, authenticated with
// the agent and the keys of ~/.ssh/config, its host key checked against
// known_hosts, kept alive with keepalive requests and dialled anew after a
// loss. Each command runs on its own exec channel in a process group of its
// own; a wrapper reports the group leader's pid and start time before the
// command's first byte, and that identity is checked on the host before
// any signal is sent. Probes and signals go through one control shell per
// connection, so they cost a round trip rather than a login; the probe
// that proves a command's end is made there as its leader exits. A
// pipe-mode command usually starts on a standby, a wrapper started ahead
// of time on its connection (standby.go). Hosts must be
// Linux (the identity comes from /proc) with bash, and the remote user's
// login shell must take POSIX quoting.
//
// The package knows nothing of executions or spools; package execution
// adapts it to its Runner.
package remote

package remote

import (
	"errors"
	"fmt"
)

// ErrUnavailable classifies every failure to reach a host or to keep talking
// to it: dial and handshake errors, authentication, host keys, a lost
// connection. The execution package answers it as `unavailable`.
var ErrUnavailable = errors.New("remote: host unavailable")

// ErrAmbiguous is returned by Signal when the leader's identity no longer
// matches and no survivor is proven to be ours: nothing was signalled.
var ErrAmbiguous = errors.New("remote: process identity is ambiguous; nothing signalled")

// errNotSSH is an operation that needs an SSH connection (the wrapper's
// control shell, a login shell) asked of a stream target.
var errNotSSH = errors.New("remote: not an SSH target")

func notSSH(r resolved, what string) error {
	return fmt.Errorf("remote: %s: %s needs an SSH connection, and this target has none: %w", r.Target, what, errNotSSH)
}

// HostKeyError is a host key that known_hosts does not vouch for.
type HostKeyError struct {
	HostPort    string // as looked up in known_hosts, e.g. "127.0.0.1:2222"
	Fingerprint string // ssh.FingerprintSHA256 of the key the host offered
	KeyType     string
	KnownHosts  string // the file consulted
	Changed     bool   // known_hosts holds another key for this host
	Revoked     bool   // the key is marked @revoked
}

func (e *HostKeyError) Error() string {
	switch {
	case e.Revoked:
		return fmt.Sprintf("remote: host key for %s is revoked in %s (%s %s)", e.HostPort, e.KnownHosts, e.KeyType, e.Fingerprint)
	case e.Changed:
		return fmt.Sprintf("remote: host key for %s has changed: known_hosts (%s) holds another key; the host offered %s %s", e.HostPort, e.KnownHosts, e.KeyType, e.Fingerprint)
	default:
		return fmt.Sprintf("remote: host key for %s is unknown in known_hosts (%s); the host offered %s %s", e.HostPort, e.KnownHosts, e.KeyType, e.Fingerprint)
	}
}

// Is makes errors.Is(err, ErrUnavailable) true for host key errors.
func (e *HostKeyError) Is(target error) bool { return target == ErrUnavailable }

// unavailable wraps err so that it is classified as ErrUnavailable while
// keeping its own text.
type unavailableError struct{ err error }

func (e unavailableError) Error() string    { return e.err.Error() }
func (e unavailableError) Unwrap() []error  { return []error{e.err, ErrUnavailable} }
func unavailable(err error) error           { return unavailableError{err} }
func unavailablef(f string, a ...any) error { return unavailable(fmt.Errorf(f, a...)) }

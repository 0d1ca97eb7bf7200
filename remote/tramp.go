package remote

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Target is a host reached over SSH and a path on it, as written in a TRAMP
// file name. Port 0 and an empty User mean "not given" until Resolve fills
// them in from ~/.ssh/config and the defaults.
type Target struct {
	User string
	Host string // an alias from ~/.ssh/config until resolved
	Port int
	// Path is the remote path: absolute, "~" or "~/..." (the remote home),
	// relative (to the remote home), or empty (the remote home itself).
	Path string
}

// String names the host as the facts' target field does:
// "ssh:user@host#port", with whatever parts are known.
func (t Target) String() string {
	var b strings.Builder
	b.WriteString("ssh:")
	if t.User != "" {
		b.WriteString(t.User)
		b.WriteByte('@')
	}
	if strings.Contains(t.Host, ":") {
		b.WriteString("[" + t.Host + "]")
	} else {
		b.WriteString(t.Host)
	}
	if t.Port != 0 {
		b.WriteByte('#')
		b.WriteString(strconv.Itoa(t.Port))
	}
	return b.String()
}

// addr is the host:port to dial.
func (t Target) addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// ErrNotSupported reports a TRAMP name whose method is not ssh, or a
// multi-hop name.
var ErrNotSupported = errors.New("remote: only /ssh: is supported")

// ParseTRAMP parses /ssh:user@host#port:/path and its shorter forms
// (/ssh:host:/path, /ssh:user@host:/path, /ssh:alias:). ok is false when
// name is not a TRAMP name at all (a local path). A TRAMP name is recognised
// the way Emacs does by default: an absolute name whose first component
// holds a colon.
func ParseTRAMP(name string) (t Target, ok bool, err error) {
	if !strings.HasPrefix(name, "/") {
		return Target{}, false, nil
	}
	first, _, _ := strings.Cut(name[1:], "/")
	if !strings.Contains(first, ":") {
		return Target{}, false, nil
	}
	method, rest, _ := strings.Cut(name[1:], ":")
	if strings.Contains(name, "|") {
		return Target{}, true, fmt.Errorf("%w: multi-hop name %q", ErrNotSupported, name)
	}
	if method != "ssh" {
		return Target{}, true, fmt.Errorf("%w (method %q in %q)", ErrNotSupported, method, name)
	}
	bad := func(why string) (Target, bool, error) {
		return Target{}, true, fmt.Errorf("remote: malformed TRAMP name %q: %s", name, why)
	}
	// The host part ends at the next colon, except inside [an:ipv6:address].
	var hostPart string
	if i := strings.IndexByte(rest, '['); i >= 0 && i < strings.IndexByte(rest+":", ':') {
		j := strings.IndexByte(rest, ']')
		if j < 0 {
			return bad("unclosed [")
		}
		k := strings.IndexByte(rest[j:], ':')
		if k < 0 {
			return bad("no ':' after the host")
		}
		hostPart, t.Path = rest[:j+k], rest[j+k+1:]
	} else {
		var found bool
		hostPart, t.Path, found = strings.Cut(rest, ":")
		if !found {
			return bad("no ':' after the host")
		}
	}
	if i := strings.LastIndexByte(hostPart, '@'); i >= 0 {
		t.User, hostPart = hostPart[:i], hostPart[i+1:]
		if t.User == "" {
			return bad("empty user")
		}
	}
	if i := strings.LastIndexByte(hostPart, '#'); i >= 0 {
		p, err := strconv.Atoi(hostPart[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return bad("port must be a number from 1 to 65535")
		}
		t.Port, hostPart = p, hostPart[:i]
	}
	if strings.HasPrefix(hostPart, "[") && strings.HasSuffix(hostPart, "]") {
		hostPart = hostPart[1 : len(hostPart)-1]
	}
	if hostPart == "" {
		return bad("empty host")
	}
	if strings.ContainsAny(hostPart, "[]@# \t/") || strings.ContainsAny(t.User, ":/ \t") {
		return bad("unexpected character in the user or host")
	}
	t.Host = hostPart
	return t, true, nil
}

package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Target is a host reached over SSH and a path on it, as written in a TRAMP
// file name. Port 0 and an empty User mean "not given" until Resolve fills
// them in from ~/.ssh/config and the defaults. It is comparable: the pool
// keys its caches by it.
type Target struct {
	// Method is the TRAMP method as written (ssh, scp, sshx, scpx, rsync);
	// empty means ssh. They are one SSH transport: the method says how
	// TRAMP copies files, not how the helper runs, so it never picks the
	// connection.
	Method string
	User   string
	Host   string // an alias from ~/.ssh/config until resolved
	Port   int
	// Via is the hops before the host, in TRAMP form ("ssh:a|ssh:me@b#22"),
	// empty for a host dialled directly. The host is dialled through the
	// last hop's connection, as ProxyJump would; once resolved, Via names
	// every hop as String does.
	Via string
	// Path is the remote path: absolute, "~" or "~/..." (the remote home),
	// relative (to the remote home), or empty (the remote home itself).
	Path string
}

// Methods are the TRAMP methods the helper runs over SSH, in the order
// errors and documents name them.
var Methods = []string{"ssh", "scp", "sshx", "scpx", "rsync"}

// StreamMethods are the TRAMP methods whose host agent runs over another
// byte stream than SSH (stream.go): sudo on this machine, a container's
// engine exec, a pod's kubectl exec.
var StreamMethods = []string{"sudo", "podman", "docker", "kubernetes"}

// allMethods names every method the helper runs, for errors.
func allMethods() string {
	return strings.Join(append(Methods[:len(Methods):len(Methods)], StreamMethods...), ", ")
}

// Support tiers of a target, as the facts name them.
const (
	TierSupported    = "supported"
	TierExperimental = "experimental"
)

// sshMethod reports whether a method is one of Methods.
func sshMethod(m string) bool { return slices.Contains(Methods, m) }

// MethodName is the method as the user wrote it ("ssh" when not given).
func (t Target) MethodName() string {
	if t.Method == "" {
		return "ssh"
	}
	return t.Method
}

// Tier is the support tier of the target's method: every SSH method,
// sudo and podman are supported; docker, tested only against Podman
// (never a Docker engine), and kubernetes, whose stream is tested only
// through an adapter onto Podman (never a cluster), are experimental.
func (t Target) Tier() string {
	if t.Method == "docker" || t.Method == "kubernetes" {
		return TierExperimental
	}
	return TierSupported
}

// String names the host as the facts' target field does:
// "ssh:user@host#port", with whatever parts are known, after the hops
// that lead to it ("ssh:a#22|ssh:me@b#22"). Every SSH method is written
// ssh: they share one transport. A stream target is written with its own
// method: "sudo:root@localhost", "podman:box", "docker:me@box",
// "kubernetes:main.web-0".
func (t Target) String() string {
	s := t.hop("ssh")
	if t.Stream() {
		s = t.hop(t.Method)
	}
	if t.Via != "" {
		return t.Via + "|" + s
	}
	return s
}

// hop writes the host as one hop of a TRAMP name, with method m.
func (t Target) hop(m string) string {
	var b strings.Builder
	b.WriteString(m)
	b.WriteByte(':')
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

// jump is the last hop before the host (t.Via must not be empty), itself
// with the hops before it.
func (t Target) jump() (Target, error) {
	j, _, err := ParseTRAMP("/" + t.Via + ":")
	return j, err
}

// addr is the host:port to dial.
func (t Target) addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// ErrNotSupported reports a TRAMP name whose method the helper does not
// run, or a hop chain with a hop that is not SSH (a stream method runs
// only as the one hop of a name).
var ErrNotSupported = errors.New("remote: method not supported")

// unsupported is an ErrNotSupported error with its own message.
type unsupported struct{ msg string }

func (e unsupported) Error() string        { return e.msg }
func (e unsupported) Is(target error) bool { return target == ErrNotSupported }

// ParseTRAMP parses /ssh:user@host#port:/path and its shorter forms
// (/ssh:host:/path, /ssh:user@host:/path, /ssh:alias:), the other SSH
// methods (/scp:, /sshx:, /scpx:, /rsync:) and hop chains
// (/ssh:a|ssh:b:/path). ok is false when name is not a TRAMP name at all
// (a local path). A TRAMP name is recognised the way Emacs does by
// default: an absolute name whose first component holds a colon. An error
// names the part that is wrong: the method, or which hop and why.
func ParseTRAMP(name string) (t Target, ok bool, err error) {
	if !strings.HasPrefix(name, "/") {
		return Target{}, false, nil
	}
	first, _, _ := strings.Cut(name[1:], "/")
	if !strings.Contains(first, ":") {
		return Target{}, false, nil
	}
	rest := name[1:]
	var via []string
	var prev Target
	for n := 1; ; n++ {
		hop, tail, more, err := parseHop(rest)
		switch {
		case hop.Stream() && (more || len(via) > 0 && hop.Container()):
			err = methodError{hop.Method} // only sudo, and only last
		case err == nil && hop.Method == "sudo" && len(via) > 0:
			// sudo on the SSH host before it: the same host, by default.
			if hop.Host == "" {
				hop.Host = prev.Host
			} else if hop.Host != prev.Host {
				err = fmt.Errorf("sudo runs on the host of the hop before it (%q), not on %q", prev.Host, hop.Host)
			}
		case err == nil && hop.Method == "sudo" && !localName(hop.Host):
			err = fmt.Errorf("sudo runs on this machine, and %q is not this machine's name (sudo on another host goes through an SSH hop: /ssh:%s|sudo:%s:)", hop.Host, hop.Host, hop.Host)
		}
		if err != nil {
			return Target{}, true, hopError(name, n, more || len(via) > 0, rest, err)
		}
		prev = hop
		if !more {
			hop.Via = strings.Join(via, "|")
			hop.Path = tail
			return hop, true, nil
		}
		via = append(via, hop.hop(hop.MethodName()))
		rest = tail
	}
}

// hopError says what is wrong with hop n of name; chained says whether
// name has more than one hop, so the hop must be named.
func hopError(name string, n int, chained bool, rest string, err error) error {
	var m methodError
	if errors.As(err, &m) {
		if chained {
			return unsupported{fmt.Sprintf("remote: hop %d of %q uses method %q: a hop chain runs over SSH only (%s)", n, name, m.method, strings.Join(Methods, ", "))}
		}
		return unsupported{fmt.Sprintf("remote: method %q of %q is not supported: the helper runs %s names", m.method, name, allMethods())}
	}
	if chained {
		part, _, _ := strings.Cut(rest, "|")
		return fmt.Errorf("remote: malformed TRAMP name %q: hop %d (%q): %w", name, n, part, err)
	}
	return fmt.Errorf("remote: malformed TRAMP name %q: %w", name, err)
}

// methodError is a hop whose method is not an SSH one.
type methodError struct{ method string }

func (e methodError) Error() string { return fmt.Sprintf("method %q", e.method) }

// parseHop parses one hop, "method:user@host#port", from the front of s.
// It ends at "|" (more is true, tail the next hops) or at ":" (tail is
// the path).
func parseHop(s string) (t Target, tail string, more bool, err error) {
	method, after, found := strings.Cut(s, ":")
	switch {
	case s == "" || s[0] == '|':
		return Target{}, "", false, errors.New("empty hop")
	case strings.ContainsAny(method, "|/"):
		return Target{}, "", false, fmt.Errorf("malformed method %q", method)
	case !found:
		return Target{}, "", false, errors.New("no ':' after the method")
	case method == "":
		return Target{}, "", false, errors.New("empty method")
	}
	// The host part ends at the next ':' or '|', except inside
	// [an:ipv6:address].
	end, bracket := -1, false
	for i := 0; i < len(after) && end < 0; i++ {
		switch c := after[i]; {
		case c == '[':
			bracket = true
		case c == ']':
			bracket = false
		case !bracket && (c == ':' || c == '|'):
			end = i
		}
	}
	more = end >= 0 && after[end] == '|'
	switch {
	case !sshMethod(method) && !streamMethod(method):
		return Target{}, "", more, methodError{method}
	case end < 0 && bracket:
		return Target{}, "", false, errors.New("unclosed [")
	case end < 0:
		return Target{}, "", false, errors.New("no ':' after the host")
	}
	t.Method = method
	hostPart, tail := after[:end], after[end+1:]
	if i := strings.LastIndexByte(hostPart, '@'); i >= 0 {
		t.User, hostPart = hostPart[:i], hostPart[i+1:]
		if t.User == "" {
			return Target{}, "", more, errors.New("empty user")
		}
	}
	if i := strings.LastIndexByte(hostPart, '#'); i >= 0 {
		p, err := strconv.Atoi(hostPart[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return Target{}, "", more, errors.New("port must be a number from 1 to 65535")
		}
		t.Port, hostPart = p, hostPart[:i]
	}
	if strings.HasPrefix(hostPart, "[") && strings.HasSuffix(hostPart, "]") {
		hostPart = hostPart[1 : len(hostPart)-1]
	}
	if t.Stream() {
		err := t.checkStream(hostPart)
		t.Host = hostPart
		return t, tail, more, err
	}
	if hostPart == "" {
		return Target{}, "", more, errors.New("empty host")
	}
	if strings.ContainsAny(hostPart, "[]@# \t/") || strings.ContainsAny(t.User, ":/ \t") {
		return Target{}, "", more, errors.New("unexpected character in the user or host")
	}
	t.Host = hostPart
	return t, tail, more, nil
}

// streamMethod reports whether a method is one of StreamMethods.
func streamMethod(m string) bool { return slices.Contains(StreamMethods, m) }

// Stream reports whether the target's host agent runs over a stream of
// its own (sudo, a container engine) instead of SSH.
func (t Target) Stream() bool { return streamMethod(t.Method) }

// Container reports whether the target is a container of an engine or
// of a Kubernetes pod.
func (t Target) Container() bool {
	return t.Method == "podman" || t.Method == "docker" || t.Method == "kubernetes"
}

// pod splits a kubernetes host, CONTAINER.POD or POD, as TRAMP does: at
// its last '.'. An empty container means the pod's default one.
func (t Target) pod() (pod, container string) {
	i := strings.LastIndexByte(t.Host, '.')
	if i < 0 {
		return t.Host, ""
	}
	return t.Host[i+1:], t.Host[:i]
}

// checkStream checks the host part (and user, port) of a stream hop:
// sudo runs on this machine only; a container is named as its engine
// names it, never as an option.
func (t Target) checkStream(host string) error {
	if t.Port != 0 {
		return fmt.Errorf("a port has no meaning for method %q", t.Method)
	}
	if t.User != "" && !safeName(t.User) {
		return fmt.Errorf("malformed user %q", t.User)
	}
	if t.Method == "sudo" {
		if host != "" && !safeName(host) && !localName(host) {
			return fmt.Errorf("malformed host %q", host)
		}
		return nil // which host it may be, ParseTRAMP says
	}
	if t.Method == "kubernetes" {
		return checkPod(t.User, host)
	}
	if host == "" {
		return errors.New("empty container name")
	}
	if !safeName(host) {
		return fmt.Errorf("malformed container name %q", host)
	}
	return nil
}

// checkPod checks a kubernetes hop: kubectl exec has no user to run as,
// and a Kubernetes container's name has no '.', so the last one parts it
// from the pod's.
func checkPod(user, host string) error {
	if user != "" {
		return fmt.Errorf("a user (%q) has no meaning for method \"kubernetes\": kubectl exec runs as the container's own user", user)
	}
	pod, container := Target{Host: host}.pod()
	switch {
	case pod == "":
		return errors.New("empty pod name")
	case !safeName(pod):
		return fmt.Errorf("malformed pod name %q", pod)
	case container == "" && strings.Contains(host, "."):
		return errors.New("empty container name before the pod's")
	case container != "" && (!safeName(container) || strings.Contains(container, ".")):
		return fmt.Errorf("malformed container name %q (a container of a pod is named CONTAINER.POD, and its name has no '.')", container)
	}
	return nil
}

// safeName is a user or container name that cannot be read as an option
// or break out of an argument: a letter, digit or '_' first, then those
// and '.' and '-'.
func safeName(s string) bool {
	for i, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || i > 0 && (c == '.' || c == '-')
		if !ok {
			return false
		}
	}
	return s != ""
}

// localName reports whether host names this machine: empty (TRAMP's
// /sudo::), localhost, or its host name.
func localName(host string) bool {
	if host == "" || host == "localhost" || host == "127.0.0.1" || host == "::1" {
		return true
	}
	h, err := os.Hostname()
	return err == nil && host == h
}

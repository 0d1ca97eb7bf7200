package remote

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTRAMP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		want    Target
		ok      bool
		wantErr string // substring; "" for no error
	}{
		{name: "/home/me/src", ok: false},
		{name: "relative/path", ok: false},
		{name: "/", ok: false},
		{name: "/tmp/a:b", ok: false}, // the colon is not in the first component
		{name: "/ssh:host:/srv/app", ok: true, want: Target{Method: "ssh", Host: "host", Path: "/srv/app"}},
		{name: "/ssh:me@host:/srv", ok: true, want: Target{Method: "ssh", User: "me", Host: "host", Path: "/srv"}},
		{name: "/ssh:me@host#2222:/srv/x y", ok: true, want: Target{Method: "ssh", User: "me", Host: "host", Port: 2222, Path: "/srv/x y"}},
		{name: "/ssh:alias:", ok: true, want: Target{Method: "ssh", Host: "alias"}},
		{name: "/ssh:alias:~", ok: true, want: Target{Method: "ssh", Host: "alias", Path: "~"}},
		{name: "/ssh:alias:~/proj", ok: true, want: Target{Method: "ssh", Host: "alias", Path: "~/proj"}},
		{name: "/ssh:alias:proj", ok: true, want: Target{Method: "ssh", Host: "alias", Path: "proj"}},
		{name: "/ssh:host#22:/a:b", ok: true, want: Target{Method: "ssh", Host: "host", Port: 22, Path: "/a:b"}},
		{name: "/ssh:me@[::1]#2222:/srv", ok: true, want: Target{Method: "ssh", User: "me", Host: "::1", Port: 2222, Path: "/srv"}},
		{name: "/ssh:[fe80::1]:/", ok: true, want: Target{Method: "ssh", Host: "fe80::1", Path: "/"}},
		{name: "/ssh:me@host.example.com:/", ok: true, want: Target{Method: "ssh", User: "me", Host: "host.example.com", Path: "/"}},
		// The other SSH methods: one transport, the method kept as written.
		{name: "/scp:host:/srv", ok: true, want: Target{Method: "scp", Host: "host", Path: "/srv"}},
		{name: "/sshx:me@host#22:~", ok: true, want: Target{Method: "sshx", User: "me", Host: "host", Port: 22, Path: "~"}},
		{name: "/scpx:host:", ok: true, want: Target{Method: "scpx", Host: "host"}},
		{name: "/rsync:[::1]#2:/x", ok: true, want: Target{Method: "rsync", Host: "::1", Port: 2, Path: "/x"}},
		// Hop chains: every hop but the last is Via, in TRAMP form.
		{name: "/ssh:a|ssh:b:/srv", ok: true, want: Target{Method: "ssh", Host: "b", Via: "ssh:a", Path: "/srv"}},
		{name: "/ssh:me@a#2|scp:u@[::1]#3|sshx:c:/p|q", ok: true,
			want: Target{Method: "sshx", Host: "c", Via: "ssh:me@a#2|scp:u@[::1]#3", Path: "/p|q"}},
		{name: "/ssh:host:/a|b", ok: true, want: Target{Method: "ssh", Host: "host", Path: "/a|b"}},
		// Stream methods: sudo on this machine, a container's engine.
		{name: "/sudo::/etc", ok: true, want: Target{Method: "sudo", Path: "/etc"}},
		{name: "/sudo::", ok: true, want: Target{Method: "sudo"}},
		{name: "/sudo:me@localhost:/x", ok: true, want: Target{Method: "sudo", User: "me", Host: "localhost", Path: "/x"}},
		{name: "/podman:box:/srv", ok: true, want: Target{Method: "podman", Host: "box", Path: "/srv"}},
		{name: "/podman:65534@box:", ok: true, want: Target{Method: "podman", User: "65534", Host: "box"}},
		{name: "/docker:me@my.box_1:/a|b", ok: true, want: Target{Method: "docker", User: "me", Host: "my.box_1", Path: "/a|b"}},
		// A pod, or a container of it (TRAMP's CONTAINER.POD, parted at
		// the last '.'), the host kept as written.
		{name: "/kubernetes:web-0:/srv", ok: true, want: Target{Method: "kubernetes", Host: "web-0", Path: "/srv"}},
		{name: "/kubernetes:main.web-0:", ok: true, want: Target{Method: "kubernetes", Host: "main.web-0"}},
		// What is refused names the method, the part or the hop.
		{name: "/adb:phone:/", ok: true, wantErr: `method "adb" of "/adb:phone:/" is not supported: the helper runs ssh, scp, sshx, scpx, rsync, sudo, podman, docker, kubernetes names`},
		{name: "/kubernetes::/", ok: true, wantErr: "empty pod name"},
		{name: "/kubernetes:main.:/", ok: true, wantErr: "empty pod name"},
		{name: "/kubernetes:.web-0:/", ok: true, wantErr: "empty container name before the pod's"},
		{name: "/kubernetes:-web:/", ok: true, wantErr: `malformed pod name "-web"`},
		{name: "/kubernetes:a.b.web:/", ok: true, wantErr: `malformed container name "a.b"`},
		{name: "/kubernetes:-c.web:/", ok: true, wantErr: `malformed container name "-c"`},
		{name: "/kubernetes:me@web:/", ok: true, wantErr: `a user ("me") has no meaning for method "kubernetes"`},
		{name: "/kubernetes:web#80:/", ok: true, wantErr: `a port has no meaning for method "kubernetes"`},
		{name: "/ssh:a|kubernetes:web:/", ok: true, wantErr: `hop 2 of "/ssh:a|kubernetes:web:/" uses method "kubernetes": a hop chain runs over SSH only`},
		{name: "/sudo:me@elsewhere.example:/", ok: true, wantErr: `sudo runs on this machine, and "elsewhere.example" is not this machine's name (sudo on another host goes through an SSH hop: /ssh:elsewhere.example|sudo:elsewhere.example:)`},
		// sudo on an SSH host: the last hop, on the host before it.
		{name: "/ssh:a|sudo::/srv", ok: true, want: Target{Method: "sudo", Host: "a", Via: "ssh:a", Path: "/srv"}},
		{name: "/ssh:me@a#2|sudo:root@a:/x", ok: true, want: Target{Method: "sudo", User: "root", Host: "a", Via: "ssh:me@a#2", Path: "/x"}},
		{name: "/ssh:a|sudo:b:/srv", ok: true, wantErr: `hop 2 ("sudo:b:/srv"): sudo runs on the host of the hop before it ("a"), not on "b"`},
		{name: "/ssh:a|podman:box:/", ok: true, wantErr: `hop 2 of "/ssh:a|podman:box:/" uses method "podman": a hop chain runs over SSH only`},
		{name: "/sudo:-u@localhost:/", ok: true, wantErr: `malformed user "-u"`},
		{name: "/podman::/", ok: true, wantErr: "empty container name"},
		{name: "/podman:--rm:/", ok: true, wantErr: `malformed container name "--rm"`},
		{name: "/docker:box#2:/", ok: true, wantErr: `a port has no meaning for method "docker"`},
		{name: "/ssh:a|docker:b|ssh:c:/", ok: true, wantErr: `hop 2 of "/ssh:a|docker:b|ssh:c:/" uses method "docker"`},
		{name: "/sudo:a|ssh:b:/", ok: true, wantErr: `hop 1 of "/sudo:a|ssh:b:/" uses method "sudo"`},
		{name: "/kubernetes:a|ssh:b:/", ok: true, wantErr: `hop 1 of "/kubernetes:a|ssh:b:/" uses method "kubernetes"`},
		{name: "/ssh:a|ssh:b#0:/", ok: true, wantErr: `hop 2 ("ssh:b#0:/"): port must be`},
		{name: "/ssh:a#x|ssh:b:/", ok: true, wantErr: `hop 1 ("ssh:a#x"): port must be`},
		{name: "/ssh:a|ssh::/", ok: true, wantErr: `hop 2 ("ssh::/"): empty host`},
		{name: "/ssh:a|", ok: true, wantErr: `hop 2 (""): empty hop`},
		{name: "/ssh:a|b", ok: true, wantErr: `hop 2 ("b"): no ':' after the method`},
		{name: "/ssh:a|:b:/", ok: true, wantErr: `hop 2 (":b:/"): empty method`},
		{name: "/ssh:a||ssh:b:/", ok: true, wantErr: `hop 2 (""): empty hop`},
		{name: "/:host:/", ok: true, wantErr: "empty method"},
		{name: "/ssh:host", ok: true, wantErr: "no ':' after the host"},
		{name: "/ssh::/srv", ok: true, wantErr: "empty host"},
		{name: "/ssh:@host:/", ok: true, wantErr: "empty user"},
		{name: "/ssh:host#:/", ok: true, wantErr: "port"},
		{name: "/ssh:host#99999:/", ok: true, wantErr: "port"},
		{name: "/ssh:host#x:/", ok: true, wantErr: "port"},
		{name: "/ssh:[::1:/", ok: true, wantErr: "unclosed"},
	}
	for _, tt := range tests {
		got, ok, err := ParseTRAMP(tt.name)
		if ok != tt.ok {
			t.Errorf("ParseTRAMP(%q): ok = %v, want %v", tt.name, ok, tt.ok)
			continue
		}
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseTRAMP(%q): error %v, want one containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTRAMP(%q): %v", tt.name, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseTRAMP(%q) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	for _, name := range []string{"/adb:h:/", "/ssh:a|podman:b:/", "/sudo:a|ssh:b:/", "/ssh:a|kubernetes:b:/"} {
		if _, _, err := ParseTRAMP(name); !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s is not classified ErrNotSupported: %v", name, err)
		}
	}
	if _, _, err := ParseTRAMP("/ssh:h#0:/"); errors.Is(err, ErrNotSupported) {
		t.Errorf("a malformed name is classified ErrNotSupported: %v", err)
	}
}

func TestTargetString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		t    Target
		want string
	}{
		{Target{User: "me", Host: "h", Port: 22}, "ssh:me@h#22"},
		{Target{Host: "h"}, "ssh:h"},
		{Target{User: "me", Host: "::1", Port: 2222, Path: "/x"}, "ssh:me@[::1]#2222"},
		{Target{Method: "scp", Host: "h", Port: 22}, "ssh:h#22"},
		{Target{Method: "sshx", Host: "b", Via: "ssh:me@a#22", Path: "/x"}, "ssh:me@a#22|ssh:b"},
		{Target{Method: "sudo", User: "root", Host: "localhost", Path: "/x"}, "sudo:root@localhost"},
		{Target{Method: "podman", Host: "box"}, "podman:box"},
		{Target{Method: "docker", User: "me", Host: "box"}, "docker:me@box"},
		{Target{Method: "kubernetes", Host: "main.web-0", Path: "/x"}, "kubernetes:main.web-0"},
	} {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.t, got, tt.want)
		}
	}
}

// A kubernetes target is its pod and container parted as TRAMP parts
// them, and experimental.
func TestKubernetesPod(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ host, pod, container string }{
		{"web-0", "web-0", ""},
		{"main.web-0", "web-0", "main"},
	} {
		tg := Target{Method: "kubernetes", Host: tt.host}
		if pod, c := tg.pod(); pod != tt.pod || c != tt.container {
			t.Errorf("%q: pod %q container %q, want %q %q", tt.host, pod, c, tt.pod, tt.container)
		}
		if tg.Tier() != TierExperimental || !tg.Container() || !tg.Stream() {
			t.Errorf("%q: tier %q, container %v, stream %v", tt.host, tg.Tier(), tg.Container(), tg.Stream())
		}
	}
}

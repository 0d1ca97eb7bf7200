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
		{name: "/ssh:host:/srv/app", ok: true, want: Target{Host: "host", Path: "/srv/app"}},
		{name: "/ssh:me@host:/srv", ok: true, want: Target{User: "me", Host: "host", Path: "/srv"}},
		{name: "/ssh:me@host#2222:/srv/x y", ok: true, want: Target{User: "me", Host: "host", Port: 2222, Path: "/srv/x y"}},
		{name: "/ssh:alias:", ok: true, want: Target{Host: "alias"}},
		{name: "/ssh:alias:~", ok: true, want: Target{Host: "alias", Path: "~"}},
		{name: "/ssh:alias:~/proj", ok: true, want: Target{Host: "alias", Path: "~/proj"}},
		{name: "/ssh:alias:proj", ok: true, want: Target{Host: "alias", Path: "proj"}},
		{name: "/ssh:host#22:/a:b", ok: true, want: Target{Host: "host", Port: 22, Path: "/a:b"}},
		{name: "/ssh:me@[::1]#2222:/srv", ok: true, want: Target{User: "me", Host: "::1", Port: 2222, Path: "/srv"}},
		{name: "/ssh:[fe80::1]:/", ok: true, want: Target{Host: "fe80::1", Path: "/"}},
		{name: "/ssh:me@host.example.com:/", ok: true, want: Target{User: "me", Host: "host.example.com", Path: "/"}},
		{name: "/scp:host:/srv", ok: true, wantErr: "only /ssh: is supported"},
		{name: "/docker:box:/", ok: true, wantErr: "only /ssh: is supported"},
		{name: "/sudo::/etc", ok: true, wantErr: "only /ssh: is supported"},
		{name: "/ssh:a|ssh:b:/srv", ok: true, wantErr: "multi-hop"},
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
	if _, _, err := ParseTRAMP("/scp:h:/"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("a /scp: name is not classified ErrNotSupported: %v", err)
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
	} {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.t, got, tt.want)
		}
	}
}

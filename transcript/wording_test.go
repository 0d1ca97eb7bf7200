package transcript

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func code(n int) *int { return &n }

func TestBreadcrumbWording(t *testing.T) {
	tests := []struct {
		name           string
		label, command string
		status         string
		exitCode       *int
		signal         string
		want           string
	}{
		{"completed", "Run tests", "make test", "completed", code(0), "",
			`● Background command "Run tests" completed (exit code 0)`},
		{"failed with code", "Run tests", "make test", "failed", code(2), "",
			`● Background command "Run tests" failed (exit code 2)`},
		{"failed with signal", "Run tests", "make test", "failed", nil, "SIGSEGV",
			`● Background command "Run tests" failed (signal SIGSEGV)`},
		{"code wins over signal", "Run tests", "", "failed", code(137), "SIGKILL",
			`● Background command "Run tests" failed (exit code 137)`},
		{"failed without evidence", "Run tests", "", "failed", nil, "",
			`● Background command "Run tests" failed`},
		{"stopped is neutral", "Run tests", "", "stopped", code(143), "SIGTERM",
			`● Background command "Run tests" stopped`},
		{"timed out", "Run tests", "", "timed-out", nil, "SIGTERM",
			`● Background command "Run tests" timed out`},
		{"lost", "Run tests", "", "lost", nil, "",
			`● Background command "Run tests" lost (the helper restarted before it ended)`},
		{"label falls back to command", "", "go test ./...", "completed", code(0), "",
			`● Background command "go test ./..." completed (exit code 0)`},
		{"blank label falls back to command", " \n\t", "sleep 5", "stopped", nil, "",
			`● Background command "sleep 5" stopped`},
		{"no name at all", "", "", "completed", code(0), "",
			`● Background command completed (exit code 0)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Breadcrumb(tt.label, tt.command, tt.status, tt.exitCode, tt.signal)
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestBreadcrumbSanitises(t *testing.T) {
	tests := []struct {
		name, command, want string
	}{
		{"newlines collapse", "make\n\n  test\r\nall",
			`● Background command "make test all" completed`},
		{"control and format characters", "a\x00\x1b[31mb\u202ec\u2028d\x7f",
			`● Background command "a [31mb c d" completed`},
		{"quotes cannot close the name", `echo "done" \`,
			`● Background command "echo \"done\" \\" completed`},
		{"invalid utf-8", "a\xffb",
			`● Background command "a` + "\uFFFD" + `b" completed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Breadcrumb("", tt.command, "completed", nil, "")
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	// A signal name is cleaned too: it is structured, but still not trusted.
	if got, want := Breadcrumb("x", "", "failed", nil, "SIG\nINT\x1b"), `● Background command "x" failed (signal SIG INT)`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBreadcrumbTruncates(t *testing.T) {
	long := strings.Repeat("é", 200)
	got := Breadcrumb("", long, "completed", code(0), "")
	name := strings.TrimSuffix(strings.TrimPrefix(got, `● Background command "`), `" completed (exit code 0)`)
	if n := utf8.RuneCountInString(name); n != maxNameRunes {
		t.Errorf("name has %d runes, want %d: %q", n, maxNameRunes, name)
	}
	if !strings.HasSuffix(name, "…") || !strings.HasPrefix(name, "éé") {
		t.Errorf("name %q: want the start of the command and an ellipsis", name)
	}
	// Exactly the limit is not cut; one more is.
	exact := strings.Repeat("x", maxNameRunes)
	if got := Breadcrumb(exact, "", "stopped", nil, ""); !strings.Contains(got, `"`+exact+`"`) {
		t.Errorf("a name of exactly %d runes was changed: %q", maxNameRunes, got)
	}
	// The cut does not leave a space before the ellipsis.
	spaced := strings.Repeat("x", maxNameRunes-2) + " yyyy"
	if got := Breadcrumb(spaced, "", "stopped", nil, ""); !strings.Contains(got, strings.Repeat("x", maxNameRunes-2)+`…"`) {
		t.Errorf("got %q", got)
	}
}

func TestNoticeWording(t *testing.T) {
	tests := []struct {
		name  string
		attrs map[string]any
		want  string
	}{
		{"forwarded completion", map[string]any{
			"kind": "EXECUTION", "owner": "/root/sub", "label": "build", "command": "make",
			"status": "completed", "exitCode": 0,
		}, `● Command "build" from /root/sub completed (exit code 0)`},
		{"forwarded failure by signal, command as name", map[string]any{
			"kind": "EXECUTION", "owner": "/root/sub", "command": "./server --port 8080",
			"status": "failed", "signal": "SIGABRT",
		}, `● Command "./server --port 8080" from /root/sub failed (signal SIGABRT)`},
		{"monitor plural", map[string]any{
			"kind": "MONITOR_TERMINAL", "label": "ticker", "status": "stopped", "events": 2,
		}, `● Monitor "ticker" stopped · 2 events`},
		{"monitor singular", map[string]any{
			"kind": "MONITOR_TERMINAL", "label": "ticker", "status": "stopped", "events": 1,
		}, `● Monitor "ticker" stopped · 1 event`},
		{"monitor with no events counted", map[string]any{
			"kind": "MONITOR_TERMINAL", "label": "ticker", "status": "timed-out",
		}, `● Monitor "ticker" timed out · 0 events`},
		{"monitor suppressed and reason", map[string]any{
			"kind": "MONITOR_TERMINAL", "command": "tail -f log", "status": "failed", "exitCode": 1,
			"events": 12, "suppressed": 5, "reason": "session\nclosed",
		}, `● Monitor "tail -f log" failed (exit code 1) · 12 events · 5 suppressed · session closed`},
		{"zero suppressed is not shown", map[string]any{
			"kind": "MONITOR_TERMINAL", "label": "m", "status": "stopped", "events": 3, "suppressed": 0,
		}, `● Monitor "m" stopped · 3 events`},
		{"numbers as decoded JSON", map[string]any{
			"kind": "MONITOR_TERMINAL", "label": "m", "status": "completed", "exitCode": float64(0),
			"events": float64(1), "suppressed": json.Number("7"),
		}, `● Monitor "m" completed (exit code 0) · 1 event · 7 suppressed`},
		{"unexpected types are left out", map[string]any{
			"kind": "EXECUTION", "label": 42, "command": "ls", "owner": []string{"x"},
			"status": "failed", "exitCode": "2",
		}, `● Command "ls" failed`},
		{"spoofing attrs are cleaned", map[string]any{
			"kind": "EXECUTION", "owner": "/root/a\n● Background command", "label": "x\" completed\n",
			"status": "stopped",
		}, `● Command "x\" completed" from /root/a ● Background command stopped`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Notice(tt.attrs); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestWordingIsOneLine(t *testing.T) {
	nasty := "a\r\nb\u0085c\u2029d\te\vf\x00"
	lines := []string{
		Breadcrumb(nasty, nasty, nasty, nil, nasty),
		Notice(map[string]any{"kind": nasty, "owner": nasty, "label": nasty, "status": nasty, "signal": nasty, "reason": nasty}),
	}
	for _, l := range lines {
		for _, r := range l {
			if r < ' ' || r == 0x7f || r == 0x85 || r == '\u2028' || r == '\u2029' {
				t.Errorf("%q contains %U", l, r)
			}
		}
	}
}

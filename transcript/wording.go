package transcript

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// The one-line texts of breadcrumbs and notices. They are built only from
// structured attributes, never from a command's output, which could spoof
// a line; even a label or a command is cleaned so it cannot break the line
// or its quotes.

const (
	maxNameRunes  = 60 // a label or command in quotes
	maxFieldRunes = 60 // an owner, a reason
	maxWordRunes  = 24 // a status or signal name
)

// Breadcrumb is the completion line of a yielded execution, named by its
// label or else its command:
//
//	● Background command "Run tests" completed (exit code 0)
//
// status is completed, failed, stopped, timed-out or lost. A failure shows
// its exit code, or its signal when there is no code; a stop is neutral and
// shows neither.
func Breadcrumb(label, command, status string, exitCode *int, signal string) string {
	var b strings.Builder
	b.WriteString("● Background command")
	writeName(&b, label, command)
	b.WriteByte(' ')
	b.WriteString(ending(status, exitCode, signal))
	return b.String()
}

// Notice is the line of a forwarded completion (kind EXECUTION) or of a
// monitor's end (kind MONITOR_TERMINAL), built only from these attrs: kind,
// owner, label, command, status, exitCode, signal, events, suppressed,
// reason. Numbers may be any Go integer type, a float64 (as decoded JSON)
// or a json.Number; anything of an unexpected type is left out.
//
//	● Command "build" from /root/sub completed (exit code 0)
//	● Monitor "ticker" stopped · 2 events · 5 suppressed
//
// owner appears as "from OWNER": give it only when the line is shown to
// another owner than the execution's.
func Notice(attrs map[string]any) string {
	kind := attrString(attrs, "kind")
	monitor := strings.HasPrefix(kind, "MONITOR")
	var b strings.Builder
	if monitor {
		b.WriteString("● Monitor")
	} else {
		b.WriteString("● Command")
	}
	writeName(&b, attrString(attrs, "label"), attrString(attrs, "command"))
	if owner := clean(attrString(attrs, "owner"), maxFieldRunes); owner != "" {
		b.WriteString(" from ")
		b.WriteString(owner)
	}
	var code *int
	if n, ok := attrInt(attrs, "exitCode"); ok && n >= math.MinInt32 && n <= math.MaxInt32 {
		c := int(n)
		code = &c
	}
	b.WriteByte(' ')
	b.WriteString(ending(attrString(attrs, "status"), code, attrString(attrs, "signal")))
	events, ok := attrInt(attrs, "events")
	if monitor || ok {
		b.WriteString(" · ")
		b.WriteString(strconv.FormatInt(events, 10))
		if events == 1 {
			b.WriteString(" event")
		} else {
			b.WriteString(" events")
		}
	}
	if n, _ := attrInt(attrs, "suppressed"); n > 0 {
		b.WriteString(" · ")
		b.WriteString(strconv.FormatInt(n, 10))
		b.WriteString(" suppressed")
	}
	if reason := clean(attrString(attrs, "reason"), maxFieldRunes); reason != "" {
		b.WriteString(" · ")
		b.WriteString(reason)
	}
	return b.String()
}

// ending words a status with the detail it warrants.
func ending(status string, exitCode *int, signal string) string {
	detail := ""
	if exitCode != nil {
		detail = " (exit code " + strconv.Itoa(*exitCode) + ")"
	} else if s := clean(signal, maxWordRunes); s != "" {
		detail = " (signal " + s + ")"
	}
	switch status {
	case "completed":
		if exitCode == nil {
			return "completed"
		}
		return "completed" + detail
	case "failed":
		return "failed" + detail
	case "stopped":
		return "stopped" // neutral: whoever stopped it meant to
	case "timed-out":
		return "timed out"
	case "lost":
		return "lost (the helper restarted before it ended)"
	case "":
		return "ended" + detail
	default:
		return clean(status, maxWordRunes) + detail
	}
}

// writeName writes ` "NAME"`, the label or else the command, or nothing
// when both are blank.
func writeName(b *strings.Builder, label, command string) {
	name := clean(label, maxNameRunes)
	if name == "" {
		name = clean(command, maxNameRunes)
	}
	if name == "" {
		return
	}
	b.WriteString(` "`)
	for _, r := range name {
		if r == '"' || r == '\\' {
			b.WriteByte('\\') // the name cannot close its quotes early
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
}

// clean makes s safe on one line: every run of spaces, line breaks,
// control and format characters (bidi overrides, zero-width marks, which
// could reorder or hide text) becomes one space, the ends are trimmed, and
// more than max runes are cut to max-1 and an ellipsis. Invalid UTF-8
// becomes U+FFFD.
func clean(s string, max int) string {
	rs := make([]rune, 0, min(len(s), max+1))
	gap := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			gap = len(rs) > 0
			continue
		}
		if len(rs) > max {
			break // enough to know it is too long
		}
		if gap {
			rs = append(rs, ' ')
			gap = false
		}
		rs = append(rs, r)
	}
	if len(rs) > max {
		rs = []rune(strings.TrimRight(string(rs[:max-1]), " "))
		rs = append(rs, '…')
	}
	return string(rs)
}

func attrString(attrs map[string]any, key string) string {
	s, _ := attrs[key].(string)
	return s
}

// attrInt reads a whole number of any numeric type; attrs come from Go
// callers as ints and from decoded JSON as float64.
func attrInt(attrs map[string]any, key string) (int64, bool) {
	switch n := attrs[key].(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(n), uint64(n) <= math.MaxInt64
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), n <= math.MaxInt64
	case float32:
		return floatInt(float64(n))
	case float64:
		return floatInt(n)
	case json.Number:
		v, err := n.Int64()
		return v, err == nil
	}
	return 0, false
}

func floatInt(f float64) (int64, bool) {
	if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

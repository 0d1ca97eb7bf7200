package execution

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// Facts go on the wire in every reply and notification about an
// execution, and a listing holds hundreds: encoding/json's reflection,
// and its second pass over every MarshalJSON's output, cost most of a
// listing's time. AppendJSON writes the same bytes encoding/json writes
// (field order, omitempty, its string escaping with HTML characters
// escaped), directly; wirejson_test.go holds it to that.

// AppendJSON appends f as JSON.
func (f *Facts) AppendJSON(b []byte) []byte {
	b = append(b, `{"executionId":`...)
	b = appendJSONString(b, f.ExecutionID)
	b = append(b, `,"sessionId":`...)
	b = appendJSONString(b, f.SessionID)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, f.Owner)
	b = append(b, `,"command":`...)
	b = appendJSONString(b, f.Command)
	if len(f.Argv) > 0 {
		b = append(b, `,"argv":`...)
		b = appendJSONStrings(b, f.Argv)
	}
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(f.Kind))
	b = appendOptString(b, `,"label":`, f.Label)
	b = appendOptString(b, `,"toolUseId":`, f.ToolUseID)
	b = append(b, `,"cwd":`...)
	b = appendJSONString(b, f.Cwd)
	b = append(b, `,"target":`...)
	b = appendJSONString(b, f.Target)
	b = appendOptString(b, `,"targetMethod":`, f.TargetMethod)
	b = appendOptString(b, `,"supportTier":`, f.SupportTier)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(f.State))
	b = append(b, `,"lane":`...)
	b = appendJSONString(b, string(f.Lane))
	b = appendOptBool(b, `,"yielded":true`, f.Yielded)
	b = appendOptBool(b, `,"tty":true`, f.TTY)
	b = appendOptString(b, `,"termination":`, string(f.Termination))
	if f.ExitCode != nil {
		b = append(b, `,"exitCode":`...)
		b = strconv.AppendInt(b, int64(*f.ExitCode), 10)
	}
	b = appendOptString(b, `,"signal":`, f.Signal)
	b = appendOptString(b, `,"outcome":`, string(f.Outcome))
	b = appendOptString(b, `,"status":`, string(f.Status))
	b = appendOptString(b, `,"reason":`, f.Reason)
	b = appendOptTime(b, `,"queuedAt":`, f.QueuedAt)
	b = appendOptTime(b, `,"startedAt":`, f.StartedAt)
	b = appendOptTime(b, `,"endedAt":`, f.EndedAt)
	b = append(b, `,"wallMs":`...)
	b = strconv.AppendInt(b, f.WallMs, 10)
	b = append(b, `,"outputBytes":`...)
	b = strconv.AppendInt(b, f.OutputBytes, 10)
	b = append(b, `,"outputLines":`...)
	b = strconv.AppendInt(b, f.OutputLines, 10)
	b = append(b, `,"omittedBytes":`...)
	b = strconv.AppendInt(b, f.OmittedBytes, 10)
	b = append(b, `,"unreadBytes":`...)
	b = strconv.AppendInt(b, f.UnreadBytes, 10)
	b = append(b, `,"outputAddress":`...)
	b = appendJSONString(b, f.OutputAddress)
	b = appendOptInt(b, `,"pid":`, int64(f.Pid))
	b = appendOptInt(b, `,"pgid":`, int64(f.Pgid))
	b = appendOptString(b, `,"monitorId":`, f.MonitorID)
	b = appendOptString(b, `,"scratchDir":`, f.ScratchDir)
	b = appendOptInt(b, `,"timeoutMs":`, f.TimeoutMs)
	b = appendOptString(b, `,"publishedPath":`, f.PublishedPath)
	b = appendOptString(b, `,"remoteMode":`, f.RemoteMode)
	if in := f.TargetIncarnation; in != nil {
		b = append(b, `,"targetIncarnation":{`...)
		n := len(b)
		b = appendOptString(b, `"hostname":`, in.Hostname)
		if len(b) > n && in.BootID != "" {
			b = append(b, ',')
		}
		b = appendOptString(b, `"bootId":`, in.BootID)
		for _, kv := range [3][2]string{{`"containerId":`, in.ContainerID}, {`"podUid":`, in.PodUID}, {`"startedAt":`, in.StartedAt}} {
			if kv[1] != "" {
				if len(b) > n {
					b = append(b, ',')
				}
				b = appendOptString(b, kv[0], kv[1])
			}
		}
		b = append(b, '}')
	}
	b = appendOptBool(b, `,"waitingForInput":true`, f.WaitingForInput)
	b = appendOptTime(b, `,"waitingSince":`, f.WaitingSince)
	b = appendOptString(b, `,"prompt":`, f.Prompt)
	b = appendOptBool(b, `,"ready":true`, f.Ready)
	b = appendOptString(b, `,"readyLine":`, f.ReadyLine)
	b = appendOptInt(b, `,"readyPort":`, int64(f.ReadyPort))
	if len(f.Listening) > 0 {
		b = append(b, `,"listening":[`...)
		for i, l := range f.Listening {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendListener(b, l)
		}
		b = append(b, ']')
	}
	if f.Sandbox != nil {
		b = append(b, `,"sandbox":`...)
		b = appendSandboxFacts(b, f.Sandbox)
	}
	if len(f.SandboxDenials) > 0 {
		b = append(b, `,"sandboxDenials":[`...)
		for i, d := range f.SandboxDenials {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"path":`...)
			b = appendJSONString(b, d.Path)
			b = append(b, `,"operation":`...)
			b = appendJSONString(b, d.Operation)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if f.Resources != nil {
		b = append(b, `,"resources":`...)
		b = appendResourceFacts(b, f.Resources)
	}
	b = appendOptString(b, `,"limit":`, f.Limit)
	b = appendOptBool(b, `,"stoppedByUser":true`, f.StoppedByUser)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, f.Version, 10)
	return append(b, '}')
}

// AppendJSON appends o as JSON.
func (o Observation) AppendJSON(b []byte) []byte {
	b = append(b, `{"output":`...)
	b = appendJSONString(b, o.Output)
	b = append(b, `,"facts":`...)
	b = o.Facts.AppendJSON(b)
	b = appendOptBool(b, `,"final":true`, o.Final)
	b = appendOptString(b, `,"deliveryId":`, o.DeliveryID)
	return append(b, '}')
}

// AppendJSONString appends s as a JSON string, as encoding/json writes it.
func AppendJSONString(b []byte, s string) []byte { return appendJSONString(b, s) }

// AppendFactsJSON appends fs as a JSON array (null when nil, as
// encoding/json has it).
// GrowthFields names the elements of a Growth's array, in order, as the
// same facts are named in Facts.
var GrowthFields = []string{"executionId", "wallMs", "outputBytes", "outputLines", "omittedBytes", "unreadBytes", "version"}

// MarshalJSON writes g as the array of GrowthFields.
func (g Growth) MarshalJSON() ([]byte, error) { return appendGrowth(nil, &g), nil }

// UnmarshalJSON reads the array of GrowthFields.
func (g *Growth) UnmarshalJSON(b []byte) error {
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if len(a) != len(GrowthFields) {
		return fmt.Errorf("growth: %d elements, want %d (%s)", len(a), len(GrowthFields), strings.Join(GrowthFields, ", "))
	}
	for i, dst := range []any{&g.ExecutionID, &g.WallMs, &g.OutputBytes, &g.OutputLines, &g.OmittedBytes, &g.UnreadBytes, &g.Version} {
		if err := json.Unmarshal(a[i], dst); err != nil {
			return fmt.Errorf("growth %s: %w", GrowthFields[i], err)
		}
	}
	return nil
}

// AppendGrowthJSON appends gs as a JSON array of arrays (see Growth).
func AppendGrowthJSON(b []byte, gs []Growth) []byte {
	b = append(b, '[')
	for i := range gs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendGrowth(b, &gs[i])
	}
	return append(b, ']')
}

func appendGrowth(b []byte, g *Growth) []byte {
	b = appendJSONString(append(b, '['), g.ExecutionID)
	for _, n := range [...]int64{g.WallMs, g.OutputBytes, g.OutputLines, g.OmittedBytes, g.UnreadBytes} {
		b = strconv.AppendInt(append(b, ','), n, 10)
	}
	return append(strconv.AppendUint(append(b, ','), g.Version, 10), ']')
}

func AppendFactsJSON(b []byte, fs []Facts) []byte {
	if fs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		b = fs[i].AppendJSON(b)
	}
	return append(b, ']')
}

func appendListener(b []byte, l process.Listener) []byte {
	b = append(b, `{"address":`...)
	b = appendJSONString(b, l.Address)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(l.Port), 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(l.Pid), 10)
	return append(b, '}')
}

func appendSandboxFacts(b []byte, s *sandbox.Facts) []byte {
	b = append(b, `{"backend":`...)
	b = appendJSONString(b, s.Backend)
	b = appendOptString(b, `,"reason":`, s.Reason)
	b = appendOptString(b, `,"network":`, string(s.Network))
	if p := s.Policy; p != nil {
		b = append(b, `,"policy":{`...)
		n := len(b)
		b = appendOptString(b, `,"mode":`, string(p.Mode))
		if len(p.WritableRoots) > 0 {
			b = append(b, `,"writableRoots":`...)
			b = appendJSONStrings(b, p.WritableRoots)
		}
		if len(p.ReadOnlyPaths) > 0 {
			b = append(b, `,"readOnlyPaths":`...)
			b = appendJSONStrings(b, p.ReadOnlyPaths)
		}
		if len(p.InaccessiblePaths) > 0 {
			b = append(b, `,"inaccessiblePaths":`...)
			b = appendJSONStrings(b, p.InaccessiblePaths)
		}
		b = appendOptString(b, `,"network":`, string(p.Network))
		b = dropLeadingComma(b, n)
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendResourceFacts(b []byte, r *sandbox.ResourceFacts) []byte {
	b = append(b, '{')
	n := len(b)
	b = appendOptInt(b, `,"memoryBytes":`, r.MemoryBytes)
	b = appendOptInt(b, `,"pids":`, r.Pids)
	b = appendOptInt(b, `,"cpuSeconds":`, r.CPUSeconds)
	b = appendOptMap(b, `,"applied":`, r.Applied)
	b = appendOptMap(b, `,"notApplied":`, r.NotApplied)
	b = dropLeadingComma(b, n)
	return append(b, '}')
}

// dropLeadingComma removes the comma the first member after position n
// was written with.
func dropLeadingComma(b []byte, n int) []byte {
	if len(b) > n && b[n] == ',' {
		b = append(b[:n], b[n+1:]...)
	}
	return b
}

// appendOptMap appends a string map with its keys in order, as
// encoding/json does, when it has any.
func appendOptMap(b []byte, name string, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, name...)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

func appendOptString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, name...)
	return appendJSONString(b, s)
}

func appendOptBool(b []byte, member string, v bool) []byte {
	if !v {
		return b
	}
	return append(b, member...)
}

func appendOptInt(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, name...)
	return strconv.AppendInt(b, v, 10)
}

func appendOptTime(b []byte, name string, t *Time) []byte {
	if t == nil {
		return b
	}
	b = append(b, name...)
	return appendTime(b, t.Time)
}

// appendTime appends t as Time.MarshalJSON does, the layout's digits
// written directly (AppendFormat reads the layout every time).
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, timeLayout)
		return append(b, '"')
	}
	hour, min, sec := t.Clock()
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, min, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1e6, 3)
	return append(b, 'Z', '"')
}

// appendDigits appends v, at most width digits, zero-padded to width.
func appendDigits(b []byte, v, width int) []byte {
	var d [4]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

func appendJSONStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// plainByte marks the ASCII bytes a JSON string holds as they are: not a
// control character, quote or backslash, nor one of <, > and & (escaped
// so that JSON can sit in HTML).
var plainByte = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: invalid UTF-8 becomes
// U+FFFD, and U+2028 and U+2029 are escaped (they end a line in
// JavaScript).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	run := 0 // start of the bytes not yet appended
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plainByte[c] {
				i++
				continue
			}
			b = append(b, s[run:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			run = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[run:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[run:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		run = i
	}
	b = append(b, s[run:]...)
	return append(b, '"')
}

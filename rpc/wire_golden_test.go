package rpc

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/transcript"
)

// The Elisp facade names the same things as this package: the root owner,
// each method's parameter keys, the notifications, the wording of
// breadcrumbs and notices. This test writes what Go says into a golden
// file, and the ERT suite (test/elisp/mevedel-execution-wire-test.el)
// checks the Elisp against that file; so a change on one side alone fails
// one of the two.

var update = flag.Bool("update", false, "rewrite test/golden/wire.json from the Go code")

const wireGolden = "../test/golden/wire.json"

// requestParams maps each request method to the params type its handler
// decodes (nil: it takes none).
var requestParams = map[string]any{
	MethodInitialize:                InitializeParams{},
	MethodShutdown:                  nil,
	MethodCancelRequest:             CancelParams{},
	MethodSessionOpen:               SessionOpenParams{},
	MethodSessionClose:              SessionCloseParams{},
	MethodExecStart:                 ExecStartParams{},
	MethodExecObserve:               ExecObserveParams{},
	MethodExecStop:                  ExecStopParams{},
	MethodExecInterrupt:             ExecInterruptParams{},
	MethodExecList:                  ExecListParams{},
	MethodExecStopAll:               ExecStopAllParams{},
	MethodExecAnalyze:               ExecAnalyzeParams{},
	MethodSpoolRead:                 SpoolReadParams{},
	MethodSpoolGrep:                 SpoolGrepParams{},
	MethodSpoolGlob:                 SpoolGlobParams{},
	MethodSpoolStat:                 SpoolStatParams{},
	MethodMonitorStart:              MonitorStartParams{},
	MethodMonitorStop:               MonitorStopParams{},
	MethodMonitorList:               MonitorListParams{},
	MethodOwnerState:                OwnerStateParams{},
	MethodOwnerRetire:               OwnerRetireParams{},
	MethodOwnerAttend:               OwnerAttendParams{},
	MethodMailboxAck:                MailboxAckParams{},
	MethodDaemonStatus:              nil,
	MethodExecForward:               ExecForwardParams{},
	MethodExecUnforward:             ExecUnforwardParams{},
	MethodExecFollow:                ExecFollowParams{},
	MethodTranscriptRecords:         TranscriptRecordsParams{},
	MethodTranscriptCheckpoint:      TranscriptCheckpointParams{},
	MethodSessionCanRewind:          SessionCanRewindParams{},
	MethodSessionUnknownOutcome:     SessionUnknownOutcomeParams{},
	MethodSessionAcknowledgeUnknown: SessionAcknowledgeUnknownParams{},
}

// notificationParams maps each notification to the payload it carries.
var notificationParams = map[string]any{
	NotifyProgress:  ProgressParams{},
	NotifyChanged:   ChangedParams{},
	NotifySettled:   SettledParams{},
	NotifyDeliver:   execution.Delivery{},
	NotifyWake:      WakeParams{},
	NotifyDelivered: DeliveredParams{},
	NotifyOutput:    OutputParams{},
}

type wireShape struct {
	// Keys are the object's own keys, sorted.
	Keys []string `json:"keys"`
	// Objects are the keys of nested objects (and of arrays of objects),
	// by dotted path: "limits", "facts", "observation.facts".
	Objects map[string][]string `json:"objects,omitempty"`
}

type breadcrumbCase struct {
	Label    string `json:"label"`
	Command  string `json:"command"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exitCode"`
	Signal   string `json:"signal"`
	Text     string `json:"text"`
}

type noticeCase struct {
	Attrs map[string]any `json:"attrs"`
	Text  string         `json:"text"`
}

type wireDoc struct {
	RootOwner     string               `json:"rootOwner"`
	Methods       map[string]wireShape `json:"methods"`
	Notifications map[string]wireShape `json:"notifications"`
	// Arrays names the elements of what goes as an array of fields,
	// not an object: each under its place, as "method.key".
	Arrays      map[string][]string `json:"arrays"`
	Breadcrumbs []breadcrumbCase    `json:"breadcrumbs"`
	Notices     []noticeCase        `json:"notices"`
}

func code(n int) *int { return &n }

var breadcrumbCases = []breadcrumbCase{
	{Label: "Run tests", Command: "make test", Status: "completed", ExitCode: code(0)},
	{Label: "build", Status: "completed"},
	{Label: "build", Status: "completed", Signal: "SIGTERM"},
	{Command: "go vet ./...", Status: "failed", ExitCode: code(2)},
	{Label: "killed", Status: "failed", Signal: "SIGKILL"},
	{Label: "server", Status: "stopped", Signal: "SIGTERM"},
	{Label: "server", Status: "stopped", ExitCode: code(143)},
	{Label: "slow", Status: "timed-out", Signal: "SIGTERM"},
	{Label: "Run tests", Status: "lost"},
	{Label: "odd", Status: "", ExitCode: code(3)},
	{Label: "odd", Status: "", Signal: "SIGHUP"},
	{Label: "odd", Status: ""},
	{Label: "odd", Status: "weird\nstatus", ExitCode: code(-1)},
	{Label: "odd", Status: "a-status-name-much-longer-than-twenty-four", Signal: "SIGNAL-NAME-LONGER-THAN-TWENTY-FOUR-RUNES"},
	{Label: strings.Repeat("label ", 15), Status: "completed", ExitCode: code(0)},
	{Label: strings.Repeat("x", 58) + "   tail", Status: "completed", ExitCode: code(0)},
	{Label: strings.Repeat("y", 60), Status: "completed", ExitCode: code(0)},
	{Label: strings.Repeat("y", 61), Status: "completed", ExitCode: code(0)},
	{Command: "for i in 1 2 3; do\n\techo $i;\n  done && " + strings.Repeat("echo more ", 10), Status: "completed", ExitCode: code(0)},
	{Label: " \t\n ", Command: "  make   all  ", Status: "completed", ExitCode: code(0)},
	{Status: "failed", ExitCode: code(1)},
	{Label: "日本語のテスト ✓ émoji 🚀", Status: "completed", ExitCode: code(0)},
	{Label: strings.Repeat("é🚀", 40), Status: "failed", ExitCode: code(1)},
	{Label: "\u202eevil\u200b name\u2028next\u00a0nbsp\u0085nel\x1b[2J", Status: "completed", ExitCode: code(0)},
	{Label: `say "hi" \ bye`, Status: "completed", ExitCode: code(0)},
}

var noticeCases = []map[string]any{
	{"kind": "EXECUTION", "owner": "/root/sub", "label": "build", "status": "completed", "exitCode": 0},
	{"kind": "EXECUTION", "command": "make\ntest", "status": "failed", "signal": "SIGKILL"},
	{"kind": "EXECUTION", "label": "three", "status": "completed", "events": 3},
	{"kind": "MONITOR_TERMINAL", "label": "ticker", "status": "stopped", "events": 2, "suppressed": 5},
	{"kind": "MONITOR_TERMINAL", "label": "tail", "status": "failed", "exitCode": 1, "events": 1, "reason": "timeout after 300s"},
	{"kind": "MONITOR_TERMINAL", "command": "tail -f log", "status": "completed"},
	{"kind": "MONITOR", "label": "m", "status": "timed-out", "events": 0, "suppressed": 0},
	{"status": "completed", "exitCode": 1.5, "label": "half"},
	{"status": "completed", "exitCode": 1e10, "label": "huge"},
	{"status": "completed", "exitCode": "0", "label": "string code"},
	{"kind": "EXECUTION", "owner": "/root/" + strings.Repeat("worker", 12), "label": "x", "status": "lost", "reason": strings.Repeat("because ", 10)},
	{"kind": "EXECUTION", "label": "üñí\tcode", "status": "stopped", "owner": "/root/ü"},
	{},
}

// jsonKeys returns the JSON keys of struct type t (embedded structs
// followed), and adds the keys of nested objects to objects under path.
func jsonKeys(t reflect.Type, path string, objects map[string][]string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			keys = append(keys, jsonKeys(ft, path, objects)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
		elem := ft
		for elem.Kind() == reflect.Slice || elem.Kind() == reflect.Array || elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		if elem.Kind() == reflect.Struct && !marshalsItself(elem) {
			sub := name
			if path != "" {
				sub = path + "." + name
			}
			objects[sub] = jsonKeys(elem, sub, objects)
		}
	}
	sort.Strings(keys)
	return keys
}

var marshaler = reflect.TypeFor[json.Marshaler]()

// marshalsItself reports whether t has its own JSON form (a time, an id):
// a value on the wire, not an object of keys.
func marshalsItself(t reflect.Type) bool {
	return t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler)
}

func shapeOf(v any) wireShape {
	s := wireShape{Keys: []string{}}
	if v == nil {
		return s
	}
	objects := map[string][]string{}
	s.Keys = jsonKeys(reflect.TypeOf(v), "", objects)
	if len(objects) > 0 {
		s.Objects = objects
	}
	return s
}

// protocolConstants returns the values of the package's constants whose
// names start with prefix, read from its source: a method added there
// without a row above fails the test.
func protocolConstants(t *testing.T, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func buildWireDoc(t *testing.T) wireDoc {
	t.Helper()
	if got, want := sortedKeys(requestParams), protocolConstants(t, "Method"); !reflect.DeepEqual(got, want) {
		t.Fatalf("requestParams covers %v, the Method constants are %v: add the new method's params type", got, want)
	}
	for m := range handlers {
		if _, ok := requestParams[m]; !ok {
			t.Fatalf("handler for %s has no row in requestParams", m)
		}
	}
	if got, want := sortedKeys(notificationParams), protocolConstants(t, "Notify"); !reflect.DeepEqual(got, want) {
		t.Fatalf("notificationParams covers %v, the Notify constants are %v", got, want)
	}
	doc := wireDoc{
		RootOwner:     execution.RootOwner,
		Methods:       map[string]wireShape{},
		Notifications: map[string]wireShape{},
		Arrays:        map[string][]string{NotifyChanged + ".grown": execution.GrowthFields},
	}
	for m, v := range requestParams {
		doc.Methods[m] = shapeOf(v)
	}
	for m, v := range notificationParams {
		doc.Notifications[m] = shapeOf(v)
	}
	for _, c := range breadcrumbCases {
		c.Text = transcript.Breadcrumb(c.Label, c.Command, c.Status, c.ExitCode, c.Signal)
		doc.Breadcrumbs = append(doc.Breadcrumbs, c)
	}
	for _, attrs := range noticeCases {
		// As Emacs will read them: through JSON, numbers as float64.
		raw, err := json.Marshal(attrs)
		if err != nil {
			t.Fatal(err)
		}
		var decoded map[string]any
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		doc.Notices = append(doc.Notices, noticeCase{Attrs: decoded, Text: transcript.Notice(decoded)})
	}
	return doc
}

func TestWireGolden(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(buildWireDoc(t)); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	if *update {
		if err := os.MkdirAll(filepath.Dir(wireGolden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wireGolden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(wireGolden)
	if err != nil {
		t.Fatalf("%v: run `go test ./rpc -run Golden -update` to write it", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	i := 0
	for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return ls[i]
		}
		return "(end of file)"
	}
	t.Fatalf("test/golden/wire.json no longer says what the Go code does (first difference at line %d):\n  golden: %s\n  Go now: %s\n"+
		"The Elisp facade is checked against this file. If the change is meant, run `go test ./rpc -run Golden -update`, "+
		"then make the Elisp agree until `make test-elisp` passes.", i+1, line(wl), line(gl))
}

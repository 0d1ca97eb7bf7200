package execution

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/sandbox"
)

// pieces of the strings the generator builds: plain text, every escape
// encoding/json makes, multi-byte runes, the two line separators, and
// invalid UTF-8.
var pieces = []string{"", "a", "exec-abc-000001", "/tmp/x y", `"`, `\`, "<", ">", "&", "\n", "\r", "\t", "\b", "\f",
	"\x00", "\x01", "\x1f", "\x7f", "é", "日本", "😀", "\u2028", "\u2029", "\xff", "\xe2\x80", "\xed\xa0\x80", "%", "'"}

func randString(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return ""
	}
	var b []byte
	for range r.IntN(6) {
		b = append(b, pieces[r.IntN(len(pieces))]...)
	}
	return string(b)
}

func randStrings(r *rand.Rand) []string {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	out := make([]string, 1+r.IntN(3))
	for i := range out {
		out[i] = randString(r)
	}
	return out
}

func randTime(r *rand.Rand) *Time {
	if r.IntN(3) == 0 {
		return nil
	}
	sec := r.Int64N(4e9)
	if r.IntN(10) == 0 { // years before 0 and after 9999 too
		sec = r.Int64N(1<<40) - 1<<39
	}
	return &Time{time.Unix(sec, r.Int64N(1e9)).In(time.FixedZone("x", 3600*(r.IntN(24)-12)))}
}

func randInt(r *rand.Rand) int64 {
	if r.IntN(3) == 0 {
		return 0
	}
	return r.Int64N(1<<40) - 1<<39
}

func randFacts(r *rand.Rand) Facts {
	f := Facts{
		ExecutionID: randString(r), SessionID: randString(r), Owner: randString(r), Command: randString(r),
		Argv: randStrings(r), Kind: Kind(randString(r)), Label: randString(r), ToolUseID: randString(r),
		Cwd: randString(r), Target: randString(r), TargetMethod: randString(r), SupportTier: randString(r), State: State(randString(r)), Lane: Lane(randString(r)),
		Yielded: r.IntN(2) == 0, TTY: r.IntN(2) == 0, Termination: Termination(randString(r)),
		Signal: randString(r), Outcome: Outcome(randString(r)), Status: Status(randString(r)), Reason: randString(r),
		QueuedAt: randTime(r), StartedAt: randTime(r), EndedAt: randTime(r),
		WallMs: randInt(r), OutputBytes: randInt(r), OutputLines: randInt(r), OmittedBytes: randInt(r), UnreadBytes: randInt(r),
		OutputAddress: randString(r), Pid: int(randInt(r)), Pgid: int(randInt(r)), MonitorID: randString(r),
		ScratchDir: randString(r), TimeoutMs: randInt(r), PublishedPath: randString(r), RemoteMode: randString(r),
		WaitingForInput: r.IntN(2) == 0, WaitingSince: randTime(r), Prompt: randString(r),
		Ready: r.IntN(2) == 0, ReadyLine: randString(r), ReadyPort: int(randInt(r)), Limit: randString(r), StoppedByUser: r.IntN(2) == 0,
		Version: r.Uint64(),
	}
	if r.IntN(2) == 0 {
		f.TargetIncarnation = &Incarnation{Hostname: randString(r), BootID: randString(r), ContainerID: randString(r), PodUID: randString(r), StartedAt: randString(r)}
	}
	if r.IntN(2) == 0 {
		c := int(randInt(r))
		f.ExitCode = &c
	}
	if n := r.IntN(3); n > 0 {
		for range n {
			f.Listening = append(f.Listening, process.Listener{Address: randString(r), Port: int(randInt(r)), Pid: int(randInt(r))})
		}
	} else if r.IntN(2) == 0 {
		f.Listening = []process.Listener{}
	}
	if r.IntN(2) == 0 {
		f.Sandbox = &sandbox.Facts{Backend: randString(r), Reason: randString(r), Network: sandbox.Network(randString(r))}
		if r.IntN(2) == 0 {
			f.Sandbox.Policy = &sandbox.Policy{Mode: sandbox.Mode(randString(r)), WritableRoots: randStrings(r),
				ReadOnlyPaths: randStrings(r), InaccessiblePaths: randStrings(r), Network: sandbox.Network(randString(r))}
		}
	}
	for range r.IntN(3) {
		f.SandboxDenials = append(f.SandboxDenials, sandbox.Denial{Path: randString(r), Operation: randString(r)})
	}
	if r.IntN(2) == 0 {
		f.Resources = &sandbox.ResourceFacts{Resources: sandbox.Resources{MemoryBytes: randInt(r), Pids: randInt(r), CPUSeconds: randInt(r)}}
		for _, m := range []*map[string]string{&f.Resources.Applied, &f.Resources.NotApplied} {
			switch r.IntN(3) {
			case 1:
				*m = map[string]string{}
			case 2:
				*m = map[string]string{}
				for range 1 + r.IntN(3) {
					(*m)[randString(r)] = randString(r)
				}
			}
		}
	}
	return f
}

// A Growth goes as the array of GrowthFields and reads back the same; an
// array of another length is refused, naming the fields.
func TestGrowthIsAnArray(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		g := Growth{ExecutionID: randString(r), WallMs: r.Int64(), OutputBytes: r.Int64N(1 << 40), OutputLines: r.Int64N(9),
			OmittedBytes: r.Int64N(9), UnreadBytes: r.Int64N(1 << 20), Version: r.Uint64()}
		b, err := json.Marshal([]Growth{g})
		if err != nil {
			t.Fatal(err)
		}
		var elems [][]any
		if err := json.Unmarshal(b, &elems); err != nil || len(elems) != 1 || len(elems[0]) != len(GrowthFields) {
			t.Fatalf("%s is not one array of %d: %v", b, len(GrowthFields), err)
		}
		var back []Growth
		if err := json.Unmarshal(b, &back); err != nil || len(back) != 1 {
			t.Fatalf("%s: %v", b, err)
		}
		// The id as JSON carries it: invalid UTF-8 becomes U+FFFD.
		var id string
		_ = json.Unmarshal([]byte(AppendJSONString(nil, g.ExecutionID)), &id)
		if g.ExecutionID = id; back[0] != g {
			t.Fatalf("%s read back as %+v, want %+v", b, back[0], g)
		}
	}
	var g Growth
	if err := json.Unmarshal([]byte(`["exec-a",1,2,3]`), &g); err == nil || !bytes.Contains([]byte(err.Error()), []byte("wallMs")) {
		t.Fatalf("a short array: %v", err)
	}
}

// The hand-written encoding is byte for byte encoding/json's, for facts,
// observations and lists of them, whatever the strings hold.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		f := randFacts(r)
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("facts %d:\n got %s\nwant %s", i, got, want)
		}
		o := Observation{Output: randString(r), Facts: f, Final: r.IntN(2) == 0, DeliveryID: randString(r)}
		want, _ = json.Marshal(o)
		if got := o.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("observation %d:\n got %s\nwant %s", i, got, want)
		}
	}
	for _, fs := range [][]Facts{nil, {}, {randFacts(r)}, {randFacts(r), randFacts(r), randFacts(r)}} {
		want, _ := json.Marshal(fs)
		if got := AppendFactsJSON(nil, fs); !bytes.Equal(got, want) {
			t.Fatalf("list:\n got %s\nwant %s", got, want)
		}
	}
}

func BenchmarkFactsJSON(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	fs := make([]Facts, 500)
	for i := range fs {
		fs[i] = Facts{ExecutionID: "exec-abcde-000001", SessionID: "s", Owner: "/root", Command: "sleep 600", Kind: KindBash,
			Label: randString(r), Cwd: "/home/user/project", Target: "local", State: Running, Lane: LaneRead, Yielded: true,
			QueuedAt: &Time{time.Now()}, StartedAt: &Time{time.Now()}, OutputAddress: "artifact://executions/exec-abcde-000001.log",
			Pid: 1234, Pgid: 1234, Version: 3}
	}
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(fs)
		}
	})
	var buf []byte
	b.Run("AppendJSON", func(b *testing.B) {
		for b.Loop() {
			buf = AppendFactsJSON(buf[:0], fs)
		}
	})
}

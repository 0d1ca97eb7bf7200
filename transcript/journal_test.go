package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func openJournal(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// openIdle opens a journal whose writer has not started, so nothing
// appended reaches the file until start is called.
func openIdle(t *testing.T, dir string) (j *Journal, start func()) {
	t.Helper()
	j, err := newJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	start = func() { once.Do(func() { go j.run() }) }
	t.Cleanup(func() { start(); j.Close() })
	return j, start
}

func checkpoint(t *testing.T, j *Journal) uint64 {
	t.Helper()
	seq, err := j.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func records(t *testing.T, j *Journal) []Record {
	t.Helper()
	recs, _, err := j.Records(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func seqs(recs []Record) []uint64 {
	var s []uint64
	for _, r := range recs {
		s = append(s, r.Seq)
	}
	return s
}

// fileLines returns the journal file's lines, checking that it ends with a
// newline and that every line is a record.
func fileLines(t *testing.T, dir string) []Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("file does not end with a newline: %q", b)
	}
	var recs []Record
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %d %q: %v", i+1, line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// captureLog collects what the package logs during the test.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&buf)
	log.SetFlags(0)
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	return &buf
}

func row(id string) Record {
	return Record{
		Type: TypeRow, ExecutionID: id, ToolUseID: "tu-" + id, Owner: "/root",
		Facts:  json.RawMessage(`{"executionId":"` + id + `","state":"running"}`),
		Leader: &Leader{Pid: 4242, Pgid: 4242, StartTime: 987654321, Target: "local"},
	}
}

func settled(id string, exit int) Record {
	return Record{
		Type: TypeSettled, ExecutionID: id, ToolUseID: "tu-" + id, Owner: "/root",
		Facts:    json.RawMessage(`{"executionId":"` + id + `","state":"settled"}`),
		ExitCode: code(exit),
	}
}

func breadcrumb(id string) Record {
	return Record{
		Type: TypeBreadcrumb, ExecutionID: id, ToolUseID: "tu-" + id, Status: "completed",
		ExitCode: code(0), Label: id, Text: Breadcrumb(id, "", "completed", code(0), ""),
	}
}

func notice(n int) Record {
	attrs := map[string]any{"kind": "MONITOR_TERMINAL", "label": fmt.Sprint("m", n), "status": "stopped", "events": n}
	return Record{Type: TypeNotice, Owner: "/root", Attrs: attrs, Text: Notice(attrs)}
}

func TestRecordWireShape(t *testing.T) {
	j := openJournal(t, t.TempDir())
	now = func() time.Time { return time.Date(2026, 12, 2, 17, 45, 7, 123456789, time.FixedZone("x", 3600)) }
	defer func() { now = time.Now }()
	j.Append(Record{Type: TypeBreadcrumb, ExecutionID: "exec-a-000001", Status: "completed", ExitCode: code(0), Text: "t"})
	j.Append(Record{Type: TypeNotice, At: "2020-01-01T00:00:00.000Z"})
	recs := records(t, j)
	b, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"seq":1,"type":"breadcrumb","executionId":"exec-a-000001","at":"2026-12-02T16:45:07.123Z","status":"completed","exitCode":0,"text":"t"},` +
		`{"seq":2,"type":"notice","at":"2020-01-01T00:00:00.000Z"}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestAppendCheckpointReopen(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir)
	var appended []uint64
	for _, r := range []Record{row("a"), row("b"), settled("a", 0), breadcrumb("a"), notice(2)} {
		appended = append(appended, j.Append(r))
	}
	if want := []uint64{1, 2, 3, 4, 5}; !reflect.DeepEqual(appended, want) {
		t.Fatalf("seqs %v, want %v", appended, want)
	}
	if seq := checkpoint(t, j); seq != 5 {
		t.Fatalf("checkpoint = %d, want 5", seq)
	}
	// After Checkpoint the bytes are in the file.
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, appended) {
		t.Fatalf("file has seqs %v, want %v", got, appended)
	}
	before := records(t, j)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j2 := openJournal(t, dir)
	after := records(t, j2)
	mb, _ := json.Marshal(before)
	ma, _ := json.Marshal(after)
	if !bytes.Equal(mb, ma) {
		t.Fatalf("after reopen:\n%s\nbefore:\n%s", ma, mb)
	}
	if seq := j2.Append(row("c")); seq != 6 {
		t.Fatalf("first seq after reopen = %d, want 6", seq)
	}
	if seq := checkpoint(t, j2); seq != 6 {
		t.Fatalf("checkpoint = %d, want 6", seq)
	}
	if st, err := os.Stat(j2.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode: %v %v", st.Mode(), err)
	}
}

func TestAppendCopies(t *testing.T) {
	j := openJournal(t, t.TempDir())
	r := row("a")
	r.Attrs = map[string]any{"k": "v"}
	j.Append(r)
	r.Facts[2] = 'X'
	r.Leader.Pid = 1
	r.Attrs["k"] = "changed"
	got := records(t, j)[0]
	if got.Facts[2] == 'X' || got.Leader.Pid != 4242 || got.Attrs["k"] != "v" {
		t.Fatalf("the journal shares memory with its caller: %+v", got)
	}
	got.Leader.Pid = 2
	if records(t, j)[0].Leader.Pid != 4242 {
		t.Fatal("the journal shares memory with a reader")
	}
}

func TestRecordsPaging(t *testing.T) {
	dir := t.TempDir()
	// The writer is not running: Records must see what is only queued.
	j, start := openIdle(t, dir)
	for i := 0; i < 25; i++ {
		j.Append(notice(i))
	}
	var pages [][]uint64
	var since uint64
	for {
		recs, next, err := j.Records(since, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			if next != since {
				t.Fatalf("caught up at %d but next = %d", since, next)
			}
			break
		}
		if next != recs[len(recs)-1].Seq {
			t.Fatalf("next = %d, last returned %d", next, recs[len(recs)-1].Seq)
		}
		pages = append(pages, seqs(recs))
		since = next
	}
	if len(pages) != 3 || len(pages[0]) != 10 || len(pages[1]) != 10 || len(pages[2]) != 5 ||
		pages[0][0] != 1 || pages[1][0] != 11 || pages[2][4] != 25 {
		t.Fatalf("pages %v", pages)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FileName)); len(b) != 0 {
		t.Fatalf("records reached the file without a writer: %q", b)
	}
	// limit <= 0 means the default page; since past the end is caught up.
	if recs, next, _ := j.Records(0, 0); len(recs) != 25 || next != 25 {
		t.Fatalf("default limit: %d records, next %d", len(recs), next)
	}
	if recs, next, _ := j.Records(99, 5); len(recs) != 0 || next != 99 {
		t.Fatalf("since past the end: %d records, next %d", len(recs), next)
	}
	start()
	if seq := checkpoint(t, j); seq != 25 || len(fileLines(t, dir)) != 25 {
		t.Fatalf("checkpoint %d", seq)
	}
}

func TestCheckpointHonoursContext(t *testing.T) {
	j, _ := openIdle(t, t.TempDir())
	j.Append(notice(1))
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("request cancelled")
	cancel(cause)
	if _, err := j.Checkpoint(ctx); !errors.Is(err, cause) {
		t.Fatalf("err = %v, want the context's cause", err)
	}
}

func TestTornLastLine(t *testing.T) {
	good := `{"seq":1,"type":"row","executionId":"a","at":"2026-01-01T00:00:00.000Z"}` + "\n" +
		`{"seq":2,"type":"settled","executionId":"a","at":"2026-01-01T00:00:01.000Z","exitCode":0}` + "\n"
	tests := []struct{ name, tail string }{
		{"partial json without newline", `{"seq":3,"type":"bread`},
		{"complete json without newline", `{"seq":3,"type":"notice","at":"2026-01-01T00:00:02.000Z"}`},
		{"garbage line with newline", "\x00\x00garbage\n"},
		{"truncated json with newline", `{"seq":3,"type":` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(good+tt.tail), 0o600); err != nil {
				t.Fatal(err)
			}
			logs := captureLog(t)
			j := openJournal(t, dir)
			if got := seqs(records(t, j)); !reflect.DeepEqual(got, []uint64{1, 2}) {
				t.Fatalf("records %v, want [1 2]", got)
			}
			if n := strings.Count(logs.String(), "torn"); n != 1 {
				t.Fatalf("logged %d times about the torn line: %q", n, logs)
			}
			if b, _ := os.ReadFile(path); string(b) != good {
				t.Fatalf("file not cut back to its last good line: %q", b)
			}
			if seq := j.Append(notice(3)); seq != 3 {
				t.Fatalf("seq %d, want 3", seq)
			}
			checkpoint(t, j)
			j.Close()
			if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, []uint64{1, 2, 3}) {
				t.Fatalf("file seqs %v", got)
			}
			j2 := openJournal(t, dir)
			if got := seqs(records(t, j2)); !reflect.DeepEqual(got, []uint64{1, 2, 3}) {
				t.Fatalf("after reopen %v", got)
			}
		})
	}
}

func TestBadMiddleLineSkipped(t *testing.T) {
	content := `{"seq":1,"type":"row","executionId":"a","at":"x"}` + "\n" +
		"not json\n" +
		`{"seq":1,"type":"row","executionId":"dup","at":"x"}` + "\n" + // out of order
		"\n" +
		`{"seq":4,"type":"settled","executionId":"a","at":"x"}` + "\n"
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := captureLog(t)
	j := openJournal(t, dir)
	if got := seqs(records(t, j)); !reflect.DeepEqual(got, []uint64{1, 4}) {
		t.Fatalf("records %v, want [1 4]", got)
	}
	if !strings.Contains(logs.String(), "skipped 2 unreadable line(s), first at line 2") {
		t.Fatalf("log %q", logs)
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Fatalf("file changed: %q", b)
	}
	if seq := j.Append(notice(5)); seq != 5 {
		t.Fatalf("seq %d, want 5", seq)
	}
}

func TestPeriodicSync(t *testing.T) {
	old := SyncInterval
	SyncInterval = 10 * time.Millisecond
	defer func() { SyncInterval = old }()
	dir := t.TempDir()
	j := openJournal(t, dir)
	seq := j.Append(row("a"))
	// Nobody calls Checkpoint; the writer must fsync on its own.
	deadline := time.After(10 * time.Second)
	for {
		j.mu.Lock()
		durable, synced := j.durable, j.changed
		j.mu.Unlock()
		if durable >= seq {
			break
		}
		select {
		case <-synced:
		case <-deadline:
			t.Fatalf("no fsync within the deadline (durable %d)", durable)
		}
	}
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, []uint64{seq}) {
		t.Fatalf("file seqs %v", got)
	}
}

func TestUnsettled(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir)
	j.Append(row("a"))
	j.Append(row("b"))
	j.Append(row("c"))
	j.Append(settled("a", 0))
	j.Append(Record{Type: TypeLost, ExecutionID: "b", Facts: json.RawMessage(`{}`)})
	j.Append(breadcrumb("c")) // a breadcrumb is no settlement
	d := row("d")
	d.Leader = &Leader{Pid: 7, Pgid: 7, StartTime: 99}
	j.Append(d)
	j.Append(Record{Type: TypeRow}) // no execution: ignored
	check := func(j *Journal) {
		t.Helper()
		un := j.Unsettled()
		if len(un) != 2 || un[0].ExecutionID != "c" || un[1].ExecutionID != "d" {
			t.Fatalf("unsettled %+v", un)
		}
		if l := un[1].Leader; l == nil || *l != (Leader{Pid: 7, Pgid: 7, StartTime: 99}) {
			t.Fatalf("leader %+v", l)
		}
	}
	check(j)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	check(openJournal(t, dir))
}

func TestCloseThenAppend(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	j.Append(row("a")) // queued only: Close must write it
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, []uint64{1}) {
		t.Fatalf("Close did not flush: %v", got)
	}
	if seq := j.Append(row("b")); seq != 0 {
		t.Fatalf("append after close = %d, want 0", seq)
	}
	if err := j.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Err = %v, want ErrClosed", err)
	}
	if _, err := j.Checkpoint(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint after close: %v", err)
	}
	if err := j.Compact(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Compact after close: %v", err)
	}
	if err := j.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, []uint64{1}) {
		t.Fatalf("file changed after close: %v", got)
	}
}

func TestUnencodableRecord(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir)
	j.Append(row("a"))
	bad := row("b")
	bad.Facts = json.RawMessage(`{not json`)
	j.Append(bad)
	j.Append(row("c"))
	if seq, err := j.Checkpoint(context.Background()); err == nil || seq != 3 {
		t.Fatalf("checkpoint = %d, %v; want 3 and an error", seq, err)
	}
	if j.Err() == nil {
		t.Fatal("no error reported")
	}
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, []uint64{1, 3}) {
		t.Fatalf("file seqs %v, want [1 3]", got)
	}
}

func TestOpenRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if j, err := Open(dir); err == nil {
		j.Close()
		t.Fatal("opened a journal through a symlink")
	}
}

func TestOpenSetsPrivateMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j := openJournal(t, dir)
	if st, _ := os.Stat(j.Path()); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
}

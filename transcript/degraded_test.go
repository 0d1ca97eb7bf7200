package transcript

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/internal/testsupport"
)

func fastRetries(t *testing.T) {
	first, longest := RetryFirst, RetryMax
	RetryFirst, RetryMax = 2*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { RetryFirst, RetryMax = first, longest })
}

// A full disk degrades the journal instead of stopping it: checkpoints say
// so, the records wait in memory, the failure and the recovery are logged
// once each however many attempts fail, and once there is room every
// record is written, in order, with no piece of a failed write left in the
// file.
func TestFullDiskDegradesThenCatchesUp(t *testing.T) {
	fastRetries(t)
	dir := testsupport.SmallDisk(t, "256k")
	logs := captureLog(t)
	j := openJournal(t, dir)
	for i := range 10 {
		j.Append(row(fmt.Sprint("before-", i)))
	}
	checkpoint(t, j)
	free := testsupport.FillDisk(t, dir)

	// Keep appending until a write fails: the file's last page may take a
	// few records.
	n := 10
	var err error
	for ; n < 2000 && err == nil; n++ {
		j.Append(row(fmt.Sprint("during-", n)))
		_, err = j.Checkpoint(context.Background())
	}
	if err == nil {
		t.Fatal("the journal never failed to write on a full disk")
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("checkpoint error %v, want ENOSPC", err)
	}
	h := j.Health()
	if h.State != StateDegraded || !strings.Contains(h.Error, "no space left") || h.Since == "" || h.Pending == 0 {
		t.Fatalf("health %+v", h)
	}
	// More records while degraded, and many failed attempts.
	for i := range 200 {
		j.Append(settled(fmt.Sprint("during-", i), 0))
		if i%20 == 0 {
			j.Retry()
			if _, err := j.Checkpoint(context.Background()); err == nil {
				t.Fatal("checkpoint succeeded on a full disk")
			}
		}
	}
	total := n + 200
	if got := strings.Count(logs.String(), "degraded"); got != 1 {
		t.Fatalf("logged the failure %d times:\n%s", got, logs)
	}

	free()
	// The writer retries on its own: wait for it, no checkpoint needed.
	if !testsupport.Poll(10*time.Second, func() bool { return j.Health().State == StateOK }) {
		t.Fatalf("still degraded after the space came back: %+v", j.Health())
	}
	if seq := checkpoint(t, j); seq != uint64(total) {
		t.Fatalf("durable up to %d, want %d", seq, total)
	}
	if got := strings.Count(logs.String(), "recovered"); got != 1 {
		t.Fatalf("logged the recovery %d times:\n%s", got, logs)
	}
	want := make([]uint64, total)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, want) {
		t.Fatalf("file seqs %v", got)
	}
	if got := seqs(records(t, j)); !reflect.DeepEqual(got, want) {
		t.Fatalf("records %v", got)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	if got := seqs(records(t, openJournal(t, dir))); !reflect.DeepEqual(got, want) || logs.Len() != 0 {
		t.Fatalf("after reopen %v; log %q", got, logs)
	}
}

// A durable append on a full disk fails at once (the record stays queued
// and is written once there is room); it never hangs.
func TestAppendDurableFailsOnFullDisk(t *testing.T) {
	fastRetries(t)
	dir := testsupport.SmallDisk(t, "256k")
	j := openJournal(t, dir)
	free := testsupport.FillDisk(t, dir)
	var err error
	var seq uint64
	for i := 0; i < 2000 && err == nil; i++ {
		seq, err = j.AppendDurable(context.Background(), row(fmt.Sprint("x", i)))
	}
	if err == nil || j.Health().State != StateDegraded {
		t.Fatalf("durable appends kept succeeding on a full disk: %v %+v", err, j.Health())
	}
	free()
	if got, err := j.AppendDurable(context.Background(), row("after")); err != nil || got != seq+1 {
		t.Fatalf("after freeing: seq %d, %v", got, err)
	}
	if got := fileLines(t, dir); uint64(len(got)) != seq+1 {
		t.Fatalf("%d records in the file, want %d", len(got), seq+1)
	}
}

// Durable appends made at the same moment share one fsync.
func TestAppendDurableGroupCommit(t *testing.T) {
	dir := t.TempDir()
	j, start := openIdle(t, dir)
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := j.AppendDurable(context.Background(), row(fmt.Sprint("s", i)))
			errs <- err
		})
	}
	// All of them have queued their record and wait for the writer.
	if !testsupport.Poll(10*time.Second, func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.seq == n
	}) {
		t.Fatal("appends did not queue")
	}
	start()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	j.mu.Lock()
	fsyncs, durable := j.fsyncs, j.durable
	j.mu.Unlock()
	if fsyncs != 1 || durable != n {
		t.Fatalf("%d fsyncs for %d concurrent durable appends (durable %d), want 1", fsyncs, n, durable)
	}
}

// Records pages through a journal far longer than the index step, from
// the file, and the same after compaction and after a reopen.
func TestRecordsReadFromDisk(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir)
	const execs = 500
	for i := range execs {
		id := fmt.Sprint("e", i)
		j.Append(row(id))
		j.Append(settled(id, i%3))
	}
	checkpoint(t, j)
	j.mu.Lock()
	queued := len(j.pending)
	j.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d durable records still held in memory", queued)
	}
	page := func(j *Journal, limit int) []uint64 {
		var all []uint64
		var since uint64
		for {
			recs, next, err := j.Records(since, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				return all
			}
			all = append(all, seqs(recs)...)
			since = next
		}
	}
	want := make([]uint64, 2*execs)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	for _, limit := range []int{1, 7, 64, 1000} {
		if got := page(j, limit); !reflect.DeepEqual(got, want) {
			t.Fatalf("limit %d: %d records", limit, len(got))
		}
	}
	// From the middle of the file, with records only queued after it.
	j.Append(notice(1))
	recs, next, err := j.Records(777, 5)
	if err != nil || !reflect.DeepEqual(seqs(recs), []uint64{778, 779, 780, 781, 782}) || next != 782 {
		t.Fatalf("since 777: %v next %d %v", seqs(recs), next, err)
	}
	recs, _, _ = j.Records(999, 5)
	if !reflect.DeepEqual(seqs(recs), []uint64{1000, 1001}) || recs[1].Type != TypeNotice {
		t.Fatalf("tail: %+v", recs)
	}
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	var kept []uint64
	for i := range execs {
		kept = append(kept, uint64(2*i+2))
	}
	kept = append(kept, 1001)
	if got := page(j, 13); !reflect.DeepEqual(got, kept) {
		t.Fatalf("after compaction %v", got)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if got := page(openJournal(t, dir), 64); !reflect.DeepEqual(got, kept) {
		t.Fatalf("after reopen %v", got)
	}
}

// What a journal keeps in memory does not grow with the executions it
// recorded once they are durable. An execution's records here are the
// ones a yielded command that delivered its result leaves: two rows, two
// settlements and a breadcrumb, with facts of realistic size.
func TestHeapPerExecution(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir)
	facts := `{"executionId":"%s","sessionId":"s1","owner":"/root","command":"make -j8 test 2>&1 | tee build.log","kind":"bash","label":"Run tests","toolUseId":"toolu_0123456789abcdef","cwd":"/home/user/src/project","target":"local","state":"%s","lane":"exclusive","queuedAt":"2026-12-03T13:00:00.000Z","startedAt":"2026-12-03T13:00:00.010Z","endedAt":"2026-12-03T13:00:09.000Z","wallMs":8990,"pid":12345,"pgid":12345,"outputBytes":123456,"outputLines":2345,"unreadBytes":0,"omittedBytes":0,"outputAddress":"artifact://executions/%s.log","termination":"exited","exitCode":0,"outcome":"success","status":"completed","yielded":true,"version":7}`
	one := func(i int) {
		id := fmt.Sprintf("exec-abcde-%06d", i)
		r := row(id)
		r.Facts = []byte(fmt.Sprintf(facts, id, "running", id))
		j.Append(r)
		j.Append(r)
		s := settled(id, 0)
		s.Facts = []byte(fmt.Sprintf(facts, id, "settled", id))
		s.Attrs = map[string]any{"delivery": "pending", "deliveryId": "dlv-abcde-000001"}
		j.Append(s)
		s.Attrs = map[string]any{"delivery": "done"}
		j.Append(s)
		j.Append(breadcrumb(id))
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for i := range 100 { // warm up: buffers, the index's first marks
		one(i)
	}
	checkpoint(t, j)
	before := heap()
	const n = 5000
	for i := range n {
		one(100 + i)
	}
	checkpoint(t, j)
	after := heap()
	per := (float64(after) - float64(before)) / n
	t.Logf("live heap per execution recorded: %.0f bytes (%d executions, %d records, %d bytes of journal)", per, n, 5*n, fileSize(t, dir))
	// The index holds a mark (16 bytes) every 64 records.
	if per > 64 {
		t.Fatalf("the journal keeps %.0f bytes per execution in memory", per)
	}
}

func fileSize(t *testing.T, dir string) int64 {
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

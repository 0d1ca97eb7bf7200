package transcript

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"testing"
)

func TestCompactKeepsLatestFactsBreadcrumbsNotices(t *testing.T) {
	dir := t.TempDir()
	// A umask that would narrow 0600 to 0400: the compacted file must
	// still be exactly 0600.
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	lost := Record{Type: TypeLost, ExecutionID: "c", Facts: json.RawMessage(`{"state":"settled"}`)}
	j := openJournal(t, dir)
	j.Append(row("a"))                    // 1: replaced by 4
	j.Append(row("b"))                    // 2: still running, kept
	j.Append(notice(1))                   // 3
	j.Append(settled("a", 0))             // 4
	j.Append(breadcrumb("a"))             // 5
	j.Append(row("c"))                    // 6: replaced by 8
	j.Append(Record{Type: TypeRow})       // 7: no execution, kept
	j.Append(lost)                        // 8
	j.Append(Record{Type: "future-kind"}) // 9: unknown, kept
	checkpoint(t, j)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	want := []uint64{2, 3, 4, 5, 7, 8, 9}
	if got := seqs(records(t, j)); !reflect.DeepEqual(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	if got := seqs(fileLines(t, dir)); !reflect.DeepEqual(got, want) {
		t.Fatalf("file %v, want %v", got, want)
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode after compaction %v, %v", st.Mode(), err)
	}
	if un := j.Unsettled(); len(un) != 1 || un[0].ExecutionID != "b" || un[0].Leader == nil {
		t.Fatalf("unsettled after compaction %+v", un)
	}
	// The seq counter carries on, in this run and the next.
	if seq := j.Append(notice(10)); seq != 10 {
		t.Fatalf("seq after compaction %d, want 10", seq)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2 := openJournal(t, dir)
	if got := seqs(records(t, j2)); !reflect.DeepEqual(got, append(want, 10)) {
		t.Fatalf("after reopen %v", got)
	}
	if seq := j2.Append(notice(11)); seq != 11 {
		t.Fatalf("seq after reopen %d, want 11", seq)
	}
	// Nothing is left of the temporary file.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("state dir holds %v", ents)
	}
}

// Appends made while compaction writes the new file are queued and land in
// it afterwards; none of them waits for the compaction.
func TestCompactDuringAppends(t *testing.T) {
	dir := t.TempDir()
	j, start := openIdle(t, dir)
	for i := 0; i < 20; i++ {
		id := fmt.Sprint("x", i)
		j.Append(row(id))
		j.Append(settled(id, 0))
	}
	const writers, each = 4, 25
	j.afterSnapshot = func() {
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Go(func() {
				for i := 0; i < each; i++ {
					j.Append(row(fmt.Sprint("w", w, "-", i)))
				}
			})
		}
		wg.Wait()
	}
	start()
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, j)
	check := func(recs []Record) {
		t.Helper()
		rows := 0
		for _, r := range recs {
			if r.Type == TypeRow {
				rows++
			}
		}
		if len(recs) != 20+writers*each || rows != writers*each {
			t.Fatalf("%d records, %d rows", len(recs), rows)
		}
	}
	check(records(t, j))
	check(fileLines(t, dir))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	check(records(t, openJournal(t, dir)))
}

// Compactions racing with appends, checkpoints and readers: nothing
// appended is lost, and the file always reads back whole.
func TestCompactConcurrent(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir)
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				id := fmt.Sprint("w", w, "-", i)
				j.Append(row(id))
				j.Append(settled(id, i%3))
				j.Append(breadcrumb(id))
			}
		})
	}
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := j.Compact(); err != nil {
				t.Error(err)
				return
			}
			if _, _, err := j.Records(0, 50); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	bg.Wait()
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	check := func(recs []Record) {
		t.Helper()
		kinds := map[string]int{}
		var last uint64
		for _, r := range recs {
			if r.Seq <= last {
				t.Fatalf("seq %d after %d", r.Seq, last)
			}
			last = r.Seq
			kinds[r.Type]++
		}
		if n := writers * each; kinds[TypeSettled] != n || kinds[TypeBreadcrumb] != n || kinds[TypeRow] != 0 {
			t.Fatalf("kinds %v", kinds)
		}
		if last != 3*writers*each {
			t.Fatalf("last seq %d", last)
		}
	}
	check(records(t, j))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	check(fileLines(t, dir))
	check(records(t, openJournal(t, dir)))
}

func TestOpenRemovesStaleCompactionTemp(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, tempPrefix+"12345")
	if err := os.WriteFile(stale, []byte("half a compaction"), 0o600); err != nil {
		t.Fatal(err)
	}
	openJournal(t, dir)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temp still there: %v", err)
	}
}

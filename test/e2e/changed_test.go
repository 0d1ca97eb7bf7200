package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
)

// streamMsg is one message the helper wrote, reply or notification.
type streamMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64
		Message string
	} `json:"error"`
}

// streamClient speaks to a helper on stdio and reads every message it
// writes, in the order written, so a reply's place among the
// notifications is known.
type streamClient struct {
	*rawClient
	msgs chan streamMsg
	log  []streamMsg // read so far, in order
	next int         // request ids
}

func startStream(t *testing.T) *streamClient {
	c := &streamClient{rawClient: startRaw(t), msgs: make(chan streamMsg)}
	go func() {
		defer close(c.msgs)
		for {
			length := -1
			for {
				line, err := c.out.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimRight(line, "\r\n")
				if line == "" {
					break
				}
				if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
					length, _ = strconv.Atoi(v)
				}
			}
			body := make([]byte, length)
			if _, err := io.ReadFull(c.out, body); err != nil {
				return
			}
			var m streamMsg
			if json.Unmarshal(body, &m) != nil {
				m.Method = "invalid JSON: " + string(body)
			}
			c.msgs <- m
		}
	}()
	return c
}

// read takes the next message.
func (c *streamClient) read() streamMsg {
	c.t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			c.t.Fatalf("the helper closed its output:\n%s", c.stderr.String())
		}
		c.log = append(c.log, m)
		return m
	case <-time.After(waitBound):
		c.t.Fatal("nothing from the helper")
	}
	return streamMsg{}
}

// call sends a request and reads up to its reply, which it returns with
// its index in the log.
func (c *streamClient) call(method string, params, result any) int {
	c.t.Helper()
	c.next++
	id := strconv.Itoa(c.next)
	p, _ := json.Marshal(params)
	c.sendFrame(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, p))
	for {
		if m := c.read(); m.Method == "" && string(m.ID) == id {
			if m.Error != nil {
				c.t.Fatalf("%s: %d %s", method, m.Error.Code, m.Error.Message)
			}
			if result != nil {
				if err := json.Unmarshal(m.Result, result); err != nil {
					c.t.Fatalf("%s: %v", method, err)
				}
			}
			return len(c.log) - 1
		}
	}
}

// readUntil reads until done holds of the log.
func (c *streamClient) readUntil(done func() bool) {
	c.t.Helper()
	for !done() {
		c.read()
	}
}

type changedParams struct {
	SessionID string
	Changed   []execution.Facts
	Grown     []execution.Growth
}

// liveTable is what a consumer of exec/changed keeps: seeded by a listing,
// merged from each change, settled executions removed.
type liveTable map[string]execution.Facts

func (l liveTable) merge(fs []execution.Facts) {
	for _, f := range fs {
		if f.State == execution.Settled {
			delete(l, f.ExecutionID)
		} else {
			l[f.ExecutionID] = f
		}
	}
}

// grow merges growth; it reports false for an execution the table lacks.
func (l liveTable) grow(gs []execution.Growth) bool {
	for _, g := range gs {
		f, ok := l[g.ExecutionID]
		if !ok {
			return false
		}
		l[g.ExecutionID] = f.Grow(g)
	}
	return true
}

// exec/changed carries only the executions that changed, each settled one
// once with its final facts and never again; a table seeded by exec/list
// and merged from it is the helper's live set; and 20 executions with
// 4 KiB labels whose output keeps growing cost bytes in proportion to
// their changes (at most about one a second each), not to every live
// execution at every change, and their growth a few numbers each, not
// their facts again, announced together.
func TestChangedCarriesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	c := startStream(t)
	dir := t.TempDir()
	c.call("session/open", map[string]any{"sessionId": "a", "stateDir": dir, "limits": map[string]any{"maxLive": 32}}, nil)
	start := func(command, label string) string {
		var o obs
		c.call("exec/start", map[string]any{"sessionId": "a", "command": command, "label": label, "yieldMs": 0,
			"readOnly": true, "cwd": dir, "env": map[string]string{"MEVEDEL_E2E": "1"}}, &o)
		if o.Facts.ExecutionID == "" || o.Final {
			t.Fatalf("start %q: %+v", command, o.Facts)
		}
		return o.Facts.ExecutionID
	}
	// Two that stay, quiet, so the table has something to agree on.
	stay := []string{start("exec sleep 600", "stays 1"), start("exec sleep 600", "stays 2")}
	seedAt := c.call("exec/list", map[string]any{"sessionId": "a", "as": "user"}, new(struct{}))
	const n = 20
	const ticks = 30 // 3 s of output, a line every 100 ms
	began := time.Now()
	flooding := map[string]bool{}
	for i := range n {
		label := fmt.Sprintf("%02d", i) + strings.Repeat("l", 4096-2)
		flooding[start(fmt.Sprintf("for i in $(seq %d); do echo tick $i; sleep 0.1; done", ticks), label)] = true
	}
	// Until each has come settled.
	settledSeen := map[string]int{}
	c.readUntil(func() bool {
		m := c.log[len(c.log)-1]
		if m.Method == "exec/changed" {
			var p changedParams
			_ = json.Unmarshal(m.Params, &p)
			for _, f := range p.Changed {
				if f.State == execution.Settled {
					settledSeen[f.ExecutionID]++
				}
			}
		}
		return len(settledSeen) == n
	})
	wall := time.Since(began)
	var final struct{ Executions []execution.Facts }
	finalAt := c.call("exec/list", map[string]any{"sessionId": "a", "as": "user"}, &final)

	// The table a consumer keeps, from the first listing on.
	var first struct{ Executions []execution.Facts }
	_ = json.Unmarshal(c.log[seedAt].Result, &first)
	table := liveTable{}
	table.merge(first.Executions)
	appearances := map[string]int{}
	grown := map[string]int{} // growth entries of each
	growthNotes := 0          // exec/changed that carried growth
	widest := 0               // the most executions one said grew
	over := map[string]bool{} // came settled
	var bytes, notes int
	for _, m := range c.log[:finalAt] {
		if m.Method != "exec/changed" {
			continue
		}
		notes++
		bytes += len(m.Params)
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(m.Params, &raw)
		if _, ok := raw["live"]; ok {
			t.Fatal("exec/changed still carries the live set")
		}
		var p changedParams
		if err := json.Unmarshal(m.Params, &p); err != nil || p.SessionID != "a" || len(p.Changed)+len(p.Grown) == 0 {
			t.Fatalf("exec/changed %s: %v", m.Params[:min(len(m.Params), 200)], err)
		}
		ids := map[string]bool{}
		for _, f := range p.Changed {
			if ids[f.ExecutionID] {
				t.Fatalf("%s twice in one exec/changed", f.ExecutionID)
			}
			ids[f.ExecutionID] = true
			if over[f.ExecutionID] {
				t.Fatalf("%s came again after its final facts: %s", f.ExecutionID, f.State)
			}
			over[f.ExecutionID] = f.State == execution.Settled
			appearances[f.ExecutionID]++
		}
		for _, g := range p.Grown {
			if ids[g.ExecutionID] {
				t.Fatalf("%s twice in one exec/changed", g.ExecutionID)
			}
			ids[g.ExecutionID] = true
			appearances[g.ExecutionID]++
			grown[g.ExecutionID]++
			if f, ok := table[g.ExecutionID]; ok && f.Version == g.Version && f.OutputBytes == g.OutputBytes && f.WallMs == g.WallMs {
				t.Errorf("exec/changed says %s grew with nothing new: %+v", g.ExecutionID, g)
			}
		}
		if len(p.Grown) > 0 {
			growthNotes++
		}
		widest = max(widest, len(p.Grown))
		table.merge(p.Changed)
		if !table.grow(p.Grown) {
			t.Fatalf("exec/changed says an execution grew before it named it: %s", m.Params)
		}
	}
	for id := range flooding {
		if settledSeen[id] != 1 {
			t.Errorf("%s came settled %d times, want once", id, settledSeen[id])
		}
	}
	// The table is the helper's live set, facts and all (the two left are
	// quiet: nothing changed since their last exec/changed).
	if got, want := slices.Sorted(maps.Keys(table)), stay; !slices.Equal(got, want) {
		t.Fatalf("table %v, helper's live set %v", got, want)
	}
	if len(final.Executions) != len(stay) {
		t.Fatalf("exec/list: %d live, want %d", len(final.Executions), len(stay))
	}
	for _, f := range final.Executions {
		if g := table[f.ExecutionID]; g.State != f.State || g.Label != f.Label || g.OutputBytes != f.OutputBytes {
			t.Fatalf("table has %s %s %d bytes, exec/list %s %d", f.ExecutionID, g.State, g.OutputBytes, f.State, f.OutputBytes)
		}
	}
	// Each flooding execution changes when registered, running, yielded,
	// settled, and at most once a second for its output.
	limit := int(wall/time.Second) + 6
	for id := range flooding {
		if appearances[id] > limit {
			t.Errorf("%s appeared in %d exec/changed over %v, want at most %d", id, appearances[id], wall, limit)
		}
	}
	// Their growth is announced together, at the end of windows every
	// execution shares, not each at its own time.
	if widest < n/2 {
		t.Errorf("at most %d of %d printing executions grew in one exec/changed", widest, n)
	}
	// Its growth comes as such, not as its facts again.
	for id := range flooding {
		if grown[id] < 2 {
			t.Errorf("%s grew in %d exec/changed, want its growth said at least twice", id, grown[id])
		}
	}
	// Facts of a 4 KiB label take under 6 KiB, and come when it is
	// registered, starts, yields and settles; growth takes under 256 bytes.
	bound := n * (6*6<<10 + limit*256)
	t.Logf("%d exec/changed, %d KiB in %v (bound %d KiB); %d carried growth, of at most %d executions", notes, bytes>>10, wall.Round(time.Millisecond), bound>>10, growthNotes, widest)
	if bytes > bound {
		t.Fatalf("exec/changed took %d KiB, bound %d KiB", bytes>>10, bound>>10)
	}
	c.call("exec/stopAll", map[string]any{"sessionId": "a", "as": "user"}, nil)
}

// Output someone follows streams: while an execution is followed
// (exec/follow, as an Emacs output buffer does), its output growth is
// announced several times a second; beside it, the same command
// unfollowed is announced about once a second.
func TestFollowedOutputGrowthIsAnnouncedOften(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	// Both print only once the follow is in place.
	followed, plain, open := gatedPrinters(t, s, nil)
	h.mustCall("exec/follow", map[string]any{"sessionId": s.id, "executionId": followed, "as": "user"}, nil)
	open()
	h.waitState(followed, execution.Settled)
	h.waitState(plain, execution.Settled)
	sizes := h.announcedSizes(followed, plain)
	nf, np := len(sizes[followed]), len(sizes[plain])
	t.Logf("output sizes announced over about 1.5 s: %d followed, %d not", nf, np)
	if nf < 6 || nf <= np+2 {
		t.Errorf("a followed output's growth was announced %d times, an unfollowed one's %d: the followed one does not stream", nf, np)
	}
}

// gatedPrinters starts two commands that each wait at a gate, then print
// a line every 20 ms for about 1.5 s; the first is started with extra
// params besides. open releases both gates.
func gatedPrinters(t *testing.T, s *session, extra map[string]any) (first, second string, open func()) {
	gates := []string{fifo(t, "gate1"), fifo(t, "gate2")}
	command := func(gate string) string {
		return "read -r _ < " + gate + `; for i in $(seq 75); do echo "line $i"; sleep 0.02; done`
	}
	params := map[string]any{"yieldMs": 0, "lane": "read"}
	for k, v := range extra {
		params[k] = v
	}
	first = s.mustStart(command(gates[0]), params).Facts.ExecutionID
	second = s.mustStart(command(gates[1]), map[string]any{"yieldMs": 0, "lane": "read"}).Facts.ExecutionID
	return first, second, func() {
		release(t, gates[0])
		release(t, gates[1])
	}
}

// announcedSizes returns, for each of ids, the output sizes exec/changed
// announced while it ran.
func (h *helper) announcedSizes(ids ...string) map[string]map[int64]bool {
	sizes := map[string]map[int64]bool{}
	for _, id := range ids {
		sizes[id] = map[int64]bool{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.notes {
		if n.Method != "exec/changed" {
			continue
		}
		var p changedParams
		_ = json.Unmarshal(n.Params, &p)
		for _, f := range p.Changed {
			if m := sizes[f.ExecutionID]; m != nil && f.State == execution.Running && f.OutputBytes > 0 {
				m[f.OutputBytes] = true
			}
		}
		for _, g := range p.Grown { // an execution that grew still runs
			if m := sizes[g.ExecutionID]; m != nil && g.OutputBytes > 0 {
				m[g.OutputBytes] = true
			}
		}
	}
	return sizes
}

// Output followed with output (an Emacs output buffer) comes in
// exec/output several times a second, and those chunks bring its bytes:
// its growth is announced in exec/changed on the one-second windows of
// every other execution, not beside each chunk. With 200 commands
// printing, each notification costs Emacs a few KB to read.
func TestStreamedOutputGrowthIsAnnouncedOnceASecond(t *testing.T) {
	t.Parallel()
	h := startHelper(t)
	s := h.open(nil)
	streamed, plain, open := gatedPrinters(t, s, map[string]any{"follow": true})
	open()
	h.waitState(streamed, execution.Settled)
	h.waitState(plain, execution.Settled)
	sizes := h.announcedSizes(streamed, plain)
	ns, np := len(sizes[streamed]), len(sizes[plain])
	chunks := 0
	for _, o := range h.outputsOf(streamed) {
		if o.Length > 0 {
			chunks++
		}
	}
	t.Logf("over about 1.5 s: %d output chunks; output sizes announced: %d streamed, %d not", chunks, ns, np)
	if chunks < 6 {
		t.Errorf("%d exec/output chunks of a followed output that printed for 1.5 s: it does not stream", chunks)
	}
	if ns > np+2 {
		t.Errorf("a streamed output's growth was announced %d times, an unfollowed one's %d: exec/changed beside its chunks", ns, np)
	}
}

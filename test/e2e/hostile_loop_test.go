package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A slow glob (many logs, a long but valid pattern) runs off the read
// loop: an exec/list sent after it is answered first. A pattern past the
// bound is refused at once, and the loop goes on.
func TestSlowGlobDoesNotHoldTheLoop(t *testing.T) {
	t.Parallel()
	c := startRaw(t)
	dir := filepath.Join(t.TempDir(), "state")
	c.sendFrame(`{"jsonrpc":"2.0","id":"open","method":"session/open","params":{"sessionId":"a","stateDir":"` + dir + `"}}`)
	if m := c.next(); m.Error != nil {
		t.Fatalf("open: %+v", m.Error)
	}
	// Long names, each matched against a star followed by a class of
	// 330 ranges (within the 1024-byte bound): every position of every
	// name is tried against every range, and none matches.
	tail := strings.Repeat("b", 240)
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(dir, "executions", fmt.Sprintf("f%04d%s.log", i, tail)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pattern := "executions/*[" + strings.Repeat("a-a", 330) + "].log"
	glob, _ := json.Marshal(map[string]any{"sessionId": "a", "as": "user", "pattern": pattern})
	began := time.Now()
	c.sendFrame(`{"jsonrpc":"2.0","id":"glob","method":"spool/glob","params":` + string(glob) + `}`)
	c.sendFrame(`{"jsonrpc":"2.0","id":"list","method":"exec/list","params":{"sessionId":"a","as":"user"}}`)
	first, second := c.next(), c.next()
	t.Logf("both answered in %v", time.Since(began))
	if string(first.ID) != `"list"` || first.Error != nil {
		t.Fatalf("first answer %s %+v, want exec/list's: the glob held the loop", first.ID, first.Error)
	}
	var res struct{ Addresses []string }
	if string(second.ID) != `"glob"` || second.Error != nil || json.Unmarshal(second.Result, &res) != nil || len(res.Addresses) != 0 {
		t.Fatalf("glob: %s %s %+v", second.ID, second.Result, second.Error)
	}
	huge, _ := json.Marshal(map[string]any{"sessionId": "a", "as": "user", "pattern": "executions/" + strings.Repeat("*", 1<<20)})
	c.sendFrame(`{"jsonrpc":"2.0","id":"huge","method":"spool/glob","params":` + string(huge) + `}`)
	c.sendFrame(`{"jsonrpc":"2.0","id":"list2","method":"exec/list","params":{"sessionId":"a","as":"user"}}`)
	refused, listed := c.next(), c.next()
	if string(refused.ID) != `"huge"` || refused.Error == nil || refused.Error.Code != -32602 || !strings.Contains(refused.Error.Message, "pattern") {
		t.Fatalf("a 1 MiB pattern: %s %+v, want -32602 naming the pattern", refused.ID, refused.Error)
	}
	if string(listed.ID) != `"list2"` || listed.Error != nil {
		t.Fatalf("after the refusal: %s %+v", listed.ID, listed.Error)
	}
}

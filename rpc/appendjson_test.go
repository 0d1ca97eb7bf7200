package rpc

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
)

// The results and notifications that write their own JSON write what
// encoding/json writes (the facts themselves are held to it in
// execution/wirejson_test.go).
func TestAppendJSONResultsAreEncodingJSON(t *testing.T) {
	code := 3
	f := execution.Facts{ExecutionID: "exec-a-000001", SessionID: "s<1>", Command: "echo \"x\" & y", State: execution.Settled,
		ExitCode: &code, StartedAt: &execution.Time{Time: time.Unix(1e9, 5e6)}, Version: 4}
	for _, v := range []jsonAppender{
		ExecListResult{}, ExecListResult{Executions: []execution.Facts{}}, ExecListResult{Executions: []execution.Facts{f, f}},
		ChangedParams{SessionID: "s\u2028"}, ChangedParams{SessionID: "s", Changed: []execution.Facts{f}},
		ChangedParams{SessionID: "s", Changed: []execution.Facts{}, Grown: []execution.Growth{{ExecutionID: "e\u2028<", WallMs: 5, OutputBytes: 7, OutputLines: 1, OmittedBytes: 2, UnreadBytes: 3, Version: 9}}},
		SettledParams{SessionID: "s", Facts: f},
		execution.Observation{Output: "out\x00put\xff", Facts: f, Final: true, DeliveryID: "d"},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%T:\n got %s\nwant %s", v, got, want)
		}
	}
}

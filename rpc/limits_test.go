package rpc

import (
	"strings"
	"testing"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

func TestCheckBoundsNamesFieldAndLimit(t *testing.T) {
	long := strings.Repeat("x", MaxStringBytes+1)
	stdin := strings.Repeat("i", MaxStdinBytes)
	for _, tc := range []struct {
		p    any
		want string // "" when within every bound
	}{
		{&ExecStartParams{Label: strings.Repeat("x", MaxStringBytes), Stdin: &stdin}, ""},
		{&ExecStartParams{Label: long}, "label is 4097 bytes; the limit is 4096 bytes"},
		{&ExecStartParams{Authority: Authority{Owner: long}}, "owner is 4097 bytes"},
		{&ExecStartParams{Env: map[string]string{long: ""}}, "a name in env is 4097 bytes"},
		{&ExecStartParams{Env: map[string]string{"K": strings.Repeat("v", MaxEnvValueBytes+1)}}, `env["K"] is 131073 bytes; the limit is 131072 bytes`},
		{&ExecStartParams{Argv: []string{"a", strings.Repeat("w", MaxStringBytes+1)}}, ""}, // argv words take a command's bound
		{&OwnerAttendParams{DeliveryIDs: []string{"d", long}}, "deliveryIds[1] is 4097 bytes"},
		{&CancelParams{ID: jsonrpc2.ID{Str: long, IsString: true}}, "id.Str is 4097 bytes"},
		{&SessionOpenParams{StateDir: long}, "stateDir is 4097 bytes"},
	} {
		err := checkBounds(tc.p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%T: %v", tc.p, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || fault.KindOf(err) != fault.InvalidParams):
			t.Errorf("%T: got %v, want invalid params %q", tc.p, err, tc.want)
		}
	}
}

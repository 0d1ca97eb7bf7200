package rpc

import (
	"errors"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/sourcegraph/jsonrpc2"
)

// JSON-RPC error codes of the protocol.
const (
	CodeParse          = -32700
	CodeInvalidRequest = -32600
	CodeNoMethod       = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeNotFound       = -32001
	CodeLimit          = -32002
	CodeRefused        = -32003
	CodeConflict       = -32004
	CodeUnavailable    = -32005
	CodeIO             = -32006
)

var codes = map[fault.Kind]int64{
	fault.InvalidParams: CodeInvalidParams,
	fault.NotFound:      CodeNotFound,
	fault.Limit:         CodeLimit,
	fault.Refused:       CodeRefused,
	fault.Conflict:      CodeConflict,
	fault.Unavailable:   CodeUnavailable,
	fault.IO:            CodeIO,
}

// kindNoMethod is the kind of an unknown method; it is not an internal
// fault kind because only the dispatcher can see it.
const kindNoMethod fault.Kind = "no-method"

// toError is the one place where an internal error becomes a JSON-RPC
// error: its code and error.data.kind come from the error's fault kind.
func toError(err error) *jsonrpc2.Error {
	kind := fault.KindOf(err)
	code, ok := codes[kind]
	switch {
	case kind == kindNoMethod:
		code = CodeNoMethod
	case !ok:
		code, kind = CodeInternal, "internal"
	}
	e := &jsonrpc2.Error{Code: code, Message: err.Error()}
	data := map[string]any{"kind": string(kind)}
	var wd withData
	if errors.As(err, &wd) {
		for k, v := range wd.data {
			if k != "kind" {
				data[k] = v
			}
		}
	}
	e.SetError(data)
	return e
}

// withData is an error whose error.data carries more than its kind, such
// as the journal's health on a failed checkpoint.
type withData struct {
	error
	data map[string]any
}

func (e withData) Unwrap() error { return e.error }

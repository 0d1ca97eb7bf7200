// Package fault classifies errors into the few kinds the protocol names.
//
// Packages below rpc wrap their errors with a Kind; rpc turns the kind into a
// JSON-RPC code in one place. An error without a kind is an internal error.
package fault

import (
	"errors"
	"fmt"
)

// Kind names a class of failure; the strings are the protocol's
// error.data.kind values.
type Kind string

const (
	InvalidParams Kind = "invalid-params"
	NotFound      Kind = "not-found"
	Limit         Kind = "limit"
	Refused       Kind = "refused"
	Conflict      Kind = "conflict"
	Unavailable   Kind = "unavailable"
	IO            Kind = "io"
)

// Error is an error with a kind. Msg is the complete, user-facing message.
type Error struct {
	Kind Kind
	Msg  string
	Err  error // the cause, if any
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind k with a formatted message. Every %w verb
// in format records a cause: errors.Is and errors.As see all of them.
func New(k Kind, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	e := &Error{Kind: k, Msg: err.Error()}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.Err = err // fmt's wrapper carries the causes
	}
	return e
}

// KindOf returns the kind of the first classified error in err's chain, or
// "" when there is none.
func KindOf(err error) Kind {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Kind
	}
	return ""
}

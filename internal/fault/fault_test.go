package fault

import (
	"context"
	"errors"
	"io/fs"
	"testing"
)

func TestNewKeepsEveryCause(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("the client disconnected")
	cancel(cause)
	err := New(Refused, "reading %s: %w (after %w)", "x.log", fs.ErrNotExist, context.Cause(ctx))
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, cause) {
		t.Fatalf("causes lost: %v", err)
	}
	if KindOf(err) != Refused || err.Error() != "reading x.log: file does not exist (after the client disconnected)" {
		t.Fatalf("kind %q, message %q", KindOf(err), err)
	}
	outer := New(IO, "outer: %w", err)
	if KindOf(outer) != IO || !errors.Is(outer, fs.ErrNotExist) {
		t.Fatalf("chain through two faults lost: %v", outer)
	}
	if plain := New(InvalidParams, "no cause %d", 3); errors.Unwrap(plain) != nil {
		t.Fatalf("an error without %%w has a cause: %v", errors.Unwrap(plain))
	}
}

package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/fault"
)

// Bounds on the strings of params (docs/protocol.md, "Limits"). They are
// checked in one place, checkBounds, right after strict decoding, so a
// method or field added later is bounded without being listed.
const (
	// MaxStringBytes bounds every string of params that stringBounds does
	// not name: ids, owners, labels, paths, patterns, env names.
	MaxStringBytes = 4 << 10
	// MaxStdinBytes bounds exec/start's stdin.
	MaxStdinBytes = 16 << 20
	// MaxCharsBytes bounds the input of one exec/observe.
	MaxCharsBytes = 1 << 20
	// MaxEnvValueBytes bounds one env value: the kernel refuses a longer
	// string to exec (MAX_ARG_STRLEN) anyway.
	MaxEnvValueBytes = 128 << 10
)

// stringBounds names, by wire name, the fields whose strings may be longer
// than MaxStringBytes. For an array it bounds each element; for an object
// each value (its names stay within MaxStringBytes).
var stringBounds = map[string]int{
	"command": execution.MaxCommandBytes,
	"argv":    execution.MaxCommandBytes, // all words together: execution
	"stdin":   MaxStdinBytes,
	"chars":   MaxCharsBytes,
	"env":     MaxEnvValueBytes,
}

// checkBounds checks every string reachable from the decoded params p (a
// pointer to a params struct) against its bound, and names the first one
// over it.
func checkBounds(p any) error {
	return boundsOf(reflect.ValueOf(p), "")
}

func boundsOf(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return boundsOf(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case f.Anonymous && name == "":
				// Embedded (Authority): its fields are the message's own.
				if err := boundsOf(v.Field(i), path); err != nil {
					return err
				}
				continue
			case name == "":
				name = f.Name
			}
			if path != "" {
				name = path + "." + name
			}
			if err := boundsOf(v.Field(i), name); err != nil {
				return err
			}
		}
	case reflect.String:
		return within(path, v.Len(), bound(path))
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // raw bytes are not strings of the wire
		}
		for i := range v.Len() {
			if err := boundsOf(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if k := it.Key(); k.Kind() == reflect.String {
				if err := within("a name in "+path, k.Len(), MaxStringBytes); err != nil {
					return err
				}
				if err := boundsOf(it.Value(), fmt.Sprintf("%s[%q]", path, k.String())); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// bound is the bound of the strings at path: that of its top-level field.
func bound(path string) int {
	top, _, _ := strings.Cut(path, ".")
	if i := strings.IndexByte(top, '['); i >= 0 {
		top = top[:i]
	}
	if n, ok := stringBounds[top]; ok {
		return n
	}
	return MaxStringBytes
}

func within(what string, n, limit int) error {
	if n > limit {
		return fault.New(fault.InvalidParams, "%s is %d bytes; the limit is %d bytes", what, n, limit)
	}
	return nil
}

// numberBounds words a number that does not fit its field (a timeoutMs
// of 1e30, a fraction, a negative count) as the bound it breaks, not as
// Go's unmarshal text; "" for any other decoding error.
func numberBounds(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || !strings.HasPrefix(te.Value, "number") {
		return ""
	}
	field, num := te.Field, strings.TrimPrefix(te.Value, "number ")
	if field == "" {
		field = "a number"
	}
	var lo, hi string
	switch t := te.Type; t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		lo, hi = strconv.FormatInt(-1<<(t.Bits()-1), 10), strconv.FormatInt(1<<(t.Bits()-1)-1, 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo, hi = "0", strconv.FormatUint(math.MaxUint64>>(64-t.Bits()), 10)
	default:
		return fmt.Sprintf("%s: %s is not a %s", field, num, te.Type)
	}
	f, perr := strconv.ParseFloat(num, 64)
	switch {
	case perr == nil && f != math.Trunc(f):
		return fmt.Sprintf("%s: %s is not a whole number", field, num)
	case perr == nil && math.Abs(f) < 9e18 && !(f < 0 && lo == "0"):
		// Whole and in range, but written with an exponent.
		return fmt.Sprintf("%s: %s must be written as a whole number (digits only)", field, num)
	}
	return fmt.Sprintf("%s: %s is out of range: it must be a whole number from %s to %s", field, num, lo, hi)
}

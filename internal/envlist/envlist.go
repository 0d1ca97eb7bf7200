// Package envlist reads environments kept as KEY=value lists, the form
// both the local and the remote login-environment capture produce.
package envlist

import (
	"bytes"
	"slices"
	"sort"
	"strings"
)

// shellOwn are variables a login shell sets for itself, not for children.
var shellOwn = []string{"_", "SHLVL", "PWD", "OLDPWD"}

// Parse0 reads NUL-separated KEY=value entries (as `env -0` prints them)
// into a sorted list, leaving out the login shell's own variables and
// those named in drop (the callers name the execution tag variable there,
// so no command inherits a stale tag).
func Parse0(data []byte, drop ...string) []string {
	var vars []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, _, ok := strings.Cut(string(kv), "=")
		if !ok || k == "" || slices.Contains(shellOwn, k) || slices.Contains(drop, k) {
			continue
		}
		vars = append(vars, string(kv))
	}
	sort.Strings(vars)
	return vars
}

// Value returns the value of key in env, the last entry winning; "" when
// it is not there.
func Value(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

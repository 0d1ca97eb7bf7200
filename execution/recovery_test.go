package execution

import "testing"

// Only ids this helper could have made name a log or a tag at recovery.
func TestValidExecutionID(t *testing.T) {
	for id, want := range map[string]bool{
		"exec-abcde-000001":         true,
		"exec-a1b2c-123456789":      true,
		"../..":                     false,
		"":                          false,
		"exec--000001":              false,
		"exec-abcde-":               false,
		"exec-abcde-00001x":         false,
		"exec-ABCDE-000001":         false,
		"exec-abcde-000001/../../x": false,
		"exec-abcde-000001.log":     false,
		"mon-abcde-000001":          false,
		"exec-abc/de-000001":        false,
		"exec-abcde-000001-000002":  false,
		"exec-abcde-0000010000000000000000000001": false,
	} {
		if got := validExecutionID(id); got != want {
			t.Errorf("validExecutionID(%q) = %v, want %v", id, got, want)
		}
	}
}

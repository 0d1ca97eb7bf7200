package sandbox

import "testing"

// Only a system program the box leaves as it is may run without bash in
// it: anything else, or under a path the box hides, is bash's to find.
func TestBoxShowsOnlyUnhiddenSystemPrograms(t *testing.T) {
	b := &Box{hidden: []string{"/usr/local/secret", "/home/me/.ssh"}}
	for path, want := range map[string]bool{
		"/usr/bin/true":             true,
		"/bin/cat":                  true,
		"/sbin/ip":                  true,
		"/usr/local/secret/tool":    false,
		"/usr/local/secret":         false,
		"/usr/local/secretary/tool": true,
		"/home/me/bin/tool":         false,
		"/tmp/tool":                 false,
		"/opt/tool/bin/tool":        false,
		"/usrx/bin/tool":            false,
	} {
		if got := b.ShowsProgram(path); got != want {
			t.Errorf("ShowsProgram(%q) = %v, want %v", path, got, want)
		}
	}
}

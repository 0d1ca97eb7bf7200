package remote

import (
	"syscall"
	"testing"

	"github.com/mevedel/mevedel-exec/process"
)

// The trailer is found however the stream is cut, in pipe and terminal
// line endings; a line with another nonce is output, and what follows
// the trailer (a lingering descendant's) passes on.
func TestTrailerScan(t *testing.T) {
	marker := "\x00MEVEDEL-EXEC-END abc "
	for _, tc := range []struct {
		in, out string
		exit    process.Exit
		found   bool
	}{
		{"hello\n" + marker + "exit 137\nlate\n", "hello\nlate\n", process.Exit{Code: 137}, true},
		{"x\x00y\x00MEVEDEL-EXEC-END other signal 9\n" + marker + "signal 9\r\n", "x\x00y\x00MEVEDEL-EXEC-END other signal 9\n", process.Exit{Signaled: true, Signal: syscall.SIGKILL}, true},
		{"partial \x00MEVEDEL-EX", "partial \x00MEVEDEL-EX", process.Exit{}, false},
		{marker + "exit x\n", "", process.Exit{}, false},
	} {
		for cut := 1; cut <= len(tc.in); cut++ {
			s := trailerScan{marker: []byte(marker)}
			var out []byte
			var exit process.Exit
			found := false
			for i := 0; i < len(tc.in); i += cut {
				o, e, f := s.feed([]byte(tc.in[i:min(i+cut, len(tc.in))]))
				out = append(out, o...)
				if f {
					exit, found = e, true
				}
			}
			out = append(out, s.held...)
			if string(out) != tc.out || exit != tc.exit || found != tc.found {
				t.Fatalf("%q in chunks of %d: %q %+v %v", tc.in, cut, out, exit, found)
			}
		}
	}
}

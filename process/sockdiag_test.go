package process

import (
	"bufio"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// procListening reads every listening socket from /proc/net/tcp{,6}, the
// slow source sock_diag replaces.
func procListening(t *testing.T) []diagListener {
	t.Helper()
	var out []diagListener
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(procNet(os.Getpid(), name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan()
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != tcpListen {
				continue
			}
			ino, _ := strconv.ParseUint(fs[9], 10, 64)
			addr, port, ok := ParseProcAddr(fs[1])
			if !ok {
				t.Fatalf("unparsed %q", fs[1])
			}
			out = append(out, diagListener{inode: ino, address: addr, port: port})
		}
		f.Close()
	}
	return out
}

func sortListeners(ls []diagListener) {
	slices.SortFunc(ls, func(a, b diagListener) int { return int(a.inode) - int(b.inode) })
}

// sock_diag and /proc/net agree on every listening socket of the
// namespace, IPv4, IPv6 and dual-stack alike.
func TestSockDiagMatchesProcNet(t *testing.T) {
	var mine []net.Listener
	for _, a := range [][2]string{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}, {"tcp", ":0"}} {
		l, err := net.Listen(a[0], a[1])
		if err != nil {
			if a[0] == "tcp6" {
				continue // no IPv6 loopback here
			}
			t.Fatal(err)
		}
		defer l.Close()
		mine = append(mine, l)
	}
	// Other processes open and close sockets meanwhile: a comparison
	// counts when sock_diag read the same before and after /proc.
	var diag []diagListener
	for try := 0; ; try++ {
		before, err := diagListening()
		if err != nil {
			t.Fatal(err)
		}
		proc := procListening(t)
		after, err := diagListening()
		if err != nil {
			t.Fatal(err)
		}
		sortListeners(before)
		sortListeners(after)
		sortListeners(proc)
		if !slices.Equal(before, after) {
			if try == 50 {
				t.Fatal("the namespace's listening sockets never held still")
			}
			continue
		}
		if !slices.Equal(before, proc) {
			t.Fatalf("sock_diag %+v\n/proc/net %+v", before, proc)
		}
		diag = before
		break
	}
	for _, l := range mine {
		port := l.Addr().(*net.TCPAddr).Port
		if !slices.ContainsFunc(diag, func(d diagListener) bool { return d.port == port }) {
			t.Fatalf("%v missing from %+v", l.Addr(), diag)
		}
	}
	if !sharesNetNS(os.Getpid()) {
		t.Fatal("the test's own process is not in its own namespace")
	}
}

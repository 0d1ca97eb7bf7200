package process

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Listener is one TCP port a process listens on.
type Listener struct {
	Address string `json:"address"` // the bound address: 0.0.0.0, ::, 127.0.0.1, ...
	Port    int    `json:"port"`
	Pid     int    `json:"pid"`
}

// Listening returns the TCP ports that pid and its descendants listen on,
// by port. It reads the tree's socket inodes from /proc/PID/fd and looks
// them up in /proc/net/tcp and tcp6 (of pid's network namespace) only
// when there is a socket at all: a tree without one costs a directory
// read per process.
func Listening(pid int) []Listener {
	return ListeningIn(Descendants(pid))
}

// ListeningIn is Listening for a given set of processes.
func ListeningIn(pids []int) []Listener {
	owner := map[uint64]int{} // socket inode → pid
	for _, p := range pids {
		socketsOf(p, owner)
	}
	if len(owner) == 0 || len(pids) == 0 {
		return nil
	}
	var out []Listener
	if ls, err := diagListening(); err == nil && sharesNetNS(pids[0]) {
		for _, l := range ls {
			if pid, ok := owner[l.inode]; ok {
				out = append(out, Listener{Address: l.address, Port: l.port, Pid: pid})
			}
		}
	} else {
		for _, name := range []string{"tcp", "tcp6"} {
			out = append(out, listenersIn(procNet(pids[0], name), owner)...)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Port != out[j].Port {
			return out[i].Port < out[j].Port
		}
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		return out[i].Pid < out[j].Pid
	})
	return out
}

// socketsOf adds the socket inodes of pid's descriptors to owner.
func socketsOf(pid int, owner map[uint64]int) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		l, err := os.Readlink(dir + n)
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		if ino, err := strconv.ParseUint(strings.TrimSuffix(l[len("socket:["):], "]"), 10, 64); err == nil {
			if _, ok := owner[ino]; !ok {
				owner[ino] = pid
			}
		}
	}
}

// tcpListen is the state column of a listening socket.
const tcpListen = "0A"

// listenersIn reads one /proc/net/tcp file: sl local rem st txq:rxq tr:tm
// retrnsmt uid timeout inode ...
func listenersIn(path string, owner map[uint64]int) []Listener {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Listener
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != tcpListen {
			continue
		}
		ino, err := strconv.ParseUint(fs[9], 10, 64)
		if err != nil {
			continue
		}
		pid, ok := owner[ino]
		if !ok {
			continue
		}
		if addr, port, ok := ParseProcAddr(fs[1]); ok {
			out = append(out, Listener{Address: addr, Port: port, Pid: pid})
		}
	}
	return out
}

// ParseProcAddr parses an address of /proc/net/tcp{,6}: the address in
// hex, 32-bit words in host (little-endian) order, a colon, the port in
// hex.
func ParseProcAddr(s string) (string, int, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return "", 0, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", 0, false
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", 0, false
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		ip[w], ip[w+1], ip[w+2], ip[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
	}
	if v4 := ip.To4(); v4 != nil && len(raw) == 16 && !bytes.Equal(ip, net.IPv6zero) {
		ip = v4 // ::ffff:a.b.c.d
	}
	return ip.String(), int(port), true
}

// NetNamespace names pid's network namespace (its /proc/PID/ns/net link).
func NetNamespace(pid int) (string, bool) {
	l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return l, err == nil
}

// ListenDigest digests the inodes of the listening TCP sockets of pid's
// network namespace, in any order. Equal digests mean, but for a
// collision, that no socket began or stopped listening there between the
// two reads; a listening socket handed to another process keeps its
// inode.
func ListenDigest(pid int) (uint64, bool) {
	var sum uint64
	if sharesNetNS(pid) {
		if ls, err := diagListening(); err == nil {
			for _, l := range ls {
				sum += mix(l.inode)
			}
			return sum, true
		}
	}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(procNet(pid, name))
		if err != nil {
			return 0, false
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != tcpListen {
				continue
			}
			if ino, err := strconv.ParseUint(fs[9], 10, 64); err == nil {
				sum += mix(ino)
			}
		}
		f.Close()
	}
	return sum, true
}

// mix spreads an inode number over 64 bits (a splitmix64 finaliser), so
// that a sum of them is an order-free digest.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

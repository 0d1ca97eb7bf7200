package process

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// The listening sockets of the helper's own network namespace come from
// the kernel's socket diagnostics (sock_diag over netlink), which walks
// only the listening sockets: /proc/net/tcp walks every socket's hash
// bucket, several milliseconds per read on a large machine, whatever few
// sockets there are. Another namespace (a confined execution's) is read
// from its /proc/PID/net files.

// diagListener is one listening socket: its inode and local address.
type diagListener struct {
	inode   uint64
	address string
	port    int
}

// Layout of the messages (linux/inet_diag.h): a request is the netlink
// header, then family, protocol, extensions, padding, the state mask and
// a socket id of 48 bytes; an answer is the header, then family, state,
// timer, retransmits, the socket id, expiry, receive and send queues, uid
// and inode.
const (
	diagReqLen  = 56
	diagMsgLen  = 72
	diagSockID  = 4  // offset of the socket id in both
	diagInode   = 68 // offset of the inode in an answer
	tcpStateLsn = 10 // TCP_LISTEN
)

var errDiagFormat = errors.New("sock_diag: malformed answer")

// diagListening returns the listening TCP sockets (IPv4 and IPv6) of the
// helper's network namespace.
func diagListening() ([]diagListener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var out []diagListener
	buf := make([]byte, 32<<10)
	for seq, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
		binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
		binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
		binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		binary.NativeEndian.PutUint32(req[8:], uint32(seq+1))
		body := req[unix.NLMSG_HDRLEN:]
		body[0], body[1] = family, unix.IPPROTO_TCP
		binary.NativeEndian.PutUint32(body[4:], 1<<tcpStateLsn)
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return nil, err
		}
		if out, err = diagReceive(fd, buf, family, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// diagReceive reads one dump's answers until its end.
func diagReceive(fd int, buf []byte, family uint8, out []diagListener) ([]diagListener, error) {
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		for b := buf[:n]; len(b) > 0; {
			if len(b) < unix.NLMSG_HDRLEN {
				return nil, errDiagFormat
			}
			size := int(binary.NativeEndian.Uint32(b[0:]))
			if size < unix.NLMSG_HDRLEN || size > len(b) {
				return nil, errDiagFormat
			}
			typ, d := binary.NativeEndian.Uint16(b[4:]), b[unix.NLMSG_HDRLEN:size]
			b = b[min(len(b), (size+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
			switch typ {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(d) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(d)); code != 0 {
						return nil, unix.Errno(-code)
					}
				}
				return nil, errDiagFormat
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(d) < diagMsgLen || d[1] != tcpStateLsn {
					continue
				}
				id := d[diagSockID:]
				port := int(binary.BigEndian.Uint16(id[0:2]))
				var ip net.IP
				if family == unix.AF_INET {
					ip = net.IP(append([]byte(nil), id[4:8]...))
				} else {
					ip = net.IP(append([]byte(nil), id[4:20]...))
					if v4 := ip.To4(); v4 != nil && !ip.Equal(net.IPv6zero) {
						ip = v4 // ::ffff:a.b.c.d
					}
				}
				out = append(out, diagListener{
					inode:   uint64(binary.NativeEndian.Uint32(d[diagInode:])),
					address: ip.String(),
					port:    port,
				})
			}
		}
	}
}

// ownNetNS is the helper's network namespace, read once.
var ownNetNS = sync.OnceValue(func() string {
	ns, _ := NetNamespace(os.Getpid())
	return ns
})

// sharesNetNS reports whether pid is in the helper's network namespace,
// where sock_diag answers for it.
func sharesNetNS(pid int) bool {
	ns, ok := NetNamespace(pid)
	return ok && ns != "" && ns == ownNetNS()
}

// procNet is /proc/PID/net/NAME.
func procNet(pid int, name string) string {
	return "/proc/" + strconv.Itoa(pid) + "/net/" + name
}

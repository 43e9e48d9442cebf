// SPDX-License-Identifier: Apache-2.0
package socklb

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// The client half of the socket tests: a copy of the test binary started inside the test's
// namespace and cgroup (runClient), so that its socket calls go through the programs. It
// reads what to do from the environment and prints a JSON report on its last line.

const (
	envClient = "XLB_SOCKLB_CLIENT" // the client's actions, comma-separated (see TestClientHelper)
	envHold   = "XLB_SOCKLB_HOLD"   // addresses for held UDP sockets, comma-separated (see holdUDP)
	reportTag = "SOCKLB-REPORT "
	heldTag   = "SOCKLB-HELD "
)

// report is what one action saw.
type report struct {
	Action  string   `json:"action"`
	Answers []string `json:"answers"` // the servers' names, one per connection or datagram
	Peers   []string `json:"peers"`   // the remote address the socket reported, one per answer
	Err     string   `json:"err"`     // the first error
	RecvErr string   `json:"recvErr"` // holdUDP: the receive's error, after a send that failed
}

// TestClientHelper is not a test: it is the client process (see envClient).
func TestClientHelper(t *testing.T) {
	if hold := os.Getenv(envHold); hold != "" {
		holdUDP(strings.Split(hold, ","))
		return
	}
	actions := os.Getenv(envClient)
	if actions == "" {
		return
	}
	var out []report
	for _, a := range strings.Split(actions, ",") {
		out = append(out, runAction(a))
	}
	b, _ := json.Marshal(out)
	fmt.Println(reportTag + string(b))
}

// runAction runs one action "kind:address:count": tcp (connect, read the name), udp (one
// unconnected socket, count datagrams), udpconn (a connected socket).
func runAction(a string) report {
	r := report{Action: a}
	kind, rest, _ := strings.Cut(a, "=")
	addr, n := rest, 1
	if i := strings.LastIndex(rest, "*"); i >= 0 {
		addr = rest[:i]
		fmt.Sscan(rest[i+1:], &n)
	}
	fail := func(err error) report {
		if r.Err == "" {
			r.Err = netlab.ErrnoName(err)
		}
		return r
	}
	switch kind {
	case "tcp", "tcp6":
		for range n {
			c, err := net.DialTimeout(kind, addr, 2*time.Second)
			if err != nil {
				return fail(err)
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			b, err := io.ReadAll(c)
			r.Peers = append(r.Peers, c.RemoteAddr().String())
			c.Close()
			if err != nil {
				return fail(err)
			}
			r.Answers = append(r.Answers, strings.TrimSpace(string(b)))
		}
	case "udp":
		dst, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return fail(err)
		}
		network := "udp4"
		if dst.IP.To4() == nil {
			network = "udp6"
		}
		c, err := net.ListenUDP(network, nil)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		buf := make([]byte, 64)
		for range n {
			if _, err := c.WriteTo([]byte("who"), dst); err != nil {
				return fail(err)
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, from, err := c.ReadFrom(buf)
			if err != nil {
				return fail(err)
			}
			r.Answers = append(r.Answers, string(buf[:m]))
			r.Peers = append(r.Peers, from.String())
		}
	case "udpconn":
		for range n {
			c, err := net.Dial("udp", addr)
			if err != nil {
				return fail(err)
			}
			buf := make([]byte, 64)
			c.SetDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Write([]byte("who"))
			var m int
			if err == nil {
				m, err = c.Read(buf)
			}
			r.Peers = append(r.Peers, c.RemoteAddr().String())
			c.Close()
			if err != nil {
				return fail(err)
			}
			r.Answers = append(r.Answers, string(buf[:m]))
		}
	case "mapped":
		// A dual-stack socket (AF_INET6) to an IPv4-mapped address, as Java and many C
		// programs make them; Go's net package would use an AF_INET socket.
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fail(err)
		}
		for range n {
			answer, peer, err := mappedConnect(ap)
			if err != nil {
				return fail(err)
			}
			r.Answers = append(r.Answers, answer)
			r.Peers = append(r.Peers, peer)
		}
	case "udpconnsendto":
		// A connected UDP socket that names its peer on each send (sendto), as some resolvers
		// do: the kernel only accepts replies from the connected endpoint, so every datagram
		// must go there.
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fail(err)
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		defer syscall.Close(fd)
		tv := syscall.Timeval{Sec: 2}
		syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
		sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		if err := syscall.Connect(fd, sa); err != nil {
			return fail(err)
		}
		buf := make([]byte, 64)
		for range n {
			if err := syscall.Sendto(fd, []byte("who"), 0, sa); err != nil {
				return fail(err)
			}
			m, _, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil {
				return fail(err)
			}
			r.Answers = append(r.Answers, string(buf[:m]))
		}
	default:
		r.Err = "unknown action"
	}
	return r
}

// holdUDP is the long-lived client: it connects one UDP socket to each address and asks each
// once, prints the answers (heldTag), waits for a line on stdin, then asks each socket again
// and prints that (reportTag): a report per socket, with the send's error (or else the
// receive's) and, after a failed send, the receive's.
func holdUDP(addrs []string) {
	ask := func(c net.Conn) report {
		r := report{Action: c.RemoteAddr().String()}
		buf := make([]byte, 64)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		_, werr := c.Write([]byte("who"))
		m, rerr := c.Read(buf)
		if werr != nil {
			r.Err = netlab.ErrnoName(werr)
			if rerr != nil {
				r.RecvErr = netlab.ErrnoName(rerr)
			}
			return r
		}
		if rerr != nil {
			r.Err = netlab.ErrnoName(rerr)
			return r
		}
		r.Answers = []string{string(buf[:m])}
		return r
	}
	var (
		conns []net.Conn
		out   []report
	)
	for _, a := range addrs {
		c, err := dialUDP(a)
		if err != nil {
			out = append(out, report{Action: a, Err: netlab.ErrnoName(err)})
			continue
		}
		defer c.Close()
		conns = append(conns, c)
		out = append(out, ask(c))
	}
	b, _ := json.Marshal(out)
	fmt.Println(heldTag + string(b))
	bufio.NewReader(os.Stdin).ReadString('\n')
	out = out[:0]
	for _, c := range conns {
		out = append(out, ask(c))
	}
	b, _ = json.Marshal(out)
	fmt.Println(reportTag + string(b))
}

// dialUDP connects a UDP socket to addr; "mapped=" before an IPv4 address and port makes it a
// dual-stack socket (AF_INET6) connected to the IPv4-mapped address, which Go's net package
// would make an AF_INET one.
func dialUDP(addr string) (net.Conn, error) {
	v4, ok := strings.CutPrefix(addr, "mapped=")
	if !ok {
		return net.Dial("udp", addr)
	}
	ap, err := netip.ParseAddrPort(v4)
	if err != nil {
		return nil, err
	}
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "mapped-udp")
	defer f.Close()
	sa := &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: netip.AddrFrom16(ap.Addr().As16()).As16()}
	if err := syscall.Connect(fd, sa); err != nil {
		return nil, err
	}
	return net.FileConn(f)
}

// mappedConnect connects an AF_INET6 socket to the IPv4-mapped form of ap, reads the server's
// answer and returns it with what getpeername says.
func mappedConnect(ap netip.AddrPort) (string, string, error) {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", "", err
	}
	defer syscall.Close(fd)
	tv := syscall.Timeval{Sec: 2}
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
	sa := &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: netip.AddrFrom16(ap.Addr().As16()).As16()}
	if err := syscall.Connect(fd, sa); err != nil {
		return "", "", err
	}
	peer, err := syscall.Getpeername(fd)
	if err != nil {
		return "", "", err
	}
	p6, ok := peer.(*syscall.SockaddrInet6)
	if !ok {
		return "", "", fmt.Errorf("getpeername: %T", peer)
	}
	buf := make([]byte, 64)
	m, err := syscall.Read(fd, buf)
	if err != nil {
		return "", "", err
	}
	return strings.TrimSpace(string(buf[:m])), netip.AddrPortFrom(netip.AddrFrom16(p6.Addr), uint16(p6.Port)).String(), nil
}

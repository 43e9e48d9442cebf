// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

// IOTimeout bounds every exchange of the client helpers.
const IOTimeout = 3 * time.Second

// Addr returns the client's address of the family of vip.
func (c *Client) Addr(vip netip.Addr) netip.Addr {
	if vip.Is4() {
		return c.Addr4
	}
	return c.Addr6
}

// Dial opens a TCP connection from the client namespace to dst.
func (c *Client) Dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	var conn net.Conn
	err := c.NS.Do(func() (err error) {
		d := net.Dialer{Timeout: IOTimeout}
		conn, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: connect to %s: %w", c.Name, dst, err)
	}
	return conn, nil
}

// DialFrom opens a TCP connection from the client namespace to dst, from local port sport.
func (c *Client) DialFrom(ctx context.Context, sport uint16, dst netip.AddrPort) (net.Conn, error) {
	var conn net.Conn
	err := c.NS.Do(func() (err error) {
		d := net.Dialer{Timeout: IOTimeout,
			LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(c.Addr(dst.Addr()), sport))}
		conn, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: connect to %s from port %d: %w", c.Name, dst, sport, err)
	}
	return conn, nil
}

// ListenUDP opens a UDP socket in the client namespace on port (0: any) of the client's
// address of the family of dst.
func (c *Client) ListenUDP(dst netip.Addr, port uint16) (*net.UDPConn, error) {
	var conn *net.UDPConn
	err := c.NS.Do(func() (err error) {
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(c.Addr(dst), port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: open a UDP socket: %w", c.Name, err)
	}
	return conn, nil
}

// HTTPClient returns an HTTP client whose connections are made from the client namespace.
// keepAlive false makes every request use a new connection.
func (c *Client) HTTPClient(keepAlive bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				return nil, err
			}
			return c.Dial(ctx, ap)
		},
		DisableKeepAlives: !keepAlive,
		MaxIdleConns:      100,
	}
	return &http.Client{Transport: tr, Timeout: IOTimeout}
}

// Get sends one HTTP request to vip:PortHTTP on a new connection and returns the pod's answer
// and the connection's local address (which the pod must have seen).
func (c *Client) Get(ctx context.Context, vip netip.Addr) (Answer, netip.AddrPort, error) {
	conn, err := c.Dial(ctx, netip.AddrPortFrom(vip, PortHTTP))
	if err != nil {
		return Answer{}, netip.AddrPort{}, err
	}
	defer conn.Close()
	hc := NewHTTPConn(conn)
	a, err := hc.get(true)
	return a, hc.Local(), err
}

// HTTPConn is a client's HTTP/1.1 keep-alive connection to a VIP: each Get is one request on
// the same TCP connection (the same flow, the same pod while it lives).
type HTTPConn struct {
	net.Conn
	br *bufio.Reader
}

// NewHTTPConn wraps an open connection.
func NewHTTPConn(c net.Conn) *HTTPConn { return &HTTPConn{Conn: c, br: bufio.NewReader(c)} }

// DialHTTP opens a keep-alive connection from the client to vip:PortHTTP.
func (c *Client) DialHTTP(ctx context.Context, vip netip.Addr) (*HTTPConn, error) {
	conn, err := c.Dial(ctx, netip.AddrPortFrom(vip, PortHTTP))
	if err != nil {
		return nil, err
	}
	return NewHTTPConn(conn), nil
}

// Local returns the connection's local address (unmapped).
func (h *HTTPConn) Local() netip.AddrPort { return unmapAddrPort(h.LocalAddr()) }

// Get sends GET / and returns the pod's answer, checking that the pod saw the connection's
// own address and port.
func (h *HTTPConn) Get() (Answer, error) { return h.get(false) }

func (h *HTTPConn) get(closeConn bool) (Answer, error) {
	_ = h.SetDeadline(time.Now().Add(IOTimeout))
	req := "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"
	if closeConn {
		req = "GET / HTTP/1.1\r\nHost: vip\r\nConnection: close\r\n\r\n"
	}
	if _, err := io.WriteString(h, req); err != nil {
		return Answer{}, err
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		return Answer{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return Answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Answer{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	a, err := ParseAnswer(string(body))
	if err != nil {
		return a, err
	}
	if local := h.Local(); a.Client != local {
		return a, fmt.Errorf("pod %s saw the client as %s, want %s (its real address)", a.Pod, a.Client, local)
	}
	return a, nil
}

// Exchange sends payload on conn and reads one datagram back, resending every 300ms (a first
// datagram may be lost while neighbours resolve), within IOTimeout. Datagrams already waiting on
// conn (late answers to an earlier exchange's resends) are discarded first.
func Exchange(conn *net.UDPConn, dst netip.AddrPort, payload []byte) ([]byte, netip.AddrPort, error) {
	buf := make([]byte, 64<<10)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, _, err := conn.ReadFromUDPAddrPort(buf); err != nil {
			break
		}
	}
	deadline := time.Now().Add(IOTimeout)
	for time.Now().Before(deadline) {
		if _, err := conn.WriteToUDPAddrPort(payload, dst); err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("send to %s: %w", dst, err)
		}
		wait := time.Now().Add(300 * time.Millisecond)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = conn.SetReadDeadline(wait)
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("read from %s: %w", dst, err)
		}
		return buf[:n:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nil
	}
	return nil, netip.AddrPort{}, fmt.Errorf("no answer from %s within %v", dst, IOTimeout)
}

// Who sends a datagram to vip:PortWho from a new socket and returns the pod's answer, checking
// that it came from the VIP and that the pod saw the socket's own address.
func (c *Client) Who(vip netip.Addr) (Answer, error) {
	conn, err := c.ListenUDP(vip, 0)
	if err != nil {
		return Answer{}, err
	}
	defer conn.Close()
	return WhoOn(conn, vip)
}

// WhoOn is Who on an open socket (a fixed 5-tuple).
func WhoOn(conn *net.UDPConn, vip netip.Addr) (Answer, error) {
	dst := netip.AddrPortFrom(vip, PortWho)
	b, from, err := Exchange(conn, dst, []byte("who\n"))
	if err != nil {
		return Answer{}, err
	}
	if from != dst {
		return Answer{}, fmt.Errorf("answer came from %s, want %s", from, dst)
	}
	a, err := ParseAnswer(string(b))
	if err != nil {
		return a, err
	}
	if local := unmapAddrPort(conn.LocalAddr()); a.Client != local {
		return a, fmt.Errorf("pod %s saw the client as %s, want %s (its real address)", a.Pod, a.Client, local)
	}
	return a, nil
}

// Ping sends one ICMP (ICMPv6) echo request from the client namespace to dst and waits for the
// matching reply, within IOTimeout (resending every 300ms). It returns the round-trip time.
func (c *Client) Ping(dst netip.Addr) (time.Duration, error) {
	network, typ, replyTyp := "ip4:icmp", byte(8), byte(0)
	if dst.Is6() {
		network, typ, replyTyp = "ip6:ipv6-icmp", 128, 129
	}
	var pc net.PacketConn
	err := c.NS.Do(func() (err error) {
		pc, err = net.ListenPacket(network, c.Addr(dst).String())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: open an ICMP socket: %w", c.Name, err)
	}
	defer pc.Close()
	id := uint16(os.Getpid())
	deadline := time.Now().Add(IOTimeout)
	buf := make([]byte, 1500)
	for seq := uint16(1); time.Now().Before(deadline); seq++ {
		msg := []byte{typ, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'x', 'l', 'a', 'b'}
		if dst.Is4() { // the kernel computes ICMPv6 checksums itself
			cs := icmpChecksum(msg)
			msg[2], msg[3] = byte(cs>>8), byte(cs)
		}
		sent := time.Now()
		if _, err := pc.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return 0, fmt.Errorf("%s: ping %s: %w", c.Name, dst, err)
		}
		wait := min(deadline.Sub(sent), 300*time.Millisecond)
		_ = pc.SetReadDeadline(sent.Add(wait))
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				break // timeout: send again
			}
			fa, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
			if n >= 8 && fa.Unmap() == dst && buf[0] == replyTyp &&
				uint16(buf[4])<<8|uint16(buf[5]) == id && uint16(buf[6])<<8|uint16(buf[7]) == seq {
				return time.Since(sent), nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no echo reply from %s within %v", c.Name, dst, IOTimeout)
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

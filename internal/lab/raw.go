// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"golang.org/x/sys/unix"
)

// htons is a port or an EtherType in network order, as AF_PACKET sockets want their protocol.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// SendFrames writes whole Ethernet frames out of interface ifname in namespace ns, through an
// AF_PACKET socket: packets no socket API would send (forged sources, crafted ICMP errors).
// Only the lab's own namespaces and addresses: the callers build frames for lab addresses.
func SendFrames(ns *netlab.NS, ifname string, frames [][]byte) error {
	return ns.Do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("raw send on %s: %w", ifname, err)
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("raw send on %s: socket: %w", ifname, err)
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: iface.Index, Halen: 6}
		for _, f := range frames {
			if len(f) < 14 {
				return errors.New("raw send: a frame shorter than its Ethernet header")
			}
			copy(sa.Addr[:], f[:6])
			sa.Protocol = htons(binary.BigEndian.Uint16(f[12:14]))
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return fmt.Errorf("raw send on %s: %w", ifname, err)
			}
		}
		return nil
	})
}

// Capture counts the frames arriving on (or leaving) interface ifname in namespace ns that
// match, from now until ctx ends; it returns a function that stops it and gives the count. The
// socket is opened before Capture returns, so nothing sent after is missed.
func Capture(ctx context.Context, ns *netlab.NS, ifname string, match func([]byte) bool) (func() (int, error), error) {
	type result struct {
		n   int
		err error
	}
	ready := make(chan error, 1)
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		var fd int
		err := ns.Do(func() error {
			iface, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				unix.Close(fd)
				return err
			}
			return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: iface.Index})
		})
		ready <- err
		if err != nil {
			done <- result{err: err}
			return
		}
		defer unix.Close(fd)
		buf := make([]byte, 65536)
		n := 0
		for ctx.Err() == nil {
			m, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				done <- result{n, err}
				return
			}
			if match(buf[:m]) {
				n++
			}
		}
		done <- result{n: n}
	}()
	if err := <-ready; err != nil {
		cancel()
		return nil, fmt.Errorf("capture on %s: %w", ifname, err)
	}
	return func() (int, error) {
		cancel()
		r := <-done
		return r.n, r.err
	}, nil
}

// SPDX-License-Identifier: Apache-2.0
package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// ServeName serves name at addr inside the namespace until t ends: over TCP ("tcp") each
// connection gets name and a newline and is closed; over UDP ("udp") every datagram is answered
// with name. A test's stand-in for a backend that says who it is.
func (n *NS) ServeName(t testing.TB, network string, addr netip.AddrPort, name string) {
	t.Helper()
	var closeFn func() error
	err := n.Do(func() error {
		switch network {
		case "udp":
			u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
			if err != nil {
				return err
			}
			closeFn = u.Close
			go func() {
				buf := make([]byte, 64)
				for {
					_, from, err := u.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					_, _ = u.WriteToUDPAddrPort([]byte(name), from)
				}
			}()
		default:
			l, err := net.Listen("tcp", addr.String())
			if err != nil {
				return err
			}
			closeFn = l.Close
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(name + "\n"))
					c.Close()
				}
			}()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("serve %s on %s/%s in %s: %v", name, addr, network, n.Name, err)
	}
	t.Cleanup(func() { _ = closeFn() })
}

// RemoveCgroup removes an empty cgroup directory, waiting up to a second for the processes that
// were in it to be reaped (a cgroup counts its dead until then). A missing one is no error.
func RemoveCgroup(dir string) error {
	var err error
	for range 50 {
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

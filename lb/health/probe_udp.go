// SPDX-License-Identifier: Apache-2.0
package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// probeUDP sends chk.Payload to dest from a connected UDP socket and waits for the first reply,
// which must contain chk.Expect when that is set. On a connected socket the kernel reports an
// ICMP port unreachable as ECONNREFUSED on the next read (or write).
func (c *Checker) probeUDP(ctx context.Context, dest netip.AddrPort, chk Check) error {
	conn, err := c.dialer.DialContext(ctx, "udp", dest.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := bound(ctx, conn)
	defer stop()

	if _, err := conn.Write(chk.Payload); err != nil {
		return fmt.Errorf("send %d bytes: %w", len(chk.Payload), unreachable(err))
	}
	buf := make([]byte, ReplySearched)
	n, err := conn.Read(buf)
	if err != nil {
		return fmt.Errorf("no reply: %w", unreachable(err))
	}
	if len(chk.Expect) > 0 && !bytes.Contains(buf[:n], chk.Expect) {
		return fmt.Errorf("reply of %d bytes does not contain %q", n, chk.Expect)
	}
	return nil
}

// unreachable names the ICMP port unreachable behind an ECONNREFUSED error, and returns other
// errors as they are.
func unreachable(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("port unreachable: %w", err)
	}
	return err
}

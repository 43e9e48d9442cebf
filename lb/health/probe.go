// SPDX-License-Identifier: Apache-2.0
package health

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// probe sends chk's probe to dest once and returns nil if it succeeded, or why it failed,
// naming the kind and dest. ctx bounds it.
func (c *Checker) probe(ctx context.Context, dest netip.AddrPort, chk Check) error {
	var err error
	switch chk.Kind {
	case TCP:
		err = c.probeTCP(ctx, dest)
	case HTTP, HTTPS:
		err = c.probeHTTP(ctx, dest, chk)
	case UDP:
		err = c.probeUDP(ctx, dest, chk)
	default:
		err = fmt.Errorf("unknown check kind %v", chk.Kind)
	}
	if err != nil {
		return fmt.Errorf("%v probe of %v: %w", chk.Kind, dest, err)
	}
	return nil
}

// probeTCP connects to dest and closes the connection at once.
func (c *Checker) probeTCP(ctx context.Context, dest netip.AddrPort) error {
	conn, err := c.dialer.DialContext(ctx, "tcp", dest.String())
	if err != nil {
		return err
	}
	closeWithReset(conn)
	return nil
}

// closeWithReset closes conn, with a reset if it is a TCP connection: the prober closes first,
// and an orderly close would leave a TIME_WAIT socket on the gateway for every probe.
func closeWithReset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// bound makes conn's reads and writes fail when ctx is done: at its deadline, or when it is
// cancelled. Call the returned function once done with conn.
func bound(ctx context.Context, conn net.Conn) (stop func() bool) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	return context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
}

// timeoutError is a probe's error when the probe ran out of time. It matches
// context.DeadlineExceeded with errors.Is, whatever the error that the deadline caused.
type timeoutError struct {
	err     error
	timeout time.Duration
}

// Error returns the probe's error and the timeout it ran out of.
func (e *timeoutError) Error() string {
	return fmt.Sprintf("%v (timeout %v)", e.err, e.timeout)
}

// Unwrap returns the probe's error.
func (e *timeoutError) Unwrap() error { return e.err }

// Is reports whether target is context.DeadlineExceeded.
func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

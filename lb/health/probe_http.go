// SPDX-License-Identifier: Apache-2.0
package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// userAgent is the User-Agent of HTTP and HTTPS probes, so that backends can tell them apart
// in their logs.
const userAgent = "xlb-health"

// probeHTTP sends a GET of chk.Path to dest, over TLS for HTTPS, and checks the status. It opens
// a connection per probe and asks the server to close it: probes exercise the backend's
// accept path every time, and no idle connections (nor their goroutines) pile up between them.
// The body is not read.
func (c *Checker) probeHTTP(ctx context.Context, dest netip.AddrPort, chk Check) error {
	conn, err := c.dialer.DialContext(ctx, "tcp", dest.String())
	if err != nil {
		return err
	}
	defer closeWithReset(conn)
	stop := bound(ctx, conn)
	defer stop()

	host := chk.Host
	if host == "" {
		host = dest.String()
	}
	rw := conn
	scheme := "http"
	if chk.Kind == HTTPS {
		scheme = "https"
		tc := tls.Client(conn, c.tlsConfig(chk, dest))
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("tls handshake: %w", err)
		}
		rw = tc
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+dest.String()+chk.Path, nil)
	if err != nil {
		return fmt.Errorf("request GET %s: %w", chk.Path, err)
	}
	req.Host = host
	req.Close = true
	req.Header.Set("User-Agent", userAgent)
	if err := req.Write(rw); err != nil {
		return fmt.Errorf("send GET %s: %w", chk.Path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(rw), req)
	if err != nil {
		return fmt.Errorf("read the response to GET %s: %w", chk.Path, err)
	}
	if resp.StatusCode != chk.ExpectStatus {
		return fmt.Errorf("GET %s: status %d, expected %d", chk.Path, resp.StatusCode, chk.ExpectStatus)
	}
	return nil
}

// tlsConfig returns the TLS configuration of an HTTPS probe of dest with chk.
func (c *Checker) tlsConfig(chk Check, dest netip.AddrPort) *tls.Config {
	name := dest.Addr().WithZone("").String()
	if chk.Host != "" {
		name = chk.Host
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		name = strings.Trim(name, "[]")
	}
	return &tls.Config{
		ServerName: name,
		RootCAs:    c.rootCAs,
		// Not verifying is the documented default of HTTPS checks (see HTTPS).
		InsecureSkipVerify: !chk.VerifyTLS,
		MinVersion:         tls.VersionTLS12,
	}
}

// SPDX-License-Identifier: Apache-2.0
package health

import (
	"fmt"
	"strings"
)

// Kind is the kind of probe a [Check] sends.
type Kind int

const (
	// TCP opens a TCP connection and closes it (with a reset, so that probes leave no TIME_WAIT
	// sockets behind); a completed handshake is a success. It is the zero Kind.
	TCP Kind = iota
	// HTTP sends a GET of [Check.Path] over plain TCP and expects [Check.ExpectStatus].
	HTTP
	// HTTPS is HTTP over TLS. The server's certificate is not verified unless
	// [Check.VerifyTLS] is set: a backend is usually addressed by its IP and serves a
	// certificate for its public names, and a health check asks "does it answer", not "is it
	// who it says it is".
	HTTPS
	// UDP sends [Check.Payload] in one datagram and expects a reply (containing
	// [Check.Expect] when that is set). A port-unreachable answer, which the kernel reports as
	// connection refused, or no reply within the timeout is a failure.
	UDP
)

// kindCount is the number of defined kinds; they run from 0 to kindCount-1.
const kindCount = 4

// String returns the kind's lower-case name ("tcp", "http", "https", "udp").
func (k Kind) String() string {
	switch k {
	case TCP:
		return "tcp"
	case HTTP:
		return "http"
	case HTTPS:
		return "https"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// valid reports whether k is one of the defined kinds.
func (k Kind) valid() bool { return k >= 0 && k < kindCount }

// isHTTP reports whether k sends an HTTP request.
func (k Kind) isHTTP() bool { return k == HTTP || k == HTTPS }

// ParseKind returns the Kind named s ("tcp", "http", "https" or "udp", in any case).
func ParseKind(s string) (Kind, error) {
	for k := range Kind(kindCount) {
		if strings.EqualFold(s, k.String()) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("health check kind %q: expected one of tcp, http, https, udp", s)
}

// SPDX-License-Identifier: Apache-2.0
package health

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Defaults of a [Check]'s zero fields, and the bounds Validate enforces.
const (
	// DefaultInterval is the time between two probes of a target when [Check.Interval] is 0.
	DefaultInterval = 5 * time.Second
	// DefaultTimeout bounds one probe when [Check.Timeout] is 0 (or the interval, when that is
	// shorter).
	DefaultTimeout = 2 * time.Second
	// DefaultRise is the number of consecutive successes that make an unhealthy target healthy
	// when [Check.Rise] is 0 (HAProxy's default).
	DefaultRise = 2
	// DefaultFall is the number of consecutive failures that make a healthy target unhealthy
	// when [Check.Fall] is 0 (HAProxy's default).
	DefaultFall = 3
	// DefaultExpectStatus is the HTTP status a check expects when [Check.ExpectStatus] is 0.
	DefaultExpectStatus = 200
	// MinInterval is the shortest interval a check may ask for: it bounds the probe rate of one
	// target at 100 per second.
	MinInterval = 10 * time.Millisecond
	// MaxPayload is the largest UDP payload: what one IPv4 datagram carries.
	MaxPayload = 65507
	// ReplySearched is how many bytes of a UDP reply are read and searched for [Check.Expect],
	// so Expect may not be longer.
	ReplySearched = 2048
)

// Check says how to probe a backend and how to judge the results. Its zero value is a TCP
// connect check with the default interval, timeout and thresholds. Fields that belong to other
// kinds must be left zero (Validate says which one is not).
type Check struct {
	// Kind is the probe sent; the zero Kind is TCP.
	Kind Kind
	// Port is the port probed; 0 probes the target's own port.
	Port uint16
	// Path is the path and query of an HTTP or HTTPS GET; it must start with "/" and "" means
	// "/". HTTP and HTTPS only.
	Path string
	// Host is the Host header of an HTTP or HTTPS request and the TLS server name that
	// VerifyTLS checks the certificate against; "" sends the probed address. HTTP and HTTPS
	// only.
	Host string
	// ExpectStatus is the status code that counts as a success; 0 means 200 and any other
	// status is a failure. HTTP and HTTPS only.
	ExpectStatus int
	// VerifyTLS makes an HTTPS check verify the server's certificate chain and name (against
	// [Options.RootCAs], and Host or the probed IP); by default the certificate is not
	// verified, see [HTTPS]. HTTPS only.
	VerifyTLS bool
	// Payload is the datagram a UDP check sends; UDP checks must have one (at most
	// [MaxPayload] bytes). UDP only.
	Payload []byte
	// Expect, when not empty, must occur within the first [ReplySearched] bytes of the UDP
	// reply; when empty any reply is a success. UDP only.
	Expect []byte
	// Interval is the time between the starts of two probes, jittered by [Options.Jitter];
	// 0 means [DefaultInterval], and it must be at least [MinInterval].
	Interval time.Duration
	// Timeout bounds one probe, connection included; a probe that has not succeeded by then
	// has failed. 0 means [DefaultTimeout] or Interval, whichever is shorter; it may not exceed
	// Interval.
	Timeout time.Duration
	// Rise is the number of consecutive successes that make an unhealthy target healthy; 0
	// means [DefaultRise]. It does not apply to a target's first probe (see the package doc).
	Rise int
	// Fall is the number of consecutive failures that make a healthy target unhealthy; 0
	// means [DefaultFall]. It does not apply to a target's first probe.
	Fall int
}

// Validate returns an error naming the first field of c that is out of range or does not belong
// to c's Kind, or nil when c can be used.
func (c Check) Validate() error {
	if !c.Kind.valid() {
		return fmt.Errorf("Check.Kind %d: expected tcp, http, https or udp", int(c.Kind))
	}
	if err := c.validateKindFields(); err != nil {
		return err
	}
	switch {
	case c.Interval < 0:
		return fmt.Errorf("Check.Interval %v: must not be negative", c.Interval)
	case c.Interval > 0 && c.Interval < MinInterval:
		return fmt.Errorf("Check.Interval %v: below the minimum %v", c.Interval, MinInterval)
	case c.Timeout < 0:
		return fmt.Errorf("Check.Timeout %v: must not be negative", c.Timeout)
	case c.Rise < 0:
		return fmt.Errorf("Check.Rise %d: must not be negative", c.Rise)
	case c.Fall < 0:
		return fmt.Errorf("Check.Fall %d: must not be negative", c.Fall)
	}
	if d := c.withDefaults(); d.Timeout > d.Interval {
		return fmt.Errorf("Check.Timeout %v: exceeds Check.Interval %v", d.Timeout, d.Interval)
	}
	return nil
}

// validateKindFields checks the fields that only some kinds use.
func (c Check) validateKindFields() error {
	if !c.Kind.isHTTP() {
		switch {
		case c.Path != "":
			return fmt.Errorf("Check.Path %q: only for http and https checks, not %v", c.Path, c.Kind)
		case c.Host != "":
			return fmt.Errorf("Check.Host %q: only for http and https checks, not %v", c.Host, c.Kind)
		case c.ExpectStatus != 0:
			return fmt.Errorf("Check.ExpectStatus %d: only for http and https checks, not %v", c.ExpectStatus, c.Kind)
		}
	}
	if c.VerifyTLS && c.Kind != HTTPS {
		return fmt.Errorf("Check.VerifyTLS: only for https checks, not %v", c.Kind)
	}
	if c.Kind != UDP {
		switch {
		case len(c.Payload) > 0:
			return fmt.Errorf("Check.Payload: only for udp checks, not %v", c.Kind)
		case len(c.Expect) > 0:
			return fmt.Errorf("Check.Expect: only for udp checks, not %v", c.Kind)
		}
	}
	switch c.Kind {
	case HTTP, HTTPS:
		if err := validatePath(c.Path); err != nil {
			return fmt.Errorf("Check.Path %q: %w", c.Path, err)
		}
		if strings.ContainsFunc(c.Host, isSpaceOrControl) || strings.ContainsAny(c.Host, "/?#@") {
			return fmt.Errorf("Check.Host %q: expected a host name or host:port", c.Host)
		}
		if c.ExpectStatus != 0 && (c.ExpectStatus < 100 || c.ExpectStatus > 599) {
			return fmt.Errorf("Check.ExpectStatus %d: expected an HTTP status from 100 to 599", c.ExpectStatus)
		}
	case UDP:
		switch {
		case len(c.Payload) == 0:
			return errors.New("Check.Payload: empty, a udp check needs a datagram to send")
		case len(c.Payload) > MaxPayload:
			return fmt.Errorf("Check.Payload: %d bytes, more than a datagram carries (%d)", len(c.Payload), MaxPayload)
		case len(c.Expect) > ReplySearched:
			return fmt.Errorf("Check.Expect: %d bytes, longer than the %d bytes of a reply that are searched", len(c.Expect), ReplySearched)
		}
	}
	return nil
}

// validatePath checks that p ("" allowed) can be sent as an HTTP request target.
func validatePath(p string) error {
	switch {
	case p == "":
		return nil
	case p[0] != '/':
		return errors.New(`must start with "/"`)
	case strings.ContainsFunc(p, isSpaceOrControl):
		return errors.New("must not contain spaces or control characters")
	case strings.Contains(p, "#"):
		return errors.New("must not contain a fragment (#)")
	}
	if _, err := url.ParseRequestURI(p); err != nil {
		return errors.New("not a valid request path")
	}
	return nil
}

// isSpaceOrControl reports whether r may not appear in a request line or header value.
func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// withDefaults returns c with its zero fields set to their defaults, and with Payload and
// Expect copied so that the caller may reuse its slices.
func (c Check) withDefaults() Check {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = min(DefaultTimeout, c.Interval)
	}
	if c.Rise == 0 {
		c.Rise = DefaultRise
	}
	if c.Fall == 0 {
		c.Fall = DefaultFall
	}
	if c.Kind.isHTTP() {
		if c.Path == "" {
			c.Path = "/"
		}
		if c.ExpectStatus == 0 {
			c.ExpectStatus = DefaultExpectStatus
		}
	}
	c.Payload = bytes.Clone(c.Payload)
	c.Expect = bytes.Clone(c.Expect)
	return c
}

// sameProbe reports whether c and o send the same probe and judge its answer the same way,
// whatever their timing and thresholds. Both must have their defaults applied.
func (c Check) sameProbe(o Check) bool {
	return c.Kind == o.Kind && c.Port == o.Port && c.Path == o.Path && c.Host == o.Host &&
		c.ExpectStatus == o.ExpectStatus && c.VerifyTLS == o.VerifyTLS &&
		bytes.Equal(c.Payload, o.Payload) && bytes.Equal(c.Expect, o.Expect)
}

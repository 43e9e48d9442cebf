// SPDX-License-Identifier: Apache-2.0
package health

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheckValidate(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		check Check
		want  string // "" for valid
	}{
		{"zero value is a TCP check", Check{}, ""},
		{"full http", Check{Kind: HTTP, Port: 10256, Path: "/healthz?full=1", Host: "web.example:80", ExpectStatus: 204, Interval: time.Second, Timeout: 500 * ms, Rise: 1, Fall: 1}, ""},
		{"https verifying", Check{Kind: HTTPS, VerifyTLS: true}, ""},
		{"udp with expect", Check{Kind: UDP, Payload: []byte("ping"), Expect: []byte("pong")}, ""},
		{"timeout defaults to a short interval", Check{Interval: 100 * ms}, ""},
		{"timeout equal to interval", Check{Interval: 100 * ms, Timeout: 100 * ms}, ""},

		{"unknown kind", Check{Kind: 9}, "Check.Kind 9: expected tcp, http, https or udp"},
		{"negative kind", Check{Kind: -1}, "Check.Kind -1: expected tcp, http, https or udp"},
		{"negative interval", Check{Interval: -time.Second}, "Check.Interval -1s: must not be negative"},
		{"interval too short", Check{Interval: 5 * ms}, "Check.Interval 5ms: below the minimum 10ms"},
		{"negative timeout", Check{Timeout: -ms}, "Check.Timeout -1ms: must not be negative"},
		{"timeout over interval", Check{Interval: time.Second, Timeout: 2 * time.Second}, "Check.Timeout 2s: exceeds Check.Interval 1s"},
		{"timeout over default interval", Check{Timeout: 6 * time.Second}, "Check.Timeout 6s: exceeds Check.Interval 5s"},
		{"negative rise", Check{Rise: -1}, "Check.Rise -1: must not be negative"},
		{"negative fall", Check{Fall: -2}, "Check.Fall -2: must not be negative"},

		{"path on tcp", Check{Path: "/x"}, `Check.Path "/x": only for http and https checks, not tcp`},
		{"host on udp", Check{Kind: UDP, Payload: []byte("p"), Host: "h"}, `Check.Host "h": only for http and https checks, not udp`},
		{"status on tcp", Check{ExpectStatus: 200}, "Check.ExpectStatus 200: only for http and https checks, not tcp"},
		{"verify on http", Check{Kind: HTTP, VerifyTLS: true}, "Check.VerifyTLS: only for https checks, not http"},
		{"payload on tcp", Check{Payload: []byte("x")}, "Check.Payload: only for udp checks, not tcp"},
		{"expect on https", Check{Kind: HTTPS, Expect: []byte("x")}, "Check.Expect: only for udp checks, not https"},

		{"relative path", Check{Kind: HTTP, Path: "healthz"}, `Check.Path "healthz": must start with "/"`},
		{"path with space", Check{Kind: HTTP, Path: "/a b"}, `Check.Path "/a b": must not contain spaces or control characters`},
		{"path with newline", Check{Kind: HTTPS, Path: "/a\r\nX: y"}, `Check.Path "/a\r\nX: y": must not contain spaces or control characters`},
		{"path with fragment", Check{Kind: HTTP, Path: "/a#b"}, `Check.Path "/a#b": must not contain a fragment (#)`},
		{"path with bad escape", Check{Kind: HTTP, Path: "/%zz"}, `Check.Path "/%zz": not a valid request path`},
		{"host with newline", Check{Kind: HTTP, Host: "a\nb"}, `Check.Host "a\nb": expected a host name or host:port`},
		{"host with path", Check{Kind: HTTP, Host: "a/b"}, `Check.Host "a/b": expected a host name or host:port`},
		{"status too low", Check{Kind: HTTP, ExpectStatus: 42}, "Check.ExpectStatus 42: expected an HTTP status from 100 to 599"},
		{"status too high", Check{Kind: HTTPS, ExpectStatus: 600}, "Check.ExpectStatus 600: expected an HTTP status from 100 to 599"},
		{"udp without payload", Check{Kind: UDP}, "Check.Payload: empty, a udp check needs a datagram to send"},
		{"udp payload too big", Check{Kind: UDP, Payload: make([]byte, MaxPayload+1)}, "Check.Payload: 65508 bytes, more than a datagram carries (65507)"},
		{"udp expect too long", Check{Kind: UDP, Payload: []byte("p"), Expect: make([]byte, ReplySearched+1)}, "Check.Expect: 2049 bytes, longer than the 2048 bytes of a reply that are searched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v, expected nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate: nil, expected %q", tt.want)
			case tt.want != "" && err.Error() != tt.want:
				t.Fatalf("Validate:\n got %q\nwant %q", err, tt.want)
			}
		})
	}
}

func TestTargetValidate(t *testing.T) {
	tests := []struct {
		name   string
		target Target
		want   string
	}{
		{"valid", Target{Key: "k", Addr: netip.MustParseAddrPort("127.0.0.1:80")}, ""},
		{"port from the check", Target{Key: "k", Addr: netip.AddrPortFrom(netip.MustParseAddr("::1"), 0), Check: Check{Port: 80}}, ""},
		{"no key", Target{Addr: netip.MustParseAddrPort("127.0.0.1:80")}, "Target.Key: empty"},
		{"no addr", Target{Key: "k"}, `target "k": Target.Addr: not set`},
		{"unspecified addr", Target{Key: "k", Addr: netip.MustParseAddrPort("0.0.0.0:80")}, `target "k": Target.Addr 0.0.0.0: expected a unicast address`},
		{"multicast addr", Target{Key: "k", Addr: netip.MustParseAddrPort("[ff02::1]:80")}, `target "k": Target.Addr ff02::1: expected a unicast address`},
		{"no port", Target{Key: "k", Addr: netip.MustParseAddrPort("127.0.0.1:0")}, `target "k": Target.Addr 127.0.0.1:0 has no port and Check.Port is 0`},
		{"bad check", Target{Key: "k", Addr: netip.MustParseAddrPort("127.0.0.1:80"), Check: Check{Rise: -1}}, `target "k": Check.Rise -1: must not be negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.target.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestSetErrors(t *testing.T) {
	c := New(Options{Logger: testLogger(t)})
	good := Target{Key: "good", Addr: netip.MustParseAddrPort("127.0.0.1:80")}
	err := c.Set([]Target{
		good,
		{Addr: netip.MustParseAddrPort("127.0.0.1:81")},
		{Key: "bad", Addr: netip.MustParseAddrPort("127.0.0.1:82"), Check: Check{Kind: UDP}},
		{Key: "good", Addr: netip.MustParseAddrPort("127.0.0.1:83")},
	})
	want := strings.Join([]string{
		"targets[1]: Target.Key: empty",
		`target "bad": Check.Payload: empty, a udp check needs a datagram to send`,
		`target "good": targets[3] has the same Key as targets[0]`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("Set: got error\n%v\nwant\n%s", err, want)
	}
	// The valid target was applied, the first of the duplicates wins, the invalid are absent.
	if st, ok := c.Status("good"); !ok || st.Health != Unknown || st.Reason != "not probed yet" {
		t.Errorf(`Status("good") = %+v, %v; expected a new Unknown target`, st, ok)
	}
	if got := c.targets["good"].dest; got != good.Addr {
		t.Errorf(`"good" probes %v, expected the first target's %v`, got, good.Addr)
	}
	if _, ok := c.Status("bad"); ok {
		t.Errorf(`Status("bad") found an invalid target`)
	}
	// A target that becomes invalid is removed.
	if err := c.Set([]Target{{Key: "good", Addr: good.Addr, Check: Check{Interval: time.Nanosecond}}}); err == nil {
		t.Fatal("Set with a 1ns interval: nil error")
	}
	if _, ok := c.Status("good"); ok {
		t.Errorf(`Status("good") found a target whose check became invalid`)
	}
}

func TestParseKind(t *testing.T) {
	for k := range Kind(kindCount) {
		got, err := ParseKind(strings.ToUpper(k.String()))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; expected %v", strings.ToUpper(k.String()), got, err, k)
		}
	}
	if _, err := ParseKind("sctp"); err == nil || err.Error() != `health check kind "sctp": expected one of tcp, http, https, udp` {
		t.Errorf(`ParseKind("sctp"): %v`, err)
	}
	if s := Kind(7).String(); s != "Kind(7)" {
		t.Errorf("Kind(7).String() = %q", s)
	}
}

func TestWithDefaults(t *testing.T) {
	payload := []byte("ping")
	c := Check{Kind: UDP, Payload: payload, Interval: time.Second}.withDefaults()
	if c.Timeout != time.Second || c.Rise != DefaultRise || c.Fall != DefaultFall {
		t.Errorf("defaults of a 1s udp check: %+v", c)
	}
	payload[0] = 'X'
	if string(c.Payload) != "ping" {
		t.Errorf("withDefaults shares the caller's payload: %q", c.Payload)
	}
	h := Check{Kind: HTTP}.withDefaults()
	if h.Path != "/" || h.ExpectStatus != 200 || h.Interval != DefaultInterval || h.Timeout != DefaultTimeout {
		t.Errorf("defaults of an http check: %+v", h)
	}
}

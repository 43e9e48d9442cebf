// SPDX-License-Identifier: Apache-2.0
package bgp

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	good := Config{
		RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001,
		Peers: []Peer{{Address: netip.MustParseAddr("198.18.1.1"), ASN: 65000}},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"asn 0":          {func(c *Config) { c.ASN = 0 }, "asn: must not be 0"},
		"router id v6":   {func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") }, "routerID 2001:db8::1"},
		"no router id":   {func(c *Config) { c.RouterID = netip.Addr{} }, "routerID invalid IP"},
		"peer asn 0":     {func(c *Config) { c.Peers[0].ASN = 0 }, "peers[0]: peer 198.18.1.1: asn: must not be 0"},
		"peer no addr":   {func(c *Config) { c.Peers[0].Address = netip.Addr{} }, "peers[0]: peer invalid IP: address"},
		"peer multicast": {func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("224.0.0.5") }, "peer 224.0.0.5: address"},
		"local family": {func(c *Config) { c.Peers[0].LocalAddress = netip.MustParseAddr("2001:db8::2") },
			"localAddress 2001:db8::2: not the same family"},
		"hold too short":  {func(c *Config) { c.Peers[0].HoldTime = time.Second }, "holdTime 1s: must be 0 (default) or at least 3s"},
		"keepalive>=hold": {func(c *Config) { c.Peers[0].KeepaliveTime = 9 * time.Second }, "keepaliveTime 9s: must be less than holdTime 9s"},
		"fractional":      {func(c *Config) { c.Peers[0].ConnectRetry = 1500 * time.Millisecond }, "connectRetry 1.5s: must be whole seconds"},
		"passive no port": {func(c *Config) { c.Peers[0].Passive = true }, "passive needs listenPort"},
		"gr too long":     {func(c *Config) { c.GracefulRestart = 2 * time.Hour }, "gracefulRestart 2h0m0s"},
		"duplicate peer":  {func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) }, "peers[1]: peer 198.18.1.1: duplicate address"},
	} {
		t.Run(name, func(t *testing.T) {
			c := good
			c.Peers = append([]Peer(nil), good.Peers...)
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestWithDefaults: zero timers and port get the defaults, set ones are kept.
func TestWithDefaults(t *testing.T) {
	p := Peer{Address: netip.MustParseAddr("198.18.1.1"), ASN: 65000, KeepaliveTime: 5 * time.Second}
	want := p
	want.Port, want.HoldTime, want.ConnectRetry = DefaultPort, DefaultHoldTime, DefaultConnectRetry
	if got := p.WithDefaults(); got != want {
		t.Fatalf("WithDefaults() = %+v, want %+v", got, want)
	}
	if p.HoldTime != 0 {
		t.Fatal("WithDefaults changed its receiver")
	}
}

func TestBFDValidate(t *testing.T) {
	ok := Peer{Address: netip.MustParseAddr("198.18.0.1"), ASN: 65000, BFD: BFD{Enabled: true}}
	if err := ok.Validate(); err != nil {
		t.Errorf("BFD with defaults: %v", err)
	}
	if d := ok.BFD.DetectionTime(); d != 900*time.Millisecond {
		t.Errorf("default detection time %v, want 900ms", d)
	}
	for _, c := range []struct {
		b    BFD
		ttl  uint8
		want string
	}{
		{BFD{Enabled: true, TransmitInterval: 10 * time.Millisecond}, 0, "bfd.transmitInterval 10ms: must be between 50ms and 1m0s"},
		{BFD{Enabled: true, ReceiveInterval: 150500 * time.Microsecond}, 0, "bfd.receiveInterval 150.5ms: must be whole milliseconds"},
		{BFD{Enabled: true}, 2, "bfd: single-hop only, but multihopTTL is 2"},
	} {
		p := ok
		p.BFD, p.MultihopTTL = c.b, c.ttl
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.b, err, c.want)
		}
	}
	off := ok
	off.BFD = BFD{TransmitInterval: time.Nanosecond} // off: not checked
	if err := off.Validate(); err != nil {
		t.Errorf("BFD off: %v", err)
	}
}

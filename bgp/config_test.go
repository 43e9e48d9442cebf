package bgp

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	p := Peer{Address: netip.MustParseAddr("198.18.1.1"), ASN: 65000, PasswordFile: filepath.Join(dir, "missing")}
	_, err := New(Config{RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001, Peers: []Peer{p}}, nil)
	if err == nil || !strings.Contains(err.Error(), "peer 198.18.1.1: passwordFile") {
		t.Fatalf("New with a missing password file = %v, want an error naming the peer and field", err)
	}
	p.PasswordFile = filepath.Join(dir, "pw")
	if err := os.WriteFile(p.PasswordFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := p.password(); err != nil || pw != "s3cret" {
		t.Fatalf("password() = %q, %v; want s3cret", pw, err)
	}
}

func TestRoutes(t *testing.T) {
	c, err := ParseCommunity("65000:100")
	if err != nil || c != 65000<<16|100 {
		t.Fatalf("ParseCommunity = %#x, %v", c, err)
	}
	if _, err := ParseCommunity("70000:1"); err == nil {
		t.Fatal("ParseCommunity(70000:1) accepted")
	}
	lc, err := ParseLargeCommunity("4200000000:1:2")
	if err != nil || lc != (LargeCommunity{4200000000, 1, 2}) || lc.String() != "4200000000:1:2" {
		t.Fatalf("ParseLargeCommunity = %v, %v", lc, err)
	}
	for _, bad := range []string{"198.18.100.0/24", "2001:db8::/64", "0.0.0.0/32"} {
		r := Route{Prefix: netip.MustParsePrefix(bad)}
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Validate(%s) = %v, want an error naming it", bad, err)
		}
	}
	s, err := New(Config{RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SetRoutes([]Route{{Prefix: netip.MustParsePrefix("198.18.100.1/32")}, {Prefix: netip.MustParsePrefix("198.18.100.1/32")}})
	if err == nil || !strings.Contains(err.Error(), "198.18.100.1/32: listed twice") {
		t.Fatalf("SetRoutes with a duplicate = %v", err)
	}
	med := uint32(5)
	r := Route{Prefix: netip.MustParsePrefix("2001:db8:100::1/128"), Communities: []uint32{c}, MED: &med}
	if !r.equal(r.clone()) || r.equal(Route{Prefix: r.Prefix}) {
		t.Fatal("Route.equal")
	}
	if _, err := r.apiPath(); err != nil {
		t.Fatal(err)
	}
}

func TestCollector(t *testing.T) {
	s, err := New(Config{RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001,
		Peers: []Peer{{Address: netip.MustParseAddr("198.18.1.1"), ASN: 65000}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCollector(s)
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Fatalf("lint: %v %v", probs, err)
	}
	want := `# HELP xlb_bgp_session_up 1 if the BGP session to the peer is established.
# TYPE xlb_bgp_session_up gauge
xlb_bgp_session_up{peer="198.18.1.1"} 0
# HELP xlb_bgp_announced_prefixes Prefixes the speaker announces.
# TYPE xlb_bgp_announced_prefixes gauge
xlb_bgp_announced_prefixes 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "xlb_bgp_session_up", "xlb_bgp_announced_prefixes"); err != nil {
		t.Fatal(err)
	}
}

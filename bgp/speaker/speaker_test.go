// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xlb-dev/xlb/bgp"
)

// TestWaitForRoutesStart: with WaitForRoutes, Start opens the sessions only if routes were set
// before it; otherwise the first SetRoutes does. The peer is on the loopback at a port where
// nothing listens, so no session ever comes up and nothing leaves the host.
func TestWaitForRoutesStart(t *testing.T) {
	cfg := bgp.Config{RouterID: netip.MustParseAddr("198.18.0.1"), ASN: 65001, ListenPort: -1,
		GracefulRestart: 30 * time.Second, WaitForRoutes: true,
		Peers: []bgp.Peer{{Address: netip.MustParseAddr("127.0.0.1"), ASN: 65000, Port: 1}}}
	route := []bgp.Route{{Prefix: netip.MustParsePrefix("198.18.100.1/32")}}
	peersInGoBGP := func(s *Speaker) int {
		n := 0
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(*api.Peer) { n++ }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, before := range []bool{true, false} {
		s, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if before {
			mustOK(t, s.SetRoutes(route))
		}
		mustOK(t, s.Start(context.Background()))
		if got, want := peersInGoBGP(s), map[bool]int{true: 1, false: 0}[before]; got != want {
			t.Errorf("routes set before Start %v: GoBGP has %d peers after Start, want %d", before, got, want)
		}
		if !before {
			mustOK(t, s.SetRoutes(route))
			if got := peersInGoBGP(s); got != 1 {
				t.Errorf("GoBGP has %d peers after the first SetRoutes, want 1", got)
			}
		}
		if rs := s.Routes(); len(rs) != 1 {
			t.Errorf("routes: %v", rs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		mustOK(t, s.Stop(ctx, KeepRoutes))
		cancel()
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	p := bgp.Peer{Address: netip.MustParseAddr("198.18.1.1"), ASN: 65000, PasswordFile: filepath.Join(dir, "missing")}
	_, err := New(bgp.Config{RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001, Peers: []bgp.Peer{p}}, nil)
	if err == nil || !strings.Contains(err.Error(), "peer 198.18.1.1: passwordFile") {
		t.Fatalf("New with a missing password file = %v, want an error naming the peer and field", err)
	}
	p.PasswordFile = filepath.Join(dir, "pw")
	if err := os.WriteFile(p.PasswordFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := password(p); err != nil || pw != "s3cret" {
		t.Fatalf("password() = %q, %v; want s3cret", pw, err)
	}
	if err := os.WriteFile(p.PasswordFile, []byte(strings.Repeat("x", maxPassword+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := password(p); err == nil || !strings.Contains(err.Error(), "longer than 80 bytes") {
		t.Fatalf("password() of 81 bytes = %v", err)
	}
}

// TestSetRoutes: a list with a prefix twice is refused whole; a route with every attribute
// has a GoBGP path.
func TestSetRoutes(t *testing.T) {
	s, err := New(bgp.Config{RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SetRoutes([]bgp.Route{{Prefix: netip.MustParsePrefix("198.18.100.1/32")}, {Prefix: netip.MustParsePrefix("198.18.100.1/32")}})
	if err == nil || !strings.Contains(err.Error(), "198.18.100.1/32: listed twice") {
		t.Fatalf("SetRoutes with a duplicate = %v", err)
	}
	med, pref := uint32(5), uint32(200)
	for _, pfx := range []string{"198.18.100.1/32", "2001:db8:100::1/128"} {
		r := bgp.Route{Prefix: netip.MustParsePrefix(pfx), Communities: []uint32{65000<<16 | 100},
			LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}}, LocalPref: &pref, MED: &med}
		p, err := path(r)
		if err != nil {
			t.Fatalf("path(%v): %v", pfx, err)
		}
		// origin, next hop (or MP_REACH), communities, large communities, LOCAL_PREF, MED
		if len(p.Attrs) != 6 {
			t.Errorf("path(%v): %d attributes, want 6", pfx, len(p.Attrs))
		}
	}
}

func TestCollector(t *testing.T) {
	s, err := New(bgp.Config{RouterID: netip.MustParseAddr("198.18.1.2"), ASN: 65001,
		Peers: []bgp.Peer{{Address: netip.MustParseAddr("198.18.1.1"), ASN: 65000},
			{Address: netip.MustParseAddr("198.18.1.3"), ASN: 65000, BFD: bgp.BFD{Enabled: true}}}}, nil)
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
xlb_bgp_session_up{peer="198.18.1.3"} 0
# HELP xlb_bgp_announced_prefixes Prefixes the speaker announces.
# TYPE xlb_bgp_announced_prefixes gauge
xlb_bgp_announced_prefixes 0
# HELP xlb_bfd_session_up 1 if the BFD session to the peer is up (peers with BFD only).
# TYPE xlb_bfd_session_up gauge
xlb_bfd_session_up{peer="198.18.1.3"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "xlb_bgp_session_up", "xlb_bgp_announced_prefixes", "xlb_bfd_session_up"); err != nil {
		t.Fatal(err)
	}
}

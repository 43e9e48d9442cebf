package bgp

import (
	"context"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// TestWaitForRoutesStart: with WaitForRoutes, Start opens the sessions only if routes were set
// before it; otherwise the first SetRoutes does. The peer is on the loopback at a port where
// nothing listens, so no session ever comes up and nothing leaves the host.
func TestWaitForRoutesStart(t *testing.T) {
	cfg := Config{RouterID: netip.MustParseAddr("198.18.0.1"), ASN: 65001, ListenPort: -1,
		GracefulRestart: 30 * time.Second, WaitForRoutes: true,
		Peers: []Peer{{Address: netip.MustParseAddr("127.0.0.1"), ASN: 65000, Port: 1}}}
	route := []Route{{Prefix: netip.MustParsePrefix("198.18.100.1/32")}}
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

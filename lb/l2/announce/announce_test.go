// SPDX-License-Identifier: Apache-2.0
package announce

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

var (
	vip4 = netip.MustParseAddr("198.18.100.1")
	vip6 = netip.MustParseAddr("2001:db8:100::1")
)

// segment is a flat L2 site: a client and two gateways on one bridge.
type segment struct {
	client, gw1, gw2 *netlab.NS
}

func newSegment(t *testing.T) segment {
	p := netlab.Prefix()
	br := netlab.New(t, p+"-br")
	s := segment{client: netlab.New(t, p+"-c"), gw1: netlab.New(t, p+"-g1"), gw2: netlab.New(t, p+"-g2")}
	br.MustIP(t, "link add br0 type bridge mcast_snooping 0")
	br.MustIP(t, "link set br0 up")
	for i, n := range []*netlab.NS{s.client, s.gw1, s.gw2} {
		netlab.Veth(t, n, "eth0", fmt.Sprintf("02:00:00:00:00:%02x", i+1), br, fmt.Sprintf("p%d", i), fmt.Sprintf("02:00:00:00:01:%02x", i+1))
		br.MustIP(t, fmt.Sprintf("link set p%d master br0", i))
		n.MustIP(t, fmt.Sprintf("addr add 198.18.20.%d/24 dev eth0", 1+10*i))
		n.MustIP(t, fmt.Sprintf("addr add 2001:db8:20::%d/64 dev eth0 nodad", 1+10*i))
	}
	// The client's VIPs are on the segment: it asks for them by ARP and NDP.
	s.client.MustIP(t, "-4 route add 198.18.100.0/24 dev eth0")
	s.client.MustIP(t, "-6 route add 2001:db8:100::/64 dev eth0")
	return s
}

func listen(t *testing.T, ns *netlab.NS) *Responder {
	t.Helper()
	var r *Responder
	if err := ns.Do(func() (err error) {
		r, err = Listen("eth0", slog.New(slog.NewTextHandler(io.Discard, nil)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// neighMAC is the client's neighbour entry for a: its MAC, or "" while unresolved.
func neighMAC(t *testing.T, ns *netlab.NS, a netip.Addr) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name, "neigh", "show", a.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ip neigh: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	for i, w := range f {
		if w == "lladdr" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

// poke makes the client resolve a (a UDP datagram to it; nothing answers it).
func poke(t *testing.T, ns *netlab.NS, a netip.Addr) {
	t.Helper()
	cmd := ns.Cmd("ping", "-c", "1", "-W", "0.3", a.String())
	_ = cmd.Run()
}

func waitMAC(t *testing.T, ns *netlab.NS, a netip.Addr, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if got := neighMAC(t, ns, a); got == want {
			return time.Since(start)
		} else if time.Since(start) > within {
			t.Fatalf("the client's neighbour entry for %v is %q after %v, want %s", a, got, within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The owner answers ARP and NDP for its VIPs, with its MAC; a new owner's announcements move
// the client's neighbour entries to it at once; two owners see each other.
func TestResponder(t *testing.T) {
	s := newSegment(t)
	r1, r2 := listen(t, s.gw1), listen(t, s.gw2)
	r1.Set(map[netip.Addr]bool{vip4: true, vip6: true})
	for _, v := range []netip.Addr{vip4, vip6} {
		poke(t, s.client, v)
		waitMAC(t, s.client, v, "02:00:00:00:00:02", 2*time.Second)
	}
	if a, _ := r1.Stats(); a == 0 {
		t.Error("gateway 1 counts no answer")
	}
	if a, _ := r2.Stats(); a != 0 {
		t.Errorf("gateway 2 answered %d times for VIPs it does not own", a)
	}
	// Take-over: gateway 2 owns the VIPs, gateway 1 lets go; nobody asks, the announcements do it.
	r1.Set(nil)
	r2.Set(map[netip.Addr]bool{vip4: true, vip6: true})
	for _, v := range []netip.Addr{vip4, vip6} {
		d := waitMAC(t, s.client, v, "02:00:00:00:00:03", 2*time.Second)
		t.Logf("%v: the client's entry moved to gateway 2 %v after the take-over", v, d.Round(time.Millisecond))
	}
	if _, n := r2.Stats(); n == 0 {
		t.Error("gateway 2 counts no announcement")
	}
	// A duplicate owner: each sees the other's announcements.
	r1.Set(map[netip.Addr]bool{vip4: true, vip6: true})
	deadline := time.Now().Add(2 * time.Second)
	for len(r1.Seen()) < 2 || len(r2.Seen()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("duplicate owners not seen: gateway 1 %v, gateway 2 %v", r1.Seen(), r2.Seen())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := r1.Seen()[vip4]; c.MAC != [6]byte{2, 0, 0, 0, 0, 3} {
		t.Errorf("gateway 1 names %x as the other owner of %v", c.MAC, vip4)
	}
}

// A probe finds the host that answers for an address already: gateway 1 probes the VIPs that
// gateway 2 owns, and the client's own address (which its kernel answers).
func TestProbe(t *testing.T) {
	s := newSegment(t)
	r1, r2 := listen(t, s.gw1), listen(t, s.gw2)
	r2.Set(map[netip.Addr]bool{vip4: true, vip6: true})
	client4, client6 := netip.MustParseAddr("198.18.20.1"), netip.MustParseAddr("2001:db8:20::1")
	free := netip.MustParseAddr("198.18.100.9")
	for _, v := range []netip.Addr{vip4, vip6, client4, client6, free} {
		r1.Probe(v)
	}
	time.Sleep(ProbeWait)
	seen := r1.Seen()
	for v, mac := range map[netip.Addr][6]byte{vip4: {2, 0, 0, 0, 0, 3}, vip6: {2, 0, 0, 0, 0, 3},
		client4: {2, 0, 0, 0, 0, 1}, client6: {2, 0, 0, 0, 0, 1}} {
		if seen[v].MAC != mac {
			t.Errorf("probe of %v: saw %x, want %x", v, seen[v].MAC, mac)
		}
	}
	if _, ok := seen[free]; ok {
		t.Errorf("probe of the free %v saw an answer", free)
	}
}

// Malformed and foreign frames are refused, never answered.
func TestParseHostile(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 9}
	good4 := announcement(mac, vip4)
	good4[ethLen+7] = arpRequest
	// A question: sender 198.18.20.1 asks for the VIP.
	copy(good4[ethLen+14:ethLen+18], []byte{198, 18, 20, 1})
	q, ok := parse(good4)
	if !ok || q.answer || q.target != vip4 || q.srcIP != netip.MustParseAddr("198.18.20.1") {
		t.Fatalf("an ARP request parsed as %+v %v", q, ok)
	}
	r := reply(mac, q)
	if p, ok := parse(r); !ok || !p.answer || p.target != vip4 {
		t.Errorf("the reply parses as %+v %v", p, ok)
	}
	na := announcement(mac, vip6)
	if p, ok := parse(na); !ok || !p.answer || p.target != vip6 || !p.v6 {
		t.Errorf("an unsolicited NA parses as %+v %v", p, ok)
	}
	for i := range good4 {
		if i < ethLen+arpLen {
			if _, ok := parse(good4[:i]); ok && i < ethLen+arpLen {
				t.Errorf("ARP truncated to %d bytes accepted", i)
			}
		}
	}
	for i := range na {
		if _, ok := parse(na[:i]); ok {
			t.Errorf("NA truncated to %d bytes accepted", i)
		}
	}
	mut := func(name string, f []byte, at int, v byte) {
		c := append([]byte(nil), f...)
		c[at] = v
		if _, ok := parse(c); ok {
			t.Errorf("%s: accepted", name)
		}
	}
	mut("ARP hardware type", good4, ethLen+1, 6)
	mut("ARP operation", good4, ethLen+7, 3)
	mut("NDP hop limit", na, ethLen+7, 64)
	mut("NDP checksum", na, ethLen+ip6Len+2, na[ethLen+ip6Len+2]^1)
	mut("NDP code", na, ethLen+ip6Len+1, 1)
	mut("IPv6 payload length", na, ethLen+5, 200)
}

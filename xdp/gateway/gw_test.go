// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The golden-packet gateway: one namespace with two veth pairs. ext0 faces clients, int0 the
// cluster. Neighbours are permanent, so bpf_fib_lookup answers with known MACs and expected
// output bytes are exact.
const (
	macExt    = "02:00:00:00:01:01"
	macInt    = "02:00:00:00:01:02"
	macClient = "02:00:00:00:0c:01"
	macRouter = "02:00:00:00:0c:02"
	macBE1    = "02:00:00:00:0b:01"
	macBE2    = "02:00:00:00:0b:02"
	macBE3    = "02:00:00:00:0b:03"
	macBEExt  = "02:00:00:00:0c:20"
)

var (
	client4  = netip.MustParseAddr("198.18.0.10")
	client6  = netip.MustParseAddr("2001:db8::10")
	router4  = netip.MustParseAddr("198.18.0.2")
	router6  = netip.MustParseAddr("2001:db8::2")
	be1v4    = netip.MustParseAddr("198.18.1.10")
	be2v4    = netip.MustParseAddr("198.18.1.11")
	be3v4    = netip.MustParseAddr("198.18.1.12")
	be1v6    = netip.MustParseAddr("2001:db8:1::10")
	be2v6    = netip.MustParseAddr("2001:db8:1::11")
	beExt4   = netip.MustParseAddr("198.18.0.20") // a backend on the client-facing link
	beNoNei4 = netip.MustParseAddr("198.18.1.99") // a backend with no neighbour entry
	vip4     = netip.MustParseAddr("198.18.100.1")
	vip4b    = netip.MustParseAddr("198.18.100.2")
	vip6     = netip.MustParseAddr("2001:db8:100::1")
	other4   = netip.MustParseAddr("198.18.200.1") // routed somewhere, no VIP
	gwExt4   = netip.MustParseAddr("198.18.0.1")
)

// gw is a gateway namespace with the datapath loaded (not pinned) and attached.
type gw struct {
	ns       *netlab.NS
	dp       *Datapath
	ext, int int           // ifindexes
	prog     *ebpf.Program // run instead of dp's program, when set (an A/B benchmark's base)
}

// program is the program run on the gateway's packets.
func (g *gw) program() *ebpf.Program {
	if g.prog != nil {
		return g.prog
	}
	return g.dp.Program()
}

func newGW(t testing.TB, opts Options) *gw {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the datapath tests need root (BPF, netns); run them with `make test` as root")
	}
	p := netlab.Prefix()
	ns := netlab.New(t, p+"g")
	peer := netlab.New(t, p+"p")
	// The peer sends nothing of its own: with IPv6 up its ends would send router solicitations
	// and MLD reports into the gateway, moving the counters the golden tests check exactly.
	peer.Sysctl(t, "net.ipv6.conf.all.disable_ipv6", "1")
	peer.Sysctl(t, "net.ipv6.conf.default.disable_ipv6", "1")
	netlab.Veth(t, ns, "ext0", macExt, peer, "extp", macClient)
	netlab.Veth(t, ns, "int0", macInt, peer, "intp", macBE1)
	for _, c := range []string{
		"addr add 198.18.0.1/24 dev ext0",
		"addr add 2001:db8::1/64 dev ext0 nodad",
		"addr add 198.18.1.1/24 dev int0",
		"addr add 2001:db8:1::1/64 dev int0 nodad",
		"route add 198.18.200.0/24 via 198.18.0.2",
		"neigh replace 198.18.0.10 lladdr " + macClient + " dev ext0 nud permanent",
		"neigh replace 198.18.0.2 lladdr " + macRouter + " dev ext0 nud permanent",
		"neigh replace 198.18.0.20 lladdr " + macBEExt + " dev ext0 nud permanent",
		"neigh replace 2001:db8::10 lladdr " + macClient + " dev ext0 nud permanent",
		"neigh replace 2001:db8::2 lladdr " + macRouter + " dev ext0 nud permanent",
		"neigh replace 198.18.1.10 lladdr " + macBE1 + " dev int0 nud permanent",
		"neigh replace 198.18.1.11 lladdr " + macBE2 + " dev int0 nud permanent",
		"neigh replace 198.18.1.12 lladdr " + macBE3 + " dev int0 nud permanent",
		"neigh replace 2001:db8:1::10 lladdr " + macBE1 + " dev int0 nud permanent",
		"neigh replace 2001:db8:1::11 lladdr " + macBE2 + " dev int0 nud permanent",
	} {
		ns.MustIP(t, c)
	}
	ns.Forwarding(t)
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = 65536
	}
	opts.NoPin = true
	dp, err := Load(opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() { dp.Close() })
	g := &gw{ns: ns, dp: dp}
	err = ns.Do(func() error {
		for n, role := range map[string]datapath.Role{"ext0": datapath.RoleClient, "int0": datapath.RoleCluster} {
			if err := dp.Attach(n, datapath.AttachAuto, role); err != nil {
				return err
			}
		}
		e, err := net.InterfaceByName("ext0")
		if err != nil {
			return err
		}
		i, err := net.InterfaceByName("int0")
		if err != nil {
			return err
		}
		g.ext, g.int = e.Index, i.Index
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// do runs fn in the gateway namespace on one CPU, so that per-CPU caches and counters behave
// deterministically (as under steady traffic on one receive queue).
func (g *gw) do(fn func() error) error { return g.doOn(-1, fn) }

// doOn runs fn in the gateway's namespace on CPU cpu (-1: the last CPU the thread may use).
func (g *gw) doOn(cpu int, fn func() error) error {
	return g.ns.Do(func() error {
		var old, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			return err
		}
		if cpu < 0 {
			cpu = lastCPU(old)
		}
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		defer unix.SchedSetaffinity(0, &old)
		return fn()
	})
}

// lastCPU picks the last CPU of set.
func lastCPU(set unix.CPUSet) int {
	cpu := 0
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			cpu = i
		}
	}
	return cpu
}

// run runs the program on pkt as if it arrived on ifindex.
func (g *gw) run(t testing.TB, pkt []byte, ifindex int) progrun.Result {
	t.Helper()
	var res progrun.Result
	err := g.do(func() error {
		var err error
		res, err = progrun.XDP(g.program(), pkt, ifindex, 1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (g *gw) reasons(t testing.TB) map[Reason]uint64 {
	t.Helper()
	r, err := g.dp.ReasonCounts()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// table returns a Maglev table of size m filled round-robin with ids (a stand-in for lb/maglev).
func table(m int, ids ...datapath.BackendID) []datapath.BackendID {
	tb := make([]datapath.BackendID, m)
	for i := range tb {
		tb[i] = ids[i%len(ids)]
	}
	return tb
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

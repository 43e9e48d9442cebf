// SPDX-License-Identifier: Apache-2.0
package conformance

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/afxdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

func requireRoot(t *testing.T) {
	t.Helper()
	netlab.RequireRoot(t, "it loads BPF programs")
}

// xdpGateway is the XDP datapath with its maps pinned in a directory of the test's own; Reopen
// closes it (the pins stay) and loads them again, as a restarted daemon does.
func xdpGateway(t *testing.T) Gateway {
	requireRoot(t)
	dir := "/sys/fs/bpf/" + netlab.Prefix()
	opts := gateway.Options{PinPath: dir, MaglevSlots: 1 << 20, Settings: datapath.Settings{ConntrackSize: 4096, Seed: 7}}
	load := func(t *testing.T) *gateway.Datapath {
		d, err := gateway.Load(opts)
		must(t, err)
		return d
	}
	return Gateway{
		New: func(t *testing.T) datapath.Services {
			d := load(t)
			t.Cleanup(func() {
				if d, err := gateway.Load(opts); err == nil {
					d.Remove()
				}
				os.RemoveAll(dir)
			})
			t.Cleanup(func() { d.Close() })
			return d
		},
		Reopen: func(t *testing.T, dp datapath.Services) datapath.Services {
			must(t, dp.(*gateway.Datapath).Close())
			d := load(t)
			t.Cleanup(func() { d.Close() })
			return d
		},
	}
}

// TestXDPGateway runs the reconciler scenarios against the XDP datapath's maps, adoption from
// its pins included.
func TestXDPGateway(t *testing.T) {
	RunGateway(t, xdpGateway(t))
}

// noHops is a next-hop resolver for an engine that sends nothing.
type noHops struct{}

func (noHops) Lookup(netip.Addr) (afxdp.Hop, afxdp.HopKind) { return afxdp.Hop{}, afxdp.HopUnreachable }
func (noHops) Source(netip.Addr) (netip.Addr, bool)         { return netip.Addr{}, false }

// TestAFXDPGateway runs the reconciler scenarios against the AF_XDP engine (nothing of it
// outlives the process: a new process would find nothing, so Reopen hands back the same engine).
func TestAFXDPGateway(t *testing.T) {
	RunGateway(t, Gateway{
		New: func(t *testing.T) datapath.Services {
			e, err := afxdp.NewEngine(datapath.Settings{Seed: 7}, noHops{})
			must(t, err)
			return e
		},
		Reopen: func(_ *testing.T, dp datapath.Services) datapath.Services { return dp },
	})
}

// TestXDPPlannedTrafficFlows: after the reconciler applied a plan, a SYN to the VIP run through
// the XDP program goes to the backend the plan's table names for the flow's slot (the program
// hashes exactly as datapath.FlowHash).
func TestXDPPlannedTrafficFlows(t *testing.T) {
	requireRoot(t)
	p := netlab.Prefix()
	ns := netlab.New(t, p+"g")
	peer := netlab.New(t, p+"p")
	netlab.Veth(t, ns, "ext0", "02:00:00:00:01:01", peer, "extp", "02:00:00:00:0c:01")
	netlab.Veth(t, ns, "int0", "02:00:00:00:01:02", peer, "intp", "02:00:00:00:0b:01")
	for _, c := range []string{"addr add 198.18.0.1/24 dev ext0", "addr add 198.18.1.1/24 dev int0"} {
		ns.MustIP(t, c)
	}
	bes := []string{"198.18.1.10", "198.18.1.11", "198.18.1.12"}
	for i, b := range bes {
		ns.MustIP(t, fmt.Sprintf("neigh replace %s lladdr 02:00:00:00:0b:1%d dev int0 nud permanent", b, i))
	}
	ns.Forwarding(t)
	dp, err := gateway.Load(gateway.Options{NoPin: true, MaglevSlots: 1 << 20, Settings: datapath.Settings{ConntrackSize: 4096, Seed: 7}})
	must(t, err)
	t.Cleanup(func() { dp.Close() })
	var ext int
	must(t, ns.Do(func() error {
		for n, role := range map[string]datapath.Role{"ext0": datapath.RoleClient, "int0": datapath.RoleCluster} {
			if err := dp.Attach(n, datapath.AttachAuto, role); err != nil {
				return err
			}
		}
		i, err := net.InterfaceByName("ext0")
		ext = i.Index
		return err
	}))
	r, err := reconcile.New(dp, nil)
	must(t, err)
	d := Plan(t, Web(bes...))
	_, err = r.Apply(d)
	must(t, err)
	fp := d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}]
	client := netip.MustParseAddr("198.18.0.10")
	seen := map[string]bool{}
	for port := uint16(40000); port < 40060; port++ {
		want := fp.Backends[fp.Table[datapath.FlowHash(7, client, port, 80, datapath.TCP, false)%uint32(len(fp.Table))]].Key
		var res progrun.Result
		must(t, ns.Do(func() error {
			var err error
			res, err = progrun.XDP(dp.Program(), syn(t, client, port), ext, 1)
			return err
		}))
		dst := netip.AddrFrom4([4]byte(res.Data[30:34]))
		dport := uint16(res.Data[36])<<8 | uint16(res.Data[37])
		if got := netip.AddrPortFrom(dst, dport); got != want || res.Verdict != 4 {
			t.Fatalf("flow from port %d: verdict %d to %s, plan says %s", port, res.Verdict, got, want)
		}
		seen[want.String()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("60 flows reached only %v", seen)
	}
}

func syn(t *testing.T, src netip.Addr, sport uint16) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP,
		SrcIP: src.AsSlice(), DstIP: net.ParseIP("198.18.100.1").To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 80, SYN: true, Window: 1000}
	must(t, tcp.SetNetworkLayerForChecksum(ip))
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0xc, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 1, 1},
		EthernetType: layers.EthernetTypeIPv4}
	buf := gopacket.NewSerializeBuffer()
	must(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp))
	return buf.Bytes()
}

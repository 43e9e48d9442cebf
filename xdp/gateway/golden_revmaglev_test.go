// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestGoldenReverseNATMaglev: the reply of an endpoint that serves two VIPs, on a gateway that
// never saw the flow (no conntrack entry), takes the VIP whose Maglev table alone sends the
// reply's forward tuple to that endpoint (nat_reverse_maglev, no entry written). When both
// tables, or neither, send it there, the reply falls back to conntrack: passed untranslated
// without an entry, translated by the entry once this gateway saw the flow's SYN.
func TestGoldenReverseNATMaglev(t *testing.T) {
	const seed = 0x5eed
	const m = 13
	g := newGW(t, Options{Settings: datapath.Settings{Seed: seed}})
	type fam struct {
		name               string
		client, vip        netip.Addr
		shared, other      netip.Addr
		idA, idB           datapath.VIPID
		bidShared, bidElse datapath.BackendID
	}
	fams := []fam{
		{"ipv4", client4, vip4, be2v4, be3v4, 11, 12, 20, 21},
		{"ipv6", client6, vip6, be2v6, be1v6, 13, 14, 22, 23},
	}
	const portA, portB, bport = 91, 92, 9100
	for _, f := range fams {
		t.Run(f.name, func(t *testing.T) {
			d := g.dp
			must(t, d.UpsertBackend(f.bidShared, datapath.Backend{Addr: f.shared, Port: bport}))
			must(t, d.UpsertBackend(f.bidElse, datapath.Backend{Addr: f.other, Port: bport}))
			tableA := table(m, f.bidShared, f.bidElse)
			tableB := table(m, f.bidElse, f.bidElse, f.bidShared)
			for _, v := range []struct {
				id    datapath.VIPID
				port  uint16
				table []datapath.BackendID
			}{{f.idA, portA, tableA}, {f.idB, portB, tableB}} {
				must(t, d.UpsertVIP(datapath.Frontend{Addr: f.vip, Port: v.port, Proto: datapath.TCP}, datapath.VIPConfig{ID: v.id}))
				must(t, d.SetMaglevTable(v.id, v.table))
			}
			ep := datapath.Endpoint{Addr: f.shared, Port: bport, Proto: datapath.TCP}
			must(t, d.SetReverse(ep, datapath.ReverseNAT{Ambiguous: true, Candidates: [datapath.MaxReverseCandidates]datapath.VIPID{f.idA, f.idB}}))
			if got, err := d.Reverses(); err != nil || got[ep].Candidates[0] != f.idA || got[ep].Candidates[1] != f.idB {
				t.Fatalf("reverse entry read back: %+v, %v", got[ep], err)
			}

			// Find client ports whose forward tuples the two tables send to the shared endpoint
			// under A only, under both, and under neither (with the Go twin of the hash).
			picks := func(cport uint16, vport uint16, tb []datapath.BackendID) bool {
				return tb[datapath.FlowHash(seed, f.client, cport, vport, 6, false)%m] == f.bidShared
			}
			ports := map[string]uint16{}
			for cport := uint16(40000); len(ports) < 3 && cport < 41000; cport++ {
				a, b := picks(cport, portA, tableA), picks(cport, portB, tableB)
				kind := map[[2]bool]string{{true, false}: "A only", {true, true}: "both", {false, false}: "neither"}[[2]bool{a, b}]
				if _, ok := ports[kind]; kind != "" && !ok {
					ports[kind] = cport
				}
			}
			if len(ports) != 3 {
				t.Fatalf("no client ports for every case: %v", ports)
			}
			reply := func(cport uint16) pk {
				return pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(f.shared, bport), Dst: ap(f.client, cport),
					Proto: layers.IPProtocolTCP, Flags: "SA", Payload: []byte("r")}
			}
			toClient := func(p pk, vport uint16) pk {
				p.SrcMAC, p.DstMAC, p.Src, p.TTL = macExt, macClient, ap(f.vip, vport), 63
				return p
			}
			noCT := want{xdpPass, nil, map[Reason]uint64{ReasonPassReverseNoCT: 1}}

			in := reply(ports["A only"])
			g.expect(t, in.bytes(t), g.int, want{xdpRedirect, toClient(in, portA).bytes(t),
				map[Reason]uint64{ReasonNATReverse: 1, ReasonNATReverseMaglev: 1, ReasonFwdRedirect: 1}})
			flows, err := d.Flows()
			must(t, err)
			for _, fl := range flows {
				if fl.Src.Addr() == f.shared || fl.Dst.Addr() == f.shared {
					t.Fatalf("the Maglev-derived reply wrote a conntrack entry: %+v", fl)
				}
			}
			g.expect(t, reply(ports["both"]).bytes(t), g.int, noCT)
			g.expect(t, reply(ports["neither"]).bytes(t), g.int, noCT)

			// This gateway sees the SYN of the "both" tuple to B: its reverse conntrack entry
			// decides (and would win over a Maglev match too).
			syn := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(f.client, ports["both"]), Dst: ap(f.vip, portB),
				Proto: layers.IPProtocolTCP, Flags: "S"}
			synOut := syn
			synOut.SrcMAC, synOut.DstMAC, synOut.Dst, synOut.TTL = macInt, macBE2, ap(f.shared, bport), 63
			g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synOut.bytes(t), fwd(ReasonFwdRedirect)})
			in = reply(ports["both"])
			g.expect(t, in.bytes(t), g.int, want{xdpRedirect, toClient(in, portB).bytes(t),
				map[Reason]uint64{ReasonNATReverse: 1, ReasonFwdRedirect: 1}})

			// Without candidates (more frontends than the datapath lists), conntrack only.
			must(t, d.SetReverse(ep, datapath.ReverseNAT{Ambiguous: true}))
			g.expect(t, reply(ports["A only"]).bytes(t), g.int, noCT)
		})
	}
}

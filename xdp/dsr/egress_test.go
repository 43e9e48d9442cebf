// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestGoldenFragmentedReply: a Pod's UDP reply fragmented on its way out gets the VIP on every
// fragment: the first through its flow (ports and checksum rewritten), the later ones through
// the first (source only). A later fragment of a datagram whose first fragment was not
// rewritten is left alone.
func TestGoldenFragmentedReply(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{})
			vip, pod, cl := ap(fam.vip, 53), ap(fam.pod, 5353), ap(fam.client, 40000)
			allow(t, d, vip, protoOf(layers.IPProtocolUDP), pod)
			fwd := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: vip}
			expect(t, d, Ingress, "carried", fwd.bytes(t), actOK, fwd.without().bytes(t))

			payload := make([]byte, 100)
			for i := range payload {
				payload[i] = byte(i)
			}
			reply := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolUDP, Payload: payload, ID: 0x4242}
			want := reply
			want.Src = vip
			l4, wantL4 := reply.l4(t), want.l4(t)
			var in1, in2, out1, out2 []byte
			if fam.name == "IPv4" {
				first, rest := reply, reply
				first.MF = true
				rest.FragOff = 48
				wf, wr := first, rest
				wf.Src, wr.Src = vip, vip
				in1, in2 = frame(t, first.ip(t, l4[:48])), frame(t, rest.ip(t, l4[48:]))
				out1, out2 = frame(t, wf.ip(t, wantL4[:48])), frame(t, wr.ip(t, wantL4[48:]))
			} else {
				in1, in2 = reply.ip6Frag(t, l4[:48], 0, true), reply.ip6Frag(t, l4[48:], 48, false)
				out1, out2 = want.ip6Frag(t, wantL4[:48], 0, true), want.ip6Frag(t, wantL4[48:], 48, false)
			}
			expect(t, d, Egress, "later fragment before its first", in2, actOK, nil)
			expect(t, d, Egress, "first fragment", in1, actOK, out1)
			expect(t, d, Egress, "later fragment", in2, actOK, out2)
			checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 1, "reply_rewritten": 1, "reply_frag_rewritten": 1})
		})
	}
}

// TestIdleTimeout: a flow idle past its protocol's timeout no longer has its replies (or ICMP
// errors) rewritten; a carried packet records it again, and a rewritten reply refreshes it.
func TestIdleTimeout(t *testing.T) {
	d := newDP(t, Options{TCPTimeout: 30 * time.Second, UDPTimeout: 2 * time.Second})
	for _, proto := range protos {
		vip, pod, cl := ap(vip4, 80), ap(pod4, 8080), ap(client4, 40000)
		allow(t, d, vip, protoOf(proto), pod)
		fwd := pk{Src: cl, Dst: pod, Proto: proto, Flags: "S", Carrier: vip}
		reply := pk{Src: pod, Dst: cl, Proto: proto, Flags: "SA"}
		want := reply
		want.Src = vip
		expect(t, d, Ingress, proto.String()+" carried", fwd.bytes(t), actOK, fwd.without().bytes(t))

		// Idle for 10 s: past UDP's 2 s, within TCP's 30 s.
		age(t, d, 10*time.Second)
		if proto == layers.IPProtocolUDP {
			expect(t, d, Egress, "UDP reply after 10 s", reply.bytes(t), actOK, nil)
			expect(t, d, Ingress, "UDP carried again", fwd.bytes(t), actOK, fwd.without().bytes(t))
		}
		expect(t, d, Egress, proto.String()+" reply", reply.bytes(t), actOK, want.bytes(t))
		fs, err := d.Flows()
		must(t, err)
		for _, f := range fs {
			if f.Proto == protoOf(proto) && f.Idle > 2*time.Second {
				t.Errorf("%s: flow idle %s after a rewritten reply: not refreshed", proto, f.Idle)
			}
		}
		age(t, d, 40*time.Second)
		expect(t, d, Egress, proto.String()+" reply after 40 s", reply.bytes(t), actOK, nil)
	}
	checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 3, "reply_rewritten": 2, "reply_expired": 3})
}

// age makes every flow, half-open ones included, look idle for idle more. It moves their times
// back, which the boot-relative clock allows only as far as its zero: on a host (or a test guest)
// booted less than idle ago, it first waits until the flows' times are far enough from zero
// (at most idle), rather than wrap them into the future, where the program counts a time as
// live.
func age(t *testing.T, d *Datapath, idle time.Duration) {
	t.Helper()
	for _, m := range []*ebpf.Map{d.objs.Flows, d.objs.HalfOpen} {
		var k dsrFlowKey
		var v dsrFlowValue
		var keys []dsrFlowKey
		var vals []dsrFlowValue
		for it := m.Iterate(); it.Next(&k, &v); {
			if v.SeenNs < uint64(idle) {
				now, err := coarseNow()
				must(t, err)
				wait := time.Duration(uint64(idle) - v.SeenNs)
				t.Logf("the clock reads %v since boot: waiting %v so that a flow can look %v idle", time.Duration(now), wait, idle)
				time.Sleep(wait)
				v.SeenNs = 0 // the clock's zero is now its time idle before the moment it was read
			} else {
				v.SeenNs -= uint64(idle) // clock-ok: checked not to wrap
			}
			keys, vals = append(keys, k), append(vals, v)
		}
		for i := range keys {
			must(t, m.Put(&keys[i], &vals[i]))
		}
	}
}

// TestCounterNames: every counter of the programs has a name, and the names are unique.
func TestCounterNames(t *testing.T) {
	if int(dsrDsrStatSTAT_MAX) != len(counterNames) {
		t.Fatalf("bpf/stats.h has %d counters, counterNames %d", dsrDsrStatSTAT_MAX, len(counterNames))
	}
	seen := map[string]bool{}
	for _, n := range counterNames {
		if seen[n] {
			t.Errorf("counter name %s twice", n)
		}
		seen[n] = true
	}
	if fmt.Sprint(counterNames[dsrDsrStatSTAT_REPLY_REWRITTEN]) != "reply_rewritten" ||
		counterNames[dsrDsrStatSTAT_DROP_NOT_ALLOWED] != "drop_carrier_not_allowed" {
		t.Error("counterNames is not in the order of enum dsr_stat")
	}
}

// TestHeaderMatchesGo: bpf/maps.h's sizes are the loader's.
func TestHeaderMatchesGo(t *testing.T) {
	src, err := os.ReadFile("bpf/maps.h")
	must(t, err)
	defs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(\w+)\s+(\w+)`).FindAllStringSubmatch(string(src), -1) {
		defs[m[1]] = m[2]
	}
	for name, want := range map[string]int{"MAX_DSR_SERVICES": MaxServices, "DEFAULT_FLOWS": DefaultFlows, "DEFAULT_HALF_OPEN": halfOpenSize(DefaultFlows), "EP_FILTER_LOG2": epFilterLog2} {
		if defs[name] != strconv.Itoa(want) {
			t.Errorf("bpf/maps.h: %s = %q, Go says %d", name, defs[name], want)
		}
	}
}

// TestEndpointFilter: a flow whose Pod address has no bit in the endpoint filter is not looked
// up (its replies pass untouched); adding a pair with that endpoint sets the bit the program
// reads (Go's epBit and the program's ep_bit agree), and Load rebuilds the filter from the
// flows, so a flow whose pair went keeps its replies rewritten across a restart.
func TestEndpointFilter(t *testing.T) {
	netlab.RequireRoot(t, "it loads BPF programs and pins them")
	pin := pinDir(t)
	d, err := Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	t.Cleanup(func() { d.Close() })
	for _, fam := range families {
		vip, pod, cl := ap(fam.vip, 80), ap(fam.pod, 8080), ap(fam.client, 40000)
		k := flowKey(pod, cl, layers.IPProtocolTCP)
		now, err := coarseNow()
		must(t, err)
		var v dsrFlowValue
		v.Vip.W, _ = datapath.WireAddr(vip.Addr())
		v.VipPort, v.SeenNs = datapath.WirePort(vip.Port()), now
		must(t, d.objs.Flows.Put(&k, &v))
		reply := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolTCP, Flags: "A"}
		want := reply
		want.Src = vip
		expect(t, d, Egress, fam.name+" reply, no bit", reply.bytes(t), actOK, nil)
		allow(t, d, vip, datapath.TCP, pod)
		expect(t, d, Egress, fam.name+" reply, bit set", reply.bytes(t), actOK, want.bytes(t))
		must(t, d.DeleteDSRService(datapath.DSRService{Frontend: datapath.Frontend{Addr: vip.Addr(), Port: 80, Proto: datapath.TCP}, Endpoint: pod}))
	}
	must(t, d.Close())
	d, err = Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	t.Cleanup(func() { d.Close() })
	for _, fam := range families {
		reply := pk{Src: ap(fam.pod, 8080), Dst: ap(fam.client, 40000), Proto: layers.IPProtocolTCP, Flags: "A"}
		want := reply
		want.Src = ap(fam.vip, 80)
		expect(t, d, Egress, fam.name+" reply after the restart, pair gone", reply.bytes(t), actOK, want.bytes(t))
	}
	// A filter word with no bit left is cleared by the rebuild.
	must(t, d.objs.Flows.Delete(ptr(flowKey(ap(pod4, 8080), ap(client4, 40000), layers.IPProtocolTCP))))
	must(t, d.rebuildFilter())
	var w uint64
	must(t, d.objs.EpFilter.Lookup(epBit(pod4)/64, &w))
	if w&(1<<(epBit(pod4)%64)) != 0 {
		t.Error("the bit of a Pod with no pair and no flow survived the rebuild")
	}
}

func ptr[T any](v T) *T { return &v }

// flowKey is the flows key of the replies from pod to client.
func flowKey(pod, client netip.AddrPort, proto layers.IPProtocol) dsrFlowKey {
	var k dsrFlowKey
	k.Pod.W, k.Family = datapath.WireAddr(pod.Addr())
	k.Client.W, _ = datapath.WireAddr(client.Addr())
	k.PodPort, k.ClientPort = datapath.WirePort(pod.Port()), datapath.WirePort(client.Port())
	k.Proto = uint8(protoOf(proto))
	return k
}

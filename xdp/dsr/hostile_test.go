// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
)

// netipAddrPortZero is "no carrier".
var netipAddrPortZero netip.AddrPort

// hostileCase is one packet the ingress program must refuse or leave alone.
type hostileCase struct {
	name    string
	in      []byte
	verdict uint32
	want    []byte // expected bytes out when passed; nil: unchanged
	counter string // the counter it must bump ("" for none)
}

// TestHostileCarriers: carriers that are not allowed, malformed, cut short, on the wrong
// protocol or beside other options are dropped and counted, record nothing; packets that only
// look alike (other options, another Destination Options header) pass untouched; a carried
// later fragment loses its carrier and records nothing.
func TestHostileCarriers(t *testing.T) {
	d := newDP(t, Options{})
	vip4p, pod4p := ap(vip4, 80), ap(pod4, 8080)
	vip6p, pod6p := ap(vip6, 80), ap(pod6, 8080)
	allow(t, d, vip4p, protoOf(layers.IPProtocolUDP), pod4p)
	allow(t, d, vip6p, protoOf(layers.IPProtocolUDP), pod6p)
	base4 := pk{Src: ap(client4, 40000), Dst: pod4p, Proto: layers.IPProtocolUDP, Payload: []byte("payload!"), Carrier: vip4p}
	base6 := pk{Src: ap(client6, 40000), Dst: pod6p, Proto: layers.IPProtocolUDP, Payload: []byte("payload!"), Carrier: vip6p}

	// patch returns b with f applied to a copy.
	patch := func(b []byte, f func([]byte)) []byte {
		c := slices.Clone(b)
		f(c)
		return c
	}
	v4 := base4.bytes(t)
	v6 := base6.bytes(t)
	const l3 = 14
	var cases []hostileCase
	add := func(name string, in []byte, verdict uint32, want []byte, counter string) {
		cases = append(cases, hostileCase{name, in, verdict, want, counter})
	}

	// IPv4.
	notAllowed := base4
	notAllowed.Carrier = ap(vip4, 81)
	add("v4 pair not allowed (service port)", notAllowed.bytes(t), actShot, nil, "drop_carrier_not_allowed")
	otherVIP := base4
	otherVIP.Carrier = ap(client4, 80) // "rewrite my replies to come from the client itself"
	add("v4 pair not allowed (VIP)", otherVIP.bytes(t), actShot, nil, "drop_carrier_not_allowed")
	otherPod := base4
	otherPod.Dst = ap(pod4, 8081)
	add("v4 pair not allowed (endpoint port)", otherPod.bytes(t), actShot, nil, "drop_carrier_not_allowed")
	tcp := base4
	tcp.Proto = layers.IPProtocolTCP
	add("v4 pair not allowed (protocol)", tcp.bytes(t), actShot, nil, "drop_carrier_not_allowed")
	add("v4 option length 6", patch(v4, func(b []byte) { b[l3+21] = 6 }), actShot, nil, "drop_carrier_malformed")
	add("v4 option length 10", patch(v4, func(b []byte) { b[l3+21] = 10 }), actShot, nil, "drop_carrier_malformed")
	short := base4
	short.Carrier = netipAddrPortZero
	short.Opts4 = []byte{0x9e, 4, 0, 80}
	add("v4 IHL 6 holding the type", short.bytes(t), actShot, nil, "drop_carrier_malformed")
	withNOPs := base4
	withNOPs.Opts4 = []byte{1, 1, 1, 0}
	add("v4 carrier then other options", withNOPs.bytes(t), actShot, nil, "drop_carrier_options")
	after := base4
	after.Carrier = netipAddrPortZero
	after.Opts4 = append([]byte{1, 1, 1, 1}, carrier4(vip4p)...)
	add("v4 other options then the carrier", after.bytes(t), actShot, nil, "drop_carrier_options")
	ra := base4
	ra.Carrier = netipAddrPortZero
	ra.Opts4 = []byte{0x94, 4, 0, 0} // Router Alert
	add("v4 another option only", ra.bytes(t), actOK, nil, "")
	eol := base4
	eol.Carrier = netipAddrPortZero
	eol.Opts4 = append([]byte{0, 0, 0, 0}, carrier4(vip4p)...) // after End of Options: not an option
	add("v4 the type after End of Options", eol.bytes(t), actOK, nil, "")
	add("v4 total length past the end", patch(v4, func(b []byte) {
		binary.BigEndian.PutUint16(b[l3+2:], uint16(len(b)-l3+1))
	}), actShot, nil, "drop_carrier_truncated")
	add("v4 cut in the option", v4[:l3+24], actShot, nil, "drop_carrier_truncated")
	add("v4 cut before the option's length", v4[:l3+21], actShot, nil, "drop_carrier_truncated")
	add("v4 UDP header cut", patch(v4[:l3+28+6], func(b []byte) {
		binary.BigEndian.PutUint16(b[l3+2:], 28+6)
	}), actShot, nil, "drop_carrier_truncated")
	icmp := base4
	icmp.Proto = layers.IPProtocolICMPv4
	icmp.Payload = []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}
	add("v4 carrier on ICMP", icmp.bytes(t), actShot, nil, "drop_carrier_not_l4")
	later := base4
	later.FragOff = 16
	later.Payload = []byte("fragment data, no ports")
	add("v4 later fragment", frame(t, later.ip(t, later.Payload)), actOK,
		frame(t, later.without().ip(t, later.Payload)), "carrier_frag_stripped")

	// IPv6.
	notAllowed6 := base6
	notAllowed6.Carrier = ap(vip6, 81)
	add("v6 pair not allowed", notAllowed6.bytes(t), actShot, nil, "drop_carrier_not_allowed")
	doh := 14 + 40
	add("v6 header length 3", patch(v6, func(b []byte) { b[doh+1] = 3 }), actShot, nil, "drop_carrier_malformed")
	add("v6 option length 16", patch(v6, func(b []byte) { b[doh+3] = 16 }), actShot, nil, "drop_carrier_malformed")
	add("v6 no PadN", patch(v6, func(b []byte) { b[doh+22] = 0 }), actShot, nil, "drop_carrier_malformed")
	add("v6 another option first", patch(v6, func(b []byte) { b[doh+2] = 0x1f }), actOK, nil, "")
	add("v6 payload length past the end", patch(v6, func(b []byte) {
		binary.BigEndian.PutUint16(b[14+4:], uint16(len(b)-doh+1))
	}), actShot, nil, "drop_carrier_truncated")
	add("v6 cut in the carrier", v6[:doh+20], actShot, nil, "drop_carrier_truncated")
	icmp6 := base6
	icmp6.Proto = layers.IPProtocolICMPv6
	icmp6.Payload = []byte{128, 0, 0, 0, 0, 0, 0, 0}
	add("v6 carrier on ICMPv6", icmp6.bytes(t), actShot, nil, "drop_carrier_not_l4")
	frag6 := base6
	add("v6 later fragment", frag6.ip6Frag(t, []byte("later fragment data"), 16, false), actOK,
		frag6.without().ip6Frag(t, []byte("later fragment data"), 16, false), "carrier_frag_stripped")

	for _, c := range cases {
		before := counters(t, d)
		expect(t, d, Ingress, c.name, c.in, c.verdict, c.want)
		after := counters(t, d)
		for name, n := range after {
			delta := n - before[name]
			if name == c.counter && delta != 1 || name != c.counter && delta != 0 {
				t.Errorf("%s: counter %s went up by %d (want %q up by 1)", c.name, name, delta, c.counter)
			}
		}
		if c.counter != "" && after[c.counter] == before[c.counter] {
			t.Errorf("%s: counter %s did not go up", c.name, c.counter)
		}
	}
	checkFlows(t, d, "after the hostile packets")

	// The first fragments, for contrast: accepted.
	first := base4
	first.MF = true
	l4 := first.l4(t)
	expect(t, d, Ingress, "v4 first fragment", frame(t, first.ip(t, l4[:8])), actOK, frame(t, first.without().ip(t, l4[:8])))
	first6 := base6
	l46 := first6.l4(t)
	expect(t, d, Ingress, "v6 first fragment", first6.ip6Frag(t, l46[:8], 0, true), actOK, first6.without().ip6Frag(t, l46[:8], 0, true))
	checkFlows(t, d, "after the first fragments",
		fmt.Sprintf("%s %s UDP %s", pod4p, base4.Src, vip4p), fmt.Sprintf("%s %s UDP %s", pod6p, base6.Src, vip6p))
}

// TestTruncatedEverywhere: every prefix of carried packets, replies and ICMP errors is dropped
// or passed untouched, never rewritten, and none records a flow. The whole packets are then
// accepted and rewritten (so each prefix's failure to be was the cut, not the packet).
// BPF_PROG_TEST_RUN refuses to build an IPv4 or IPv6 skb shorter than the fixed IP header
// (EINVAL): those prefixes, 14 bytes and up, are run where the kernel lets them, and the
// refusals must stop at the header's length.
func TestTruncatedEverywhere(t *testing.T) {
	for _, fam := range families {
		for _, proto := range protos {
			t.Run(fmt.Sprintf("%s/%s", fam.name, proto), func(t *testing.T) {
				d := newDP(t, Options{})
				vip, pod, cl := ap(fam.vip, 80), ap(fam.pod, 8080), ap(fam.client, 40000)
				allow(t, d, vip, protoOf(proto), pod)
				fwd := pk{Src: cl, Dst: pod, Proto: proto, Flags: "S", Payload: []byte("0123456789"), Carrier: vip}.bytes(t)
				for n := minRun(t, d, fwd); n < len(fwd); n++ {
					r := run(t, d, Ingress, fwd[:n])
					if r.Verdict == actOK && string(r.Data) != string(fwd[:n]) || r.Verdict != actOK && r.Verdict != actShot {
						t.Fatalf("carried packet cut to %d bytes: verdict %d, changed %v", n, r.Verdict, string(r.Data) != string(fwd[:n]))
					}
				}
				checkFlows(t, d, "after the cut carried packets")
				if r := run(t, d, Ingress, fwd); r.Verdict != actOK || len(r.Data) == len(fwd) {
					t.Fatalf("the whole carried packet: verdict %d, %d bytes of %d", r.Verdict, len(r.Data), len(fwd))
				}
				reply := pk{Src: pod, Dst: cl, Proto: proto, Flags: "A", Payload: []byte("0123456789")}.bytes(t)
				q := pk{Src: cl, Dst: pod, Proto: proto, Flags: "A", Payload: []byte("0123456789")}
				errPkt := icmpError(t, fam.node, fam.client, fam.icmpTooBig, fam.tooBigCode, 1400, q.ip(t, q.l4(t)))
				for _, whole := range [][]byte{reply, errPkt} {
					for n := minRun(t, d, whole); n < len(whole); n++ {
						r := run(t, d, Egress, whole[:n])
						if r.Verdict != actOK || string(r.Data) != string(whole[:n]) {
							t.Fatalf("egress packet cut to %d bytes of %d: verdict %d, changed %v", n, len(whole), r.Verdict, string(r.Data) != string(whole[:n]))
						}
					}
					if r := run(t, d, Egress, whole); r.Verdict != actOK || string(r.Data) == string(whole) {
						t.Fatalf("the whole egress packet of %d bytes: verdict %d, changed %v", len(whole), r.Verdict, string(r.Data) != string(whole))
					}
				}
			})
		}
	}
}

// minRun returns the shortest prefix of frame pkt BPF_PROG_TEST_RUN accepts, failing t unless
// every shorter one (from 14 bytes) is refused and the shortest is at most the fixed IP
// header's end.
func minRun(t *testing.T, d *Datapath, pkt []byte) int {
	t.Helper()
	hdrEnd := 14 + 20
	if pkt[12] == 0x86 {
		hdrEnd = 14 + 40
	}
	for n := 14; n < len(pkt); n++ {
		if _, err := progrun.SKB(d.Program(Ingress), pkt[:n], 1); err == nil {
			if n > hdrEnd {
				t.Fatalf("BPF_PROG_TEST_RUN refuses a %d-byte prefix, past the IP header (%d bytes)", n-1, hdrEnd)
			}
			return n
		}
	}
	t.Fatalf("BPF_PROG_TEST_RUN refuses every prefix of a %d-byte packet", len(pkt))
	return 0
}

// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestRestartAdoptsPins: a second Load adopts the pinned maps (a flow recorded before keeps its
// replies rewritten by the new programs), copies pinned flows into a map of a new size, replaces
// a pinned map of another layout with an empty one, and drops the pin of a link whose interface
// was deleted, saying so in Replaced.
func TestRestartAdoptsPins(t *testing.T) {
	netlab.RequireRoot(t, "it loads BPF programs and pins them")
	pin := pinDir(t)
	ns := netlab.New(t, netlab.Prefix()+"d")
	ns.MustIP(t, "link add d0 type veth peer name d1")
	ns.MustIP(t, "link set d0 up")

	vip, pod, cl := ap(vip4, 80), ap(pod4, 8080), ap(client4, 40000)
	fwd := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolTCP, Flags: "S", Carrier: vip}
	ack := fwd
	ack.Flags = "A"
	reply := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolTCP, Flags: "SA"}
	want := reply
	want.Src = vip
	// A second handshake, between its SYN and its ACK: in half_open, pinned too.
	half := fwd
	half.Src = ap(client4, 40001)
	halfReply := reply
	halfReply.Dst = half.Src
	halfWant := halfReply
	halfWant.Src = vip

	d, err := Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	allow(t, d, vip, datapath.TCP, pod)
	must(t, ns.Do(func() error { return d.Attach("d0", Both) }))
	expect(t, d, Ingress, "carried SYN", fwd.bytes(t), actOK, fwd.without().bytes(t))
	expect(t, d, Ingress, "carried ACK", ack.bytes(t), actOK, ack.without().bytes(t))
	expect(t, d, Ingress, "carried SYN, half-open", half.bytes(t), actOK, half.without().bytes(t))
	must(t, d.Close())
	if !HasPins(pin) {
		t.Fatal("no pins after Close")
	}

	// Adopted as they are.
	d, err = Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	if err := d.Replaced(); err != nil {
		t.Errorf("Replaced: %v, want nil", err)
	}
	if got := d.Interfaces(); got["d0"] != Both {
		t.Errorf("interfaces %v, want d0 both", got)
	}
	expect(t, d, Egress, "reply after the restart", reply.bytes(t), actOK, want.bytes(t))
	expect(t, d, Egress, "half-open reply after the restart", halfReply.bytes(t), actOK, halfWant.bytes(t))
	if c := counters(t, d); c["carrier_accepted"] != 3 || c["reply_rewritten"] != 2 {
		t.Errorf("counters %v: want those of both runs", c)
	}
	must(t, d.Close())

	// Another flows size; a frags map of another layout; the interface deleted.
	ns.MustIP(t, "link del d0")
	frags := filepath.Join(pin, "map_frags")
	must(t, removeFile(frags))
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 8, ValueSize: 8, MaxEntries: 16})
	must(t, err)
	must(t, other.Pin(frags))
	other.Close()
	d, err = Load(Options{PinPath: pin, Flows: 2 * MinFlows})
	must(t, err)
	t.Cleanup(func() { d.Close() })
	why := fmt.Sprint(d.Replaced())
	for _, s := range []string{"flows resized to 32768 entries, 1 flows copied", "pinned map frags replaced", "pinned link d0/egress is attached to no interface", "pinned link d0/ingress"} {
		if !strings.Contains(why, s) {
			t.Errorf("Replaced: %q, want it to say %q", why, s)
		}
	}
	if len(d.Interfaces()) != 0 || HasPinsNamed(pin, "link_") {
		t.Errorf("interfaces %v after the interface went: want none, and no link pins", d.Interfaces())
	}
	if d.objs.Flows.MaxEntries() != 2*MinFlows {
		t.Errorf("flows has %d entries, want %d", d.objs.Flows.MaxEntries(), 2*MinFlows)
	}
	expect(t, d, Egress, "reply after the resize", reply.bytes(t), actOK, want.bytes(t))
	if m, err := ebpf.LoadPinnedMap(filepath.Join(pin, "map_flows"), nil); err != nil || m.MaxEntries() != 2*MinFlows {
		t.Errorf("the pinned flows map is not the resized one: %v", err)
	} else {
		m.Close()
	}
	must(t, d.Remove())
	if HasPins(pin) {
		t.Error("pins left after Remove")
	}
}

// HasPinsNamed reports whether dir holds a pin whose name starts with prefix.
func HasPinsNamed(dir, prefix string) bool {
	for _, n := range pinFiles(dir) {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// TestReadPinned: the read-only view of the pins gives the pairs, the flows, the counters and
// the interfaces, beside the running Datapath.
func TestReadPinned(t *testing.T) {
	netlab.RequireRoot(t, "it loads BPF programs and pins them")
	pin := pinDir(t)
	ns := netlab.New(t, netlab.Prefix()+"d")
	ns.MustIP(t, "link add d0 type veth peer name d1")
	d, err := Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	t.Cleanup(func() { d.Close() })
	must(t, ns.Do(func() error { return d.Attach("d0", Egress) }))
	allow(t, d, ap(vip6, 443), datapath.TCP, ap(pod6, 8443))
	allow(t, d, ap(vip4, 80), datapath.TCP, ap(pod4, 8080))
	fwd := pk{Src: ap(client4, 40000), Dst: ap(pod4, 8080), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 80)}
	expect(t, d, Ingress, "carried", fwd.bytes(t), actOK, fwd.without().bytes(t))
	p, err := ReadPinned(pin)
	must(t, err)
	if got := fmt.Sprint(p.Services); got != "[{198.18.100.1:80/TCP 198.19.2.20:8080} {[2001:db8:100::1]:443/TCP [2001:db8:2::20]:8443}]" {
		t.Errorf("pinned services %s", got)
	}
	if len(p.Flows) != 1 || p.Flows[0].VIP != ap(vip4, 80) || p.Counters["carrier_accepted"] != 1 || p.Interfaces["d0"] != Egress {
		t.Errorf("pinned view %+v", p)
	}
	if _, err := ReadPinned(filepath.Join(pin, "nothing")); err == nil {
		t.Error("ReadPinned of a directory without pins: no error")
	}
}

// TestServiceErrors: pairs that cannot be held are refused with the contract's sentinels;
// adding twice and deleting what is not held are no errors; what is held reads back.
func TestServiceErrors(t *testing.T) {
	d := newDP(t, Options{})
	f := datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}
	for _, c := range []struct {
		s    datapath.DSRService
		want error
	}{
		{datapath.DSRService{Frontend: datapath.Frontend{Port: 80, Proto: datapath.TCP}, Endpoint: ap(pod4, 80)}, datapath.ErrBadAddress},
		{datapath.DSRService{Frontend: datapath.Frontend{Addr: vip4, Port: 80, Proto: 1}, Endpoint: ap(pod4, 80)}, datapath.ErrBadProtocol},
		{datapath.DSRService{Frontend: f, Endpoint: ap(pod6, 80)}, datapath.ErrBadAddress},
		{datapath.DSRService{Frontend: f}, datapath.ErrBadAddress},
		{datapath.DSRService{Frontend: f, Endpoint: ap(pod4, 0)}, datapath.ErrOutOfRange},
		{datapath.DSRService{Frontend: datapath.Frontend{Addr: vip4, Proto: datapath.TCP}, Endpoint: ap(pod4, 80)}, datapath.ErrOutOfRange},
	} {
		if err := d.AddDSRService(c.s); !errors.Is(err, c.want) {
			t.Errorf("add %v: %v, want %v", c.s, err, c.want)
		}
	}
	ok := datapath.DSRService{Frontend: f, Endpoint: ap(pod4, 8080)}
	must(t, d.AddDSRService(ok))
	must(t, d.AddDSRService(ok))
	must(t, d.DeleteDSRService(datapath.DSRService{Frontend: f, Endpoint: ap(pod4, 8081)}))
	got, err := d.DSRServices()
	must(t, err)
	if len(got) != 1 || !got[ok] {
		t.Errorf("services %v, want only %v", got, ok)
	}
	must(t, d.DeleteDSRService(ok))
	if got, _ := d.DSRServices(); len(got) != 0 {
		t.Errorf("services %v after the delete", got)
	}
	for _, o := range []Options{{Flows: 100}, {Flows: MaxFlows + 1}, {TCPTimeout: 1}} {
		if _, err := Load(o); !errors.Is(err, datapath.ErrOutOfRange) {
			t.Errorf("Load(%+v): %v, want out of range", o, err)
		}
	}
	if err := d.Attach("lo", Both); err == nil {
		t.Error("attached to lo, which is no Ethernet interface")
	}
}

// removeFile removes path; missing is no error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// TestHasPins: a directory of the socket load balancer's pins, which share two names with the
// node side's, is not taken for the node side's.
func TestHasPins(t *testing.T) {
	for _, c := range []struct {
		files []string
		want  bool
	}{
		{[]string{"map_services", "map_stats", "map_slots", "link_connect4"}, false}, // xdp/socklb's
		{[]string{"map_services", "map_stats", "map_flows"}, true},
		{[]string{"link_egress_v0"}, true},
		{[]string{"map_ep_filter"}, true},
		{nil, false},
	} {
		dir := t.TempDir()
		for _, f := range c.files {
			must(t, os.WriteFile(filepath.Join(dir, f), nil, 0o600))
		}
		if got := HasPins(dir); got != c.want {
			t.Errorf("HasPins with %v: %v, want %v", c.files, got, c.want)
		}
	}
}

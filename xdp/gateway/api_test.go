// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

func loadNoPin(t *testing.T, opts Options) *Datapath {
	t.Helper()
	opts.NoPin = true
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = 4096
	}
	if opts.MaglevSlots == 0 {
		opts.MaglevSlots = 1 << 20
	}
	d, err := Load(opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestConstantsMatchBPF checks the Go mirrors of bpf/consts.h against the compiled object.
func TestConstantsMatchBPF(t *testing.T) {
	spec, err := loadXlb()
	must(t, err)
	for name, want := range map[string]uint32{
		xlbMapVipById:      datapath.MaxVIPs,
		xlbMapVipStats:     datapath.MaxVIPs,
		xlbMapBackends:     datapath.MaxBackends,
		xlbMapBackendStats: datapath.MaxBackends,
		xlbMapReasons:      uint32(numReasons),
		xlbMapConntrack:    datapath.DefaultConntrackSize,
		xlbMapHsSlots:      datapath.DefaultHandshakeSize,
		xlbMapMaglevSlots:  DefaultMaglevSlots,
		xlbMapProgs:        progsMax,
	} {
		if got := spec.Maps[name].MaxEntries; got != want {
			t.Errorf("map %s: %d entries in BPF, %d in Go", name, got, want)
		}
	}
	if got := spec.Maps[xlbMapNhCache].MaxEntries; got != 1<<nhCacheLog2 {
		t.Errorf("nh_cache has %d slots, Go expects %d", got, 1<<nhCacheLog2)
	}
	if got := spec.Maps[xlbMapAddrBitmap].MaxEntries; got != 2*addrFilterWords {
		t.Errorf("addr_bitmap has %d words, Go expects %d", got, 2*addrFilterWords)
	}
	if got := spec.Maps[xlbMapHsSlots].ValueSize; got != uint32(hsEntrySize) || hsCheckOffset != 56 || hsLiveOffset != 60 {
		t.Errorf("hs_slots has %d-byte slots, Go expects %d with check at 56 and the live-flow filter's word at 60 (at %d, %d)",
			got, hsEntrySize, hsCheckOffset, hsLiveOffset)
	}
	if len(reasonNames) != numReasons {
		t.Errorf("%d reason names for %d reasons", len(reasonNames), numReasons)
	}
	if datapath.DefaultConntrackSize < 1_000_000 {
		t.Errorf("default conntrack size %d < 1,000,000 flows", datapath.DefaultConntrackSize)
	}
}

// TestDefaultLoad loads with the zero Options (but no pins): a million-flow conntrack.
func TestDefaultLoad(t *testing.T) {
	d, err := Load(Options{NoPin: true})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer d.Close()
	if n := d.objs.Conntrack.MaxEntries(); n < 1_000_000 {
		t.Fatalf("conntrack holds %d flows", n)
	}
}

// TestAPIErrors: bad input gets an error naming the object, and changes nothing.
func TestAPIErrors(t *testing.T) {
	d := loadNoPin(t, Options{MaglevSlots: 100})
	v4 := netip.MustParseAddr("198.18.100.1")
	must(t, d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	for name, err := range map[string]error{
		"zero id":         d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{}),
		"id too big":      d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: datapath.MaxVIPs}),
		"sctp":            d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 81, Proto: 132}, datapath.VIPConfig{ID: 2}),
		"no address":      d.UpsertVIP(datapath.Frontend{Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 2}),
		"zone":            d.UpsertVIP(datapath.Frontend{Addr: netip.MustParseAddr("fe80::1%eth0"), Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 2}),
		"range family":    d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 2, SourceRanges: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}}),
		"id in use":       d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}),
		"table, no vip":   d.SetMaglevTable(9, []datapath.BackendID{1}),
		"table empty":     d.SetMaglevTable(1, nil),
		"table too big":   d.SetMaglevTable(1, make([]datapath.BackendID, 101)),
		"backend id 0":    d.UpsertBackend(0, datapath.Backend{Addr: v4}),
		"backend no addr": d.UpsertBackend(1, datapath.Backend{}),
		"reverse, no vip": d.SetReverse(datapath.Endpoint{Addr: v4, Port: 80, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 9}),
		"reverse, family": d.SetReverse(datapath.Endpoint{Addr: netip.MustParseAddr("2001:db8::1"), Port: 80, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 1}),
		"reverse, proto":  d.SetReverse(datapath.Endpoint{Addr: v4, Port: 80, Proto: 1}, datapath.ReverseNAT{VIP: 1}),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), "VIP") && !strings.Contains(err.Error(), "backend") &&
			!strings.Contains(err.Error(), "reverse") {
			t.Errorf("%s: error does not name the object: %v", name, err)
		}
	}
	vips, err := d.VIPs()
	must(t, err)
	if len(vips) != 1 {
		t.Errorf("failed calls changed the VIPs: %v", vips)
	}
	// The Maglev capacity (100 slots) is exhausted with a clear error; the old table stays.
	must(t, d.SetMaglevTable(1, table(61, 1)))
	err = d.SetMaglevTable(1, table(61, 2))
	if err == nil || !strings.Contains(err.Error(), "MaglevSlots") {
		t.Fatalf("exhausted Maglev capacity: %v", err)
	}
	tb, err := d.MaglevTable(1)
	must(t, err)
	if len(tb) != 61 || tb[0] != 1 {
		t.Fatalf("table after a failed swap: %d slots, first %d", len(tb), tb[0])
	}
	must(t, d.DeleteVIP(datapath.Frontend{Addr: v4, Port: 99, Proto: datapath.TCP})) // missing: no error
}

// TestAPIRoundTrip: what is written reads back, and deleting cleans up.
func TestAPIRoundTrip(t *testing.T) {
	d := loadNoPin(t, Options{})
	v4 := netip.MustParseAddr("198.18.100.1")
	f := datapath.Frontend{Addr: v4, Port: 80, Proto: datapath.TCP}
	cfg := datapath.VIPConfig{ID: 7, Affinity: datapath.AffinityClientIP, SourceRanges: []netip.Prefix{
		netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("198.19.0.0/16")}}
	must(t, d.UpsertVIP(f, cfg))
	must(t, d.UpsertBackend(3, datapath.Backend{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Down: true}))
	must(t, d.SetMaglevTable(7, table(13, 3)))
	must(t, d.SetReverse(datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 7}))

	vips, err := d.VIPs()
	must(t, err)
	if got := fmt.Sprint(vips[f]); got != fmt.Sprint(cfg) {
		t.Errorf("VIP reads back as %s, want %s", got, fmt.Sprint(cfg))
	}
	bes, err := d.Backends()
	must(t, err)
	if b := bes[3]; !b.Down || b.Port != 8080 || len(bes) != 1 {
		t.Errorf("backends read back as %v", bes)
	}
	rev, err := d.Reverses()
	must(t, err)
	if len(rev) != 1 || rev[datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Proto: datapath.TCP}].VIP != 7 {
		t.Errorf("reverse entries read back as %v", rev)
	}
	// Updating the VIP keeps its table.
	must(t, d.UpsertVIP(f, datapath.VIPConfig{ID: 7}))
	tb, err := d.MaglevTable(7)
	must(t, err)
	if len(tb) != 13 {
		t.Fatalf("table lost on VIP update: %v", tb)
	}
	must(t, d.DeleteVIP(f))
	vips, err = d.VIPs()
	must(t, err)
	if len(vips) != 0 {
		t.Errorf("VIPs after delete: %v", vips)
	}
	var k xlbSvcKey
	var vi xlbVipInfo
	if err := d.objs.Vips.NextKey(nil, &k); !errors.Is(err, ebpf.ErrKeyNotExist) {
		must(t, d.objs.Vips.Lookup(&k, &vi))
		t.Errorf("vips still holds %v -> %+v (the address marker should be gone)", frontendOf(k), vi)
	}
	var word uint64
	must(t, d.objs.AddrBitmap.Lookup(filterBit(v4)/64, &word))
	if word&(1<<(filterBit(v4)%64)) != 0 {
		t.Error("address filter still has the deleted VIP's bit")
	}
}

// TestPinnedAdoption: a second Load on the same pin path adopts the maps: configuration and
// conntrack carry over, the address filter is rebuilt, and incompatible options are refused.
func TestPinnedAdoption(t *testing.T) {
	d1, opts := loadPinnedDir(t)
	v4 := netip.MustParseAddr("198.18.100.1")
	must(t, d1.UpsertVIP(datapath.Frontend{Addr: v4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, d1.UpsertBackend(1, datapath.Backend{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080}))
	must(t, d1.SetMaglevTable(1, table(13, 1)))
	must(t, d1.SetReverse(datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 1}))
	must(t, d1.Close())

	d2, err := Load(opts)
	if err != nil {
		t.Fatalf("adopt: %+v", err)
	}
	defer d2.Close()
	// One process at a time manages a pin path.
	if d3, err := Load(opts); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		if d3 != nil {
			d3.Close()
		}
		t.Errorf("a second load while the first holds the pin path: %v, want it refused", err)
	}
	vips, err := d2.VIPs()
	must(t, err)
	if vips[datapath.Frontend{Addr: v4, Port: 80, Proto: datapath.TCP}].ID != 1 {
		t.Fatalf("VIPs after adoption: %v", vips)
	}
	if d2.filter.vipBits[filterBit(v4)] != 1 || d2.filter.backendAddrs[netip.MustParseAddr("198.18.1.10")] != 1 {
		t.Error("address filter not rebuilt from the pinned maps")
	}
	// The adopted table's region is in use: a new table cannot overlap it.
	if d2.slots.reserve(0, 13) {
		t.Error("slot allocator not rebuilt: the adopted table's region is free")
	}
	must(t, d2.Close())
	bad := opts
	bad.ConntrackSize = 8192
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "conntrack size") {
		t.Errorf("load with another conntrack size: %v", err)
	}
	// A failed load leaves the pin path free.
	d4, err := Load(opts)
	if err != nil {
		t.Fatalf("load after a failed one: %v", err)
	}
	must(t, d4.Close())
}

// TestGoldenNextHopCache: the next-hop cache never sends a packet over the egress MTU (the kernel
// must send "fragmentation needed"), and a route change is seen within its TTL, also by a flow
// whose packets replay a record (flow_replay).
func TestGoldenNextHopCache(t *testing.T) {
	g := newGW(t, Options{Settings: datapath.Settings{NextHopCacheTTL: 50 * time.Millisecond}})
	services(t, g)
	g.ns.MustIP(t, "link set int0 mtu 1000")
	small, smallOut := clientTCP(1, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	for range 2 { // conntrack entry, then the record
		g.expect(t, small.bytes(t), g.ext, want{xdpRedirect, smallOut.bytes(t), fwd(ReasonFwdRedirect)})
	}
	if _, e, ok := g.record(t, small); !ok {
		t.Fatalf("no record: %+v", e)
	}
	big := small
	big.Payload = make([]byte, 1200)
	bigOut := big
	bigOut.Dst = ap(be1v4, 8080) // TTL given back: the kernel forwards (and sends frag-needed)
	g.expect(t, big.bytes(t), g.ext, want{xdpPass, bigOut.bytes(t), map[Reason]uint64{ReasonNATForward: 1, ReasonPassFIB: 1}})
	g.expect(t, small.bytes(t), g.ext, want{xdpRedirect, smallOut.bytes(t), fwd(ReasonFwdRedirect)})
	if _, e, ok := g.record(t, small); !ok {
		t.Fatalf("no record before the neighbour changes: %+v", e)
	}
	// The backend's neighbour changes MAC: after the TTL the new one is used.
	g.ns.MustIP(t, "neigh replace 198.18.1.10 lladdr "+macBE3+" dev int0 nud permanent")
	time.Sleep(100 * time.Millisecond)
	// The program reads the clock the loader writes every 10 ms (coarse): write it now, so that
	// a late tick on a loaded machine cannot leave it short of the TTL. tick keeps the cache
	// generation: the entry must expire by its TTL, not be invalidated.
	must(t, g.dp.tick())
	_, newOut := clientTCP(1, ap(vip4, 80), "A", ap(be1v4, 8080), macBE3)
	g.expect(t, small.bytes(t), g.ext, want{xdpRedirect, newOut.bytes(t), fwd(ReasonFwdRedirect)})
	_ = layers.IPProtocolTCP
}

// TestAttachStalePin: a pinned link whose interface was deleted and recreated does not block a
// restarted loader: the stale pin is replaced.
func TestAttachStalePin(t *testing.T) {
	p := netlab.Prefix()
	ns := netlab.New(t, p+"a")
	peer := netlab.New(t, p+"b")
	netlab.Veth(t, ns, "gw0", "02:00:00:00:01:01", peer, "pe0", "02:00:00:00:01:02")
	dir := "/sys/fs/bpf/" + p
	opts := Options{PinPath: dir, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096}}
	t.Cleanup(func() {
		if d, err := Load(opts); err == nil {
			ns.Do(d.Remove)
		}
		os.RemoveAll(dir)
	})
	d1, err := Load(opts)
	must(t, err)
	must(t, ns.Do(func() error { return d1.Attach("gw0", datapath.AttachAuto, datapath.RoleBoth) }))
	must(t, d1.Close())

	ns.MustIP(t, "link del gw0")
	netlab.Veth(t, ns, "gw0", "02:00:00:00:01:01", peer, "pe0", "02:00:00:00:01:02")
	d2, err := Load(opts)
	must(t, err)
	defer d2.Close()
	must(t, ns.Do(func() error { return d2.Attach("gw0", datapath.AttachAuto, datapath.RoleBoth) }))
	ifs, err := d2.Interfaces()
	must(t, err)
	if len(ifs) != 1 || ifs[0] != "gw0" {
		t.Fatalf("interfaces after re-attach: %v", ifs)
	}
}

func TestLoadRejectsShortTimeouts(t *testing.T) {
	_, err := Load(Options{NoPin: true, Settings: datapath.Settings{ConntrackSize: 4096, UDPTimeout: 100 * time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "UDPTimeout") {
		t.Fatalf("Load with a 100 ms UDP timeout: %v", err)
	}
}

// TestFlagsMatchBPF checks the Go mirrors of bpf/consts.h's flag bits, which leave no trace in
// the compiled object, against the header's text.
func TestFlagsMatchBPF(t *testing.T) {
	src, err := os.ReadFile("bpf/consts.h")
	must(t, err)
	defs := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(\w+)\s+\((\d+)u? << (\d+)\)`).FindAllStringSubmatch(string(src), -1) {
		base, err1 := strconv.ParseUint(m[2], 0, 64)
		shift, err2 := strconv.ParseUint(m[3], 0, 64)
		if err1 == nil && err2 == nil {
			defs[m[1]] = base << shift
		}
	}
	for name, want := range map[string]uint64{
		"VIP_F_AFFINITY_CLIENTIP": vipFlagAffinityClientIP, "VIP_F_SRC_RANGES": vipFlagSrcRanges,
		"VIP_F_MARKER": vipFlagMarker, "BACKEND_F_DOWN": backendFlagDown,
		"BACKEND_F_REVERSE_CT": backendFlagReverseCT, "BACKEND_F_DSR": backendFlagDSR,
		"REV_F_AMBIGUOUS": revFlagAmbiguous, "CT_F_CLOSING": ctFlagClosing, "CT_F_REVERSE": ctFlagReverse,
		"ECHO_RANGES_ID_BIT": echoRangesIDBit,
	} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("bpf/consts.h %s = %d (defined: %v), Go says %d", name, got, ok, want)
		}
	}
}

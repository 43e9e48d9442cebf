package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

func (f Frontend) validate() error {
	if err := checkAddr(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if !f.Proto.valid() {
		return fmt.Errorf("VIP %s: protocol %s is not balanced (TCP and UDP are)", f, f.Proto)
	}
	return nil
}

// UpsertVIP creates frontend f or updates its configuration. Packets reach its backends once
// its Maglev table is set (SetMaglevTable); until then they are dropped as "no backend".
func (d *Datapath) UpsertVIP(f Frontend, cfg VIPConfig) error {
	if err := f.validate(); err != nil {
		return err
	}
	if cfg.ID == 0 || cfg.ID >= maxVIPs {
		return fmt.Errorf("VIP %s: id %d out of range 1..%d", f, cfg.ID, maxVIPs-1)
	}
	for _, p := range cfg.SourceRanges {
		if !p.IsValid() || p.Addr().Unmap().Is4() != f.Addr.Unmap().Is4() {
			return fmt.Errorf("VIP %s: source range %s is not a prefix of the VIP's family", f, p)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	key := svcKey(f.Addr, f.Port, f.Proto)
	var old xlbVipInfo
	exists := true
	if err := d.objs.Vips.Lookup(&key, &old); errors.Is(err, ebpf.ErrKeyNotExist) {
		exists = false
	} else if err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	var holder xlbSvcKey
	if err := d.objs.VipById.Lookup(uint32(cfg.ID), &holder); err != nil {
		return fmt.Errorf("VIP %s: read vip_by_id[%d]: %w", f, cfg.ID, err)
	}
	if holder.Family != 0 && holder != key {
		return fmt.Errorf("VIP %s: id %d is already used by %s", f, cfg.ID, frontendOf(holder))
	}

	flags := uint32(0)
	if cfg.Affinity == AffinityClientIP {
		flags |= vipFlagAffinityClientIP
	}
	if len(cfg.SourceRanges) > 0 {
		flags |= vipFlagSrcRanges
	}
	// Ranges first, so a VIP never checks a half-written list: add the new prefixes, flip the
	// flag, then drop prefixes no longer wanted.
	if err := d.addSourceRanges(cfg.ID, cfg.SourceRanges); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if err := d.objs.VipById.Put(uint32(cfg.ID), &key); err != nil {
		return fmt.Errorf("VIP %s: write vip_by_id: %w", f, err)
	}
	if err := d.objs.Vips.Put(&key, &xlbVipInfo{Id: uint32(cfg.ID), Flags: flags}); err != nil {
		return fmt.Errorf("VIP %s: write vips: %w", f, err)
	}
	if exists && old.Id != uint32(cfg.ID) {
		d.clearVIPID(VIPID(old.Id))
	}
	if err := d.pruneSourceRanges(cfg.ID, cfg.SourceRanges); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if !exists {
		if err := d.markerRef(f.Addr, +1); err != nil {
			return fmt.Errorf("VIP %s: %w", f, err)
		}
	}
	return nil
}

// DeleteVIP removes frontend f, its Maglev table and source ranges. Deleting a missing VIP is
// not an error.
func (d *Datapath) DeleteVIP(f Frontend) error {
	if err := f.validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	key := svcKey(f.Addr, f.Port, f.Proto)
	var vi xlbVipInfo
	if err := d.objs.Vips.Lookup(&key, &vi); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if err := d.objs.Vips.Delete(&key); err != nil {
		return fmt.Errorf("VIP %s: delete: %w", f, err)
	}
	d.clearVIPID(VIPID(vi.Id))
	if err := d.markerRef(f.Addr, -1); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	return nil
}

// clearVIPID forgets everything stored under a VIP id.
func (d *Datapath) clearVIPID(id VIPID) {
	_ = d.objs.VipById.Put(uint32(id), &xlbSvcKey{})
	_ = d.objs.Maglev.Delete(uint32(id))
	_ = d.pruneSourceRanges(id, nil)
	_ = d.zeroTraffic(d.objs.VipStats, uint32(id))
}

// markerRef counts the VIPs on address a in its marker entry {a, 0, 0}; the marker (and the
// address filter bit) exists while the count is positive.
func (d *Datapath) markerRef(a netip.Addr, delta int) error {
	key := markerKey(a)
	var vi xlbVipInfo
	err := d.objs.Vips.Lookup(&key, &vi)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read marker of %s: %w", a, err)
	}
	n := int(vi.Id) + delta
	if n <= 0 {
		if err == nil {
			if err := d.objs.Vips.Delete(&key); err != nil {
				return fmt.Errorf("delete marker of %s: %w", a, err)
			}
			return d.filter.delVIP(&d.objs, a)
		}
		return nil
	}
	if err := d.objs.Vips.Put(&key, &xlbVipInfo{Id: uint32(n), Flags: vipFlagMarker}); err != nil {
		return fmt.Errorf("write marker of %s: %w", a, err)
	}
	if n == delta {
		return d.filter.addVIP(&d.objs, a)
	}
	return nil
}

func rangeKey(id VIPID, p netip.Prefix) xlbSrcRangeKey {
	p = p.Masked()
	w, _ := toWire(p.Addr())
	var be [4]byte
	be[0], be[1], be[2], be[3] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	return xlbSrcRangeKey{Prefixlen: uint32(32 + p.Bits()), VipId: nativeU32(be), Addr: w}
}

func (d *Datapath) addSourceRanges(id VIPID, ranges []netip.Prefix) error {
	for _, p := range ranges {
		k := rangeKey(id, p)
		if err := d.objs.SrcRanges.Put(&k, uint8(1)); err != nil {
			return fmt.Errorf("add source range %s: %w", p, err)
		}
	}
	return nil
}

// pruneSourceRanges deletes VIP id's prefixes that are not in keep.
func (d *Datapath) pruneSourceRanges(id VIPID, keep []netip.Prefix) error {
	want := map[xlbSrcRangeKey]bool{}
	for _, p := range keep {
		want[rangeKey(id, p)] = true
	}
	var stale []xlbSrcRangeKey
	var k xlbSrcRangeKey
	var v uint8
	it := d.objs.SrcRanges.Iterate()
	for it.Next(&k, &v) {
		if k.VipId == rangeKey(id, netip.Prefix{}).VipId && !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list source ranges: %w", err)
	}
	for _, k := range stale {
		if err := d.objs.SrcRanges.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete source range: %w", err)
		}
	}
	return nil
}

// VIPs returns every configured frontend with its configuration, read from the maps.
func (d *Datapath) VIPs() (map[Frontend]VIPConfig, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[Frontend]VIPConfig{}
	var k xlbSvcKey
	var vi xlbVipInfo
	it := d.objs.Vips.Iterate()
	for it.Next(&k, &vi) {
		if vi.Flags&vipFlagMarker != 0 {
			continue
		}
		cfg := VIPConfig{ID: VIPID(vi.Id)}
		if vi.Flags&vipFlagAffinityClientIP != 0 {
			cfg.Affinity = AffinityClientIP
		}
		out[frontendOf(k)] = cfg
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list VIPs: %w", err)
	}
	byID := map[uint32]Frontend{}
	for f, c := range out {
		byID[uint32(c.ID)] = f
	}
	var rk xlbSrcRangeKey
	var v uint8
	rit := d.objs.SrcRanges.Iterate()
	for rit.Next(&rk, &v) {
		b := nativeBytes(rk.VipId)
		id := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		f, ok := byID[id]
		if !ok {
			continue
		}
		fam := uint8(familyV6)
		if f.Addr.Unmap().Is4() {
			fam = familyV4
		}
		c := out[f]
		c.SourceRanges = append(c.SourceRanges,
			netip.PrefixFrom(fromWire(rk.Addr, fam), int(rk.Prefixlen)-32))
		out[f] = c
	}
	if err := rit.Err(); err != nil {
		return nil, fmt.Errorf("list source ranges: %w", err)
	}
	for f, c := range out {
		slices.SortFunc(c.SourceRanges, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		out[f] = c
	}
	return out, nil
}

func frontendOf(k xlbSvcKey) Frontend {
	return Frontend{Addr: fromWire(k.Addr, k.Family), Port: ntohs(k.Port), Proto: Protocol(k.Proto)}
}

// UpsertBackend sets where backend id sends packets.
func (d *Datapath) UpsertBackend(id BackendID, b Backend) error {
	if id == 0 || id >= maxBackends {
		return fmt.Errorf("backend %d: id out of range 1..%d", id, maxBackends-1)
	}
	if err := checkAddr(b.Addr); err != nil {
		return fmt.Errorf("backend %d: %w", id, err)
	}
	w, fam := toWire(b.Addr)
	v := xlbBackend{Addr: w, Port: htons(b.Port), Family: fam}
	if b.Down {
		v.Flags |= backendFlagDown
	}
	if err := d.objs.Backends.Put(uint32(id), &v); err != nil {
		return fmt.Errorf("backend %d (%s): %w", id, b.Addr, err)
	}
	return nil
}

// DeleteBackend forgets backend id. Flows still pinned to it by conntrack are re-balanced on
// their next packet.
func (d *Datapath) DeleteBackend(id BackendID) error {
	if id == 0 || id >= maxBackends {
		return fmt.Errorf("backend %d: id out of range 1..%d", id, maxBackends-1)
	}
	if err := d.objs.Backends.Put(uint32(id), &xlbBackend{}); err != nil {
		return fmt.Errorf("backend %d: delete: %w", id, err)
	}
	return d.zeroTraffic(d.objs.BackendStats, uint32(id))
}

// Backends returns every configured backend.
func (d *Datapath) Backends() (map[BackendID]Backend, error) {
	out := map[BackendID]Backend{}
	var id uint32
	var v xlbBackend
	it := d.objs.Backends.Iterate()
	for it.Next(&id, &v) {
		if v.Family == 0 {
			continue
		}
		out[BackendID(id)] = Backend{Addr: fromWire(v.Addr, v.Family), Port: ntohs(v.Port),
			Down: v.Flags&backendFlagDown != 0}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return out, nil
}

// SetMaglevTable replaces VIP id's Maglev table atomically: packets see the old table or the new
// one, never a mix. table[i] is the backend of slot i; len(table) is M (a prime, at most
// 1048573). A zero entry is an empty slot (its flows are dropped as "no backend").
func (d *Datapath) SetMaglevTable(id VIPID, table []BackendID) error {
	if id == 0 || id >= maxVIPs {
		return fmt.Errorf("Maglev table of VIP id %d: id out of range", id)
	}
	if len(table) == 0 || len(table) > maxMaglevM {
		return fmt.Errorf("Maglev table of VIP id %d: size %d out of range 1..%d", id, len(table), maxMaglevM)
	}
	inner, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "xlb_maglev_tbl",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(len(table) + 1),
		Flags:      unix_BPF_F_INNER_MAP,
	})
	if err != nil {
		return fmt.Errorf("Maglev table of VIP id %d: create inner map of %d slots: %w", id, len(table), err)
	}
	defer inner.Close()
	keys := make([]uint32, len(table)+1)
	vals := make([]uint32, len(table)+1)
	vals[0] = uint32(len(table))
	for i, b := range table {
		keys[i+1] = uint32(i + 1)
		vals[i+1] = uint32(b)
	}
	keys[0] = 0
	if _, err := inner.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("Maglev table of VIP id %d: fill: %w", id, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var holder xlbSvcKey
	if err := d.objs.VipById.Lookup(uint32(id), &holder); err != nil || holder.Family == 0 {
		return fmt.Errorf("Maglev table of VIP id %d: no such VIP", id)
	}
	if err := d.objs.Maglev.Put(uint32(id), inner); err != nil {
		return fmt.Errorf("Maglev table of VIP id %d: swap: %w", id, err)
	}
	return nil
}

// MaglevTable returns VIP id's current table (nil if it has none).
func (d *Datapath) MaglevTable(id VIPID) ([]BackendID, error) {
	var inner *ebpf.Map
	if err := d.objs.Maglev.Lookup(uint32(id), &inner); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("Maglev table of VIP id %d: %w", id, err)
	}
	defer inner.Close()
	var m uint32
	if err := inner.Lookup(uint32(0), &m); err != nil {
		return nil, fmt.Errorf("Maglev table of VIP id %d: read size: %w", id, err)
	}
	out := make([]BackendID, m)
	for i := range m {
		var b uint32
		if err := inner.Lookup(i+1, &b); err != nil {
			return nil, fmt.Errorf("Maglev table of VIP id %d: read slot %d: %w", id, i+1, err)
		}
		out[i] = BackendID(b)
	}
	return out, nil
}

// SetReverse says which VIP the replies of backend endpoint ep come from.
func (d *Datapath) SetReverse(ep Endpoint, r ReverseNAT) error {
	if err := checkAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	if !ep.Proto.valid() {
		return fmt.Errorf("reverse NAT of %s: protocol %s is not balanced", ep, ep.Proto)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := xlbRevValue{}
	if r.Ambiguous {
		v.Flags = revFlagAmbiguous
	} else {
		var vip xlbSvcKey
		if err := d.objs.VipById.Lookup(uint32(r.VIP), &vip); err != nil || vip.Family == 0 {
			return fmt.Errorf("reverse NAT of %s: VIP id %d is not configured", ep, r.VIP)
		}
		if _, fam := toWire(ep.Addr); fam != vip.Family {
			return fmt.Errorf("reverse NAT of %s: VIP %s is of another family", ep, frontendOf(vip))
		}
		v.VipId = uint32(r.VIP)
		v.VipPort = vip.Port
	}
	key := svcKey(ep.Addr, ep.Port, ep.Proto)
	var old xlbRevValue
	exists := d.objs.Reverse.Lookup(&key, &old) == nil
	if err := d.objs.Reverse.Put(&key, &v); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	if !exists {
		return d.filter.addBackend(&d.objs, ep.Addr.Unmap())
	}
	return nil
}

// DeleteReverse removes the reverse NAT entry of ep.
func (d *Datapath) DeleteReverse(ep Endpoint) error {
	if err := checkAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	key := svcKey(ep.Addr, ep.Port, ep.Proto)
	if err := d.objs.Reverse.Delete(&key); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reverse NAT of %s: delete: %w", ep, err)
	}
	return d.filter.delBackend(&d.objs, ep.Addr.Unmap())
}

// Reverses returns every reverse NAT entry.
func (d *Datapath) Reverses() (map[Endpoint]ReverseNAT, error) {
	out := map[Endpoint]ReverseNAT{}
	var k xlbSvcKey
	var v xlbRevValue
	it := d.objs.Reverse.Iterate()
	for it.Next(&k, &v) {
		f := frontendOf(k)
		out[Endpoint(f)] = ReverseNAT{VIP: VIPID(v.VipId), Ambiguous: v.Flags&revFlagAmbiguous != 0}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list reverse NAT entries: %w", err)
	}
	return out, nil
}

// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// UpsertVIP creates frontend f or updates its configuration. Packets reach its backends once
// its Maglev table is set (SetMaglevTable); until then they are dropped as "no backend".
func (d *Datapath) UpsertVIP(f datapath.Frontend, cfg datapath.VIPConfig) (err error) {
	defer d.invalidateAfter(&err)
	if err := datapath.CheckFrontend(f); err != nil {
		return err
	}
	if err := datapath.CheckVIPID(cfg.ID); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if err := datapath.CheckSourceRanges(f.Addr, cfg.SourceRanges); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
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
	var holder xlbVipRef
	if err := d.objs.VipById.Lookup(uint32(cfg.ID), &holder); err != nil {
		return fmt.Errorf("VIP %s: read vip_by_id[%d]: %w", f, cfg.ID, err)
	}
	if holder.Key.Family != 0 && holder.Key != key {
		return fmt.Errorf("VIP %s: id %d is used by %s: %w", f, cfg.ID, frontendOf(holder.Key), datapath.ErrIDInUse)
	}

	flags := uint32(0)
	if cfg.Affinity == datapath.AffinityClientIP {
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
	if err := d.objs.VipById.Put(uint32(cfg.ID), &xlbVipRef{Key: key, Flags: flags}); err != nil {
		return fmt.Errorf("VIP %s: write vip_by_id: %w", f, err)
	}
	// The Maglev table belongs to the frontend and survives a configuration update.
	info := xlbVipInfo{Id: uint32(cfg.ID), Flags: flags, TableOff: old.TableOff, TableSize: old.TableSize}
	if err := d.objs.Vips.Put(&key, &info); err != nil {
		return fmt.Errorf("VIP %s: write vips: %w", f, err)
	}
	if !exists {
		d.filter.vipAddrs[f.Addr.Unmap()]++
	}
	if was, is := exists && old.Flags&vipFlagSrcRanges != 0, flags&vipFlagSrcRanges != 0; was != is {
		d.filter.restrict(f.Addr, is)
	}
	// Every CPU must see the new flags before the prefixes no longer wanted go.
	if err := d.invalidateCaches(); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if exists && old.Id != uint32(cfg.ID) {
		d.clearVIPID(datapath.VIPID(old.Id))
	}
	if err := d.pruneSourceRanges(cfg.ID, cfg.SourceRanges); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if err := d.syncMarker(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	return nil
}

// DeleteVIP removes frontend f, its Maglev table and source ranges. Deleting a missing VIP is
// not an error.
func (d *Datapath) DeleteVIP(f datapath.Frontend) (err error) {
	defer d.invalidateAfter(&err)
	if err := datapath.CheckFrontend(f); err != nil {
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
	d.clearVIPID(datapath.VIPID(vi.Id))
	d.slots.freeAt(vi.TableOff, vi.TableSize, time.Now())
	if d.filter.vipAddrs[f.Addr.Unmap()]--; d.filter.vipAddrs[f.Addr.Unmap()] <= 0 {
		delete(d.filter.vipAddrs, f.Addr.Unmap())
	}
	if vi.Flags&vipFlagSrcRanges != 0 {
		d.filter.restrict(f.Addr, false)
	}
	if err := d.syncMarker(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	return nil
}

// clearVIPID forgets everything stored under a VIP id.
func (d *Datapath) clearVIPID(id datapath.VIPID) {
	_ = d.objs.VipById.Put(uint32(id), &xlbVipRef{})
	_ = d.pruneSourceRanges(id, nil)
	_ = d.zeroTraffic(d.objs.VipStats, uint32(id))
}

// syncMarker makes the marker entry {a, 0, 0} match the number of VIPs on address a (kept in
// filter.vipAddrs): present with that count while there are some, absent otherwise, with the
// address filter bit following. It repairs whatever an earlier failed call left.
func (d *Datapath) syncMarker(a netip.Addr) error {
	a = a.Unmap()
	key := markerKey(a)
	var vi xlbVipInfo
	err := d.objs.Vips.Lookup(&key, &vi)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read marker of %s: %w", a, err)
	}
	present := err == nil
	n := d.filter.vipAddrs[a]
	// Echo requests: restricted when every frontend on the address has source ranges.
	want := xlbVipInfo{Id: uint32(n), Flags: vipFlagMarker}
	var echo []netip.Prefix
	if n > 0 && d.filter.restricted[a] == n {
		id, ranges, err := d.echoRanges(a)
		if err != nil {
			return fmt.Errorf("echo ranges of %s: %w", a, err)
		}
		want.Flags |= vipFlagSrcRanges
		want.TableOff = echoRangesIDBit | uint32(id)
		echo = ranges
		// The prefixes first, so the flag never points at a half-written list.
		if err := d.addSourceRanges(datapath.VIPID(want.TableOff), echo); err != nil {
			return fmt.Errorf("echo ranges of %s: %w", a, err)
		}
	}
	switch {
	case n == 0 && present:
		if err := d.objs.Vips.Delete(&key); err != nil {
			return fmt.Errorf("delete marker of %s: %w", a, err)
		}
		if err := d.pruneEchoRanges(vi, xlbVipInfo{}, nil); err != nil {
			return err
		}
		return d.filter.delVIP(&d.objs, a)
	case n == 0:
		return nil
	case present && vi == want && want.Flags&vipFlagSrcRanges == 0:
		return nil
	}
	if err := d.objs.Vips.Put(&key, &want); err != nil {
		return fmt.Errorf("write marker of %s: %w", a, err)
	}
	if present {
		if err := d.pruneEchoRanges(vi, want, echo); err != nil {
			return err
		}
	}
	if !present {
		return d.filter.addVIP(&d.objs, a)
	}
	return nil
}

// restrict counts a frontend on address a gaining (or losing) source ranges.
func (f *addrFilter) restrict(a netip.Addr, gained bool) {
	a = a.Unmap()
	if gained {
		f.restricted[a]++
		return
	}
	if f.restricted[a]--; f.restricted[a] <= 0 {
		delete(f.restricted, a)
	}
}

// echoRanges returns the lowest VIP id among the frontends on address a and the union of their
// source ranges: who may ping an address whose every frontend has source ranges. It reads the
// maps (only addresses whose frontends all have source ranges pay for it).
func (d *Datapath) echoRanges(a netip.Addr) (datapath.VIPID, []netip.Prefix, error) {
	ids := map[uint32]bool{}
	var low uint32
	var k xlbSvcKey
	var vi xlbVipInfo
	it := d.objs.Vips.Iterate()
	for it.Next(&k, &vi) {
		if vi.Flags&vipFlagMarker != 0 || fromWire(k.Addr, k.Family) != a {
			continue
		}
		ids[vi.Id] = true
		if low == 0 || vi.Id < low {
			low = vi.Id
		}
	}
	if err := it.Err(); err != nil {
		return 0, nil, fmt.Errorf("list VIPs: %w", err)
	}
	fam := uint8(datapath.FamilyV6)
	if a.Is4() {
		fam = datapath.FamilyV4
	}
	seen := map[netip.Prefix]bool{}
	var out []netip.Prefix
	var rk xlbSrcRangeKey
	var v uint8
	rit := d.objs.SrcRanges.Iterate()
	for rit.Next(&rk, &v) {
		b := nativeBytes(rk.VipId)
		id := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		if !ids[id] {
			continue
		}
		p := netip.PrefixFrom(fromWire(rk.Addr, fam), int(rk.Prefixlen)-32)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if err := rit.Err(); err != nil {
		return 0, nil, fmt.Errorf("list source ranges: %w", err)
	}
	return datapath.VIPID(low), out, nil
}

// pruneEchoRanges deletes the echo ranges marker old pointed at that marker now no longer
// holds (keep, under now's id).
func (d *Datapath) pruneEchoRanges(old, now xlbVipInfo, keep []netip.Prefix) error {
	if old.Flags&vipFlagSrcRanges == 0 {
		return nil
	}
	if now.Flags&vipFlagSrcRanges == 0 || now.TableOff != old.TableOff {
		keep = nil
	}
	if err := d.pruneSourceRanges(datapath.VIPID(old.TableOff), keep); err != nil {
		return fmt.Errorf("echo ranges: %w", err)
	}
	return nil
}

func rangeKey(id datapath.VIPID, p netip.Prefix) xlbSrcRangeKey {
	p = p.Masked()
	w, _ := toWire(p.Addr())
	var be [4]byte
	be[0], be[1], be[2], be[3] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	return xlbSrcRangeKey{Prefixlen: uint32(32 + p.Bits()), VipId: nativeU32(be), Addr: w}
}

func (d *Datapath) addSourceRanges(id datapath.VIPID, ranges []netip.Prefix) error {
	for _, p := range ranges {
		k := rangeKey(id, p)
		if err := d.objs.SrcRanges.Put(&k, uint8(1)); err != nil {
			return fmt.Errorf("add source range %s: %w", p, err)
		}
	}
	return nil
}

// pruneSourceRanges deletes VIP id's prefixes that are not in keep.
func (d *Datapath) pruneSourceRanges(id datapath.VIPID, keep []netip.Prefix) error {
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
func (d *Datapath) VIPs() (map[datapath.Frontend]datapath.VIPConfig, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[datapath.Frontend]datapath.VIPConfig{}
	// checked: VIP ids whose flags enforce source ranges. Prefixes of other VIPs (left by a write
	// that failed half-way) are not reported: they are not in force.
	checked := map[uint32]bool{}
	var k xlbSvcKey
	var vi xlbVipInfo
	it := d.objs.Vips.Iterate()
	for it.Next(&k, &vi) {
		if vi.Flags&vipFlagMarker != 0 {
			continue
		}
		cfg := datapath.VIPConfig{ID: datapath.VIPID(vi.Id)}
		if vi.Flags&vipFlagAffinityClientIP != 0 {
			cfg.Affinity = datapath.AffinityClientIP
		}
		out[frontendOf(k)] = cfg
		if vi.Flags&vipFlagSrcRanges != 0 {
			checked[vi.Id] = true
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list VIPs: %w", err)
	}
	byID := map[uint32]datapath.Frontend{}
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
		if !ok || !checked[id] {
			continue
		}
		fam := uint8(datapath.FamilyV6)
		if f.Addr.Unmap().Is4() {
			fam = datapath.FamilyV4
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

func frontendOf(k xlbSvcKey) datapath.Frontend {
	return datapath.Frontend{Addr: fromWire(k.Addr, k.Family), Port: ntohs(k.Port), Proto: datapath.Protocol(k.Proto)}
}

// UpsertBackend sets where backend id sends packets.
func (d *Datapath) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	if err := datapath.CheckBackendID(id); err != nil {
		return err
	}
	if err := datapath.CheckAddr(b.Addr); err != nil {
		return fmt.Errorf("backend %d: %w", id, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w, fam := toWire(b.Addr)
	v := xlbBackend{Addr: w, Port: htons(b.Port), Family: fam}
	if b.Down {
		v.Flags |= backendFlagDown
	}
	if b.DSR {
		v.Flags |= backendFlagDSR
	}
	if d.endpoints.needsReverseCT(b.Addr, b.Port) {
		v.Flags |= backendFlagReverseCT
	}
	var old xlbBackend
	if err := d.objs.Backends.Lookup(uint32(id), &old); err != nil {
		return fmt.Errorf("backend %d (%s): %w", id, b.Addr, err)
	}
	if err := d.objs.Backends.Put(uint32(id), &v); err != nil {
		return fmt.Errorf("backend %d (%s): %w", id, b.Addr, err)
	}
	if old.Family != 0 {
		d.endpoints.remove(id, fromWire(old.Addr, old.Family), ntohs(old.Port))
	}
	d.endpoints.add(id, b.Addr, b.Port)
	if old.Family != 0 && old != v {
		// Established flows replay a record of their backend's address, port and state
		// (the flow cache's fast path): a changed backend must not be replayed.
		return d.invalidateCaches()
	}
	return nil
}

// DeleteBackend forgets backend id. Flows still pinned to it by conntrack are re-balanced on
// their next packet.
func (d *Datapath) DeleteBackend(id datapath.BackendID) error {
	if err := datapath.CheckBackendID(id); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var old xlbBackend
	if err := d.objs.Backends.Lookup(uint32(id), &old); err != nil {
		return fmt.Errorf("backend %d: %w", id, err)
	}
	if err := d.objs.Backends.Put(uint32(id), &xlbBackend{}); err != nil {
		return fmt.Errorf("backend %d: delete: %w", id, err)
	}
	if old.Family != 0 {
		d.endpoints.remove(id, fromWire(old.Addr, old.Family), ntohs(old.Port))
		if err := d.invalidateCaches(); err != nil { // see UpsertBackend
			return err
		}
	}
	return d.zeroTraffic(d.objs.BackendStats, uint32(id))
}

// Backends returns every configured backend, reading the array in batches.
func (d *Datapath) Backends() (map[datapath.BackendID]datapath.Backend, error) {
	out := map[datapath.BackendID]datapath.Backend{}
	const chunk = 8192
	keys := make([]uint32, chunk)
	vals := make([]xlbBackend, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.Backends.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			v := vals[i]
			if v.Family == 0 {
				continue
			}
			out[datapath.BackendID(keys[i])] = datapath.Backend{Addr: fromWire(v.Addr, v.Family), Port: ntohs(v.Port),
				Down: v.Flags&backendFlagDown != 0, DSR: v.Flags&backendFlagDSR != 0}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list backends: %w", err)
		}
	}
}

// SetMaglevTable replaces VIP id's Maglev table atomically: packets see the old table or the new
// one, never a mix. table[i] is the backend of slot i; len(table) is M (a prime, at most
// 1048573). A zero entry is an empty slot (its flows are dropped as "no backend").
func (d *Datapath) SetMaglevTable(id datapath.VIPID, table []datapath.BackendID) (err error) {
	defer d.invalidateAfter(&err)
	if err := datapath.CheckVIPID(id); err != nil {
		return fmt.Errorf("Maglev table: %w", err)
	}
	if err := datapath.CheckTableSize(len(table)); err != nil {
		return fmt.Errorf("Maglev table of VIP id %d: %w", id, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	key, vi, err := d.vipByID(id)
	if err != nil {
		return fmt.Errorf("Maglev table of VIP id %d: %w", id, err)
	}
	n := uint32(len(table))
	off, ok := d.slots.allocWait(n, time.Now, time.Sleep)
	if !ok {
		return fmt.Errorf("Maglev table of VIP %s: %w for %d slots (%d free of %d; raise Options.MaglevSlots)",
			frontendOf(key), datapath.ErrFull, n, d.slots.available(), d.opts.MaglevSlots)
	}
	keys := make([]uint32, n)
	vals := make([]uint32, n)
	for i, b := range table {
		keys[i] = off + uint32(i)
		vals[i] = uint32(b)
	}
	if _, err := d.objs.MaglevSlots.BatchUpdate(keys, vals, nil); err != nil {
		d.slots.freeAt(off, n, time.Time{})
		return fmt.Errorf("Maglev table of VIP %s: fill %d slots: %w", frontendOf(key), n, err)
	}
	oldOff, oldN := vi.TableOff, vi.TableSize
	vi.TableOff, vi.TableSize = off, n
	if err := d.objs.Vips.Update(&key, &vi, ebpf.UpdateExist); err != nil {
		d.slots.freeAt(off, n, time.Time{})
		return fmt.Errorf("Maglev table of VIP %s: switch to the new table: %w", frontendOf(key), err)
	}
	d.slots.freeAt(oldOff, oldN, time.Now())
	return nil
}

// vipByID returns the frontend key and descriptor of VIP id.
func (d *Datapath) vipByID(id datapath.VIPID) (xlbSvcKey, xlbVipInfo, error) {
	var ref xlbVipRef
	var vi xlbVipInfo
	if err := d.objs.VipById.Lookup(uint32(id), &ref); err != nil {
		return ref.Key, vi, fmt.Errorf("read vip_by_id: %w", err)
	}
	key := ref.Key
	if key.Family == 0 {
		return key, vi, datapath.ErrUnknownVIP
	}
	if err := d.objs.Vips.Lookup(&key, &vi); err != nil {
		return key, vi, fmt.Errorf("VIP %s: %w", frontendOf(key), err)
	}
	return key, vi, nil
}

// MaglevTable returns VIP id's current table (nil if it has none).
func (d *Datapath) MaglevTable(id datapath.VIPID) ([]datapath.BackendID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, vi, err := d.vipByID(id)
	if err != nil {
		return nil, fmt.Errorf("Maglev table of VIP id %d: %w", id, err)
	}
	all, err := d.readSlots(vi.TableOff + vi.TableSize)
	if err != nil {
		return nil, fmt.Errorf("Maglev table of VIP id %d: %w", id, err)
	}
	return tableOf(all, vi), nil
}

// MaglevTables returns every VIP's current table, reading the slot array once (for adopting the
// state of an earlier process).
func (d *Datapath) MaglevTables() (map[datapath.VIPID][]datapath.BackendID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var k xlbSvcKey
	var vi xlbVipInfo
	infos := map[datapath.VIPID]xlbVipInfo{}
	end := uint32(0)
	it := d.objs.Vips.Iterate()
	for it.Next(&k, &vi) {
		if vi.Flags&vipFlagMarker != 0 {
			continue
		}
		infos[datapath.VIPID(vi.Id)] = vi
		end = max(end, vi.TableOff+vi.TableSize)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list VIPs: %w", err)
	}
	all, err := d.readSlots(end)
	if err != nil {
		return nil, err
	}
	out := make(map[datapath.VIPID][]datapath.BackendID, len(infos))
	for id, vi := range infos {
		out[id] = tableOf(all, vi)
	}
	return out, nil
}

func tableOf(all []uint32, vi xlbVipInfo) []datapath.BackendID {
	if vi.TableSize == 0 {
		return nil
	}
	out := make([]datapath.BackendID, vi.TableSize)
	for i := range out {
		out[i] = datapath.BackendID(all[vi.TableOff+uint32(i)])
	}
	return out
}

// readSlots reads maglev_slots[0:end] in batches.
func (d *Datapath) readSlots(end uint32) ([]uint32, error) {
	out := make([]uint32, 0, end)
	const chunk = 1 << 16
	keys := make([]uint32, chunk)
	vals := make([]uint32, chunk)
	var cursor ebpf.MapBatchCursor
	for uint32(len(out)) < end {
		n, err := d.objs.MaglevSlots.BatchLookup(&cursor, keys, vals, nil)
		out = append(out, vals[:n]...)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read Maglev slots: %w", err)
		}
	}
	if uint32(len(out)) < end {
		return nil, fmt.Errorf("read Maglev slots: got %d of %d", len(out), end)
	}
	return out[:end], nil
}

// SetReverse says which VIP the replies of backend endpoint ep come from.
func (d *Datapath) SetReverse(ep datapath.Endpoint, r datapath.ReverseNAT) (err error) {
	defer d.invalidateAfter(&err)
	if err := datapath.CheckAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	if !ep.Proto.Valid() {
		return fmt.Errorf("reverse NAT of %s: %w", ep, datapath.ErrBadProtocol)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := xlbRevValue{}
	// checkVIP returns the frontend of VIP id, which must be configured, of ep's family.
	checkVIP := func(id datapath.VIPID) (xlbVipRef, error) {
		var ref xlbVipRef
		if err := d.objs.VipById.Lookup(uint32(id), &ref); err != nil || ref.Key.Family == 0 {
			return ref, fmt.Errorf("reverse NAT of %s: VIP id %d: %w", ep, id, datapath.ErrUnknownVIP)
		}
		if _, fam := toWire(ep.Addr); fam != ref.Key.Family {
			return ref, fmt.Errorf("reverse NAT of %s: VIP %s is of another family: %w", ep, frontendOf(ref.Key), datapath.ErrBadAddress)
		}
		return ref, nil
	}
	if r.Ambiguous {
		v.Flags = revFlagAmbiguous
		// The datapath stops at the first 0: the candidates must come first.
		if err := datapath.CheckCandidates(r.Candidates); err != nil {
			return fmt.Errorf("reverse NAT of %s: %w", ep, err)
		}
		for i, id := range r.Candidates {
			if id == 0 {
				break
			}
			if _, err := checkVIP(id); err != nil {
				return err
			}
			v.Cand[i] = uint32(id)
		}
	} else {
		ref, err := checkVIP(r.VIP)
		if err != nil {
			return err
		}
		v.VipId = uint32(r.VIP)
		v.VipPort = ref.Key.Port
	}
	key := svcKey(ep.Addr, ep.Port, ep.Proto)
	var old xlbRevValue
	exists := d.objs.Reverse.Lookup(&key, &old) == nil
	if err := d.objs.Reverse.Put(&key, &v); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	if !exists {
		if err := d.filter.addBackend(&d.objs, ep.Addr.Unmap()); err != nil {
			return fmt.Errorf("reverse NAT of %s: %w", ep, err)
		}
	}
	if err := d.setAmbiguous(ep, r.Ambiguous); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	return nil
}

// DeleteReverse removes the reverse NAT entry of ep.
func (d *Datapath) DeleteReverse(ep datapath.Endpoint) (err error) {
	defer d.invalidateAfter(&err)
	if err := datapath.CheckAddr(ep.Addr); err != nil {
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
	if err := d.setAmbiguous(ep, false); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	return d.filter.delBackend(&d.objs, ep.Addr.Unmap())
}

// Reverses returns every reverse NAT entry.
func (d *Datapath) Reverses() (map[datapath.Endpoint]datapath.ReverseNAT, error) {
	out := map[datapath.Endpoint]datapath.ReverseNAT{}
	var k xlbSvcKey
	var v xlbRevValue
	it := d.objs.Reverse.Iterate()
	for it.Next(&k, &v) {
		f := frontendOf(k)
		r := datapath.ReverseNAT{VIP: datapath.VIPID(v.VipId), Ambiguous: v.Flags&revFlagAmbiguous != 0}
		for i, id := range v.Cand {
			r.Candidates[i] = datapath.VIPID(id)
		}
		out[datapath.Endpoint(f)] = r
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list reverse NAT entries: %w", err)
	}
	return out, nil
}

// invalidateAfter drops the datapath's lookup caches once a change is written (even a partial
// one), joining any error in doing so to *err.
func (d *Datapath) invalidateAfter(err *error) {
	if ierr := d.invalidateCaches(); ierr != nil {
		*err = errors.Join(*err, ierr)
	}
}

// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"
	"net/netip"
)

// addrFilter keeps the address filter bitmaps (map addr_bitmap) in step with the VIP and
// backend address sets. It holds only what can be rebuilt from the maps: VIP addresses come
// from the marker entries of vips, backend addresses from the keys of reverse.
type addrFilter struct {
	// vipBits, backendBits: bit -> number of addresses hashing to it.
	vipBits, backendBits [addrFilterBits]uint32
	// words: the map's contents (VIP bitmap, then backend bitmap), as last written.
	words [2 * addrFilterWords]uint64
	// backendAddrs: backend address -> number of reverse entries with it.
	backendAddrs map[netip.Addr]int
	// vipAddrs: VIP address -> number of VIP frontends on it (the marker's count).
	vipAddrs map[netip.Addr]int
	// restricted: VIP address -> number of its frontends with source ranges. When it equals
	// vipAddrs, echo requests to the address obey the union of their ranges (syncEchoRanges).
	restricted map[netip.Addr]int
}

func (f *addrFilter) rebuild(objs *xlbObjects) error {
	*f = addrFilter{backendAddrs: map[netip.Addr]int{}, vipAddrs: map[netip.Addr]int{}, restricted: map[netip.Addr]int{}}
	var k xlbSvcKey
	var vi xlbVipInfo
	it := objs.Vips.Iterate()
	for it.Next(&k, &vi) {
		if vi.Flags&vipFlagMarker != 0 {
			f.vipBits[filterBit(fromWire(k.Addr, k.Family))]++
		} else {
			f.vipAddrs[fromWire(k.Addr, k.Family)]++
			if vi.Flags&vipFlagSrcRanges != 0 {
				f.restricted[fromWire(k.Addr, k.Family)]++
			}
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate vips: %w", err)
	}
	var rv xlbRevValue
	it = objs.Reverse.Iterate()
	for it.Next(&k, &rv) {
		a := fromWire(k.Addr, k.Family)
		if f.backendAddrs[a] == 0 {
			f.backendBits[filterBit(a)]++
		}
		f.backendAddrs[a]++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate reverse: %w", err)
	}
	return f.write(objs)
}

func (f *addrFilter) write(objs *xlbObjects) error {
	keys := make([]uint32, len(f.words))
	for i := range f.words {
		keys[i] = uint32(i)
		f.words[i] = 0
	}
	for i := range addrFilterBits {
		if f.vipBits[i] > 0 {
			f.words[i/64] |= 1 << (i % 64)
		}
		if f.backendBits[i] > 0 {
			f.words[addrFilterWords+i/64] |= 1 << (i % 64)
		}
	}
	if _, err := objs.AddrBitmap.BatchUpdate(keys, f.words[:], nil); err != nil {
		return fmt.Errorf("write addr_bitmap: %w", err)
	}
	return nil
}

// setBit writes the one word holding bit of the VIP (backend false) or backend bitmap.
func (f *addrFilter) setBit(objs *xlbObjects, backend bool, bit uint32, on bool) error {
	w := bit / 64
	if backend {
		w += addrFilterWords
	}
	if on {
		f.words[w] |= 1 << (bit % 64)
	} else {
		f.words[w] &^= 1 << (bit % 64)
	}
	if err := objs.AddrBitmap.Put(w, f.words[w]); err != nil {
		return fmt.Errorf("write addr_bitmap word %d: %w", w, err)
	}
	return nil
}

// addVIP / delVIP account for a VIP address marker created or removed.
func (f *addrFilter) addVIP(objs *xlbObjects, a netip.Addr) error {
	b := filterBit(a)
	f.vipBits[b]++
	if f.vipBits[b] == 1 {
		return f.setBit(objs, false, b, true)
	}
	return nil
}

func (f *addrFilter) delVIP(objs *xlbObjects, a netip.Addr) error {
	b := filterBit(a)
	if f.vipBits[b] == 0 {
		return nil
	}
	f.vipBits[b]--
	if f.vipBits[b] == 0 {
		return f.setBit(objs, false, b, false)
	}
	return nil
}

// addBackend / delBackend account for a reverse entry of address a created or removed.
func (f *addrFilter) addBackend(objs *xlbObjects, a netip.Addr) error {
	f.backendAddrs[a]++
	if f.backendAddrs[a] > 1 {
		return nil
	}
	b := filterBit(a)
	f.backendBits[b]++
	if f.backendBits[b] == 1 {
		return f.setBit(objs, true, b, true)
	}
	return nil
}

func (f *addrFilter) delBackend(objs *xlbObjects, a netip.Addr) error {
	if f.backendAddrs[a] == 0 {
		return nil
	}
	f.backendAddrs[a]--
	if f.backendAddrs[a] > 0 {
		return nil
	}
	delete(f.backendAddrs, a)
	b := filterBit(a)
	f.backendBits[b]--
	if f.backendBits[b] == 0 {
		return f.setBit(objs, true, b, false)
	}
	return nil
}

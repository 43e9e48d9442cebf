// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"fmt"
	"net/netip"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The endpoint filter (bpf/filter.h): a bitmap of the addresses that may be endpoints, which
// spares the egress program a flows lookup for every packet of an address that cannot be.
const (
	epFilterLog2  = 16
	epFilterWords = 1 << (epFilterLog2 - 6)
	epFilterMul   = 0x9e3779b1
)

// epBit is bpf/filter.h's ep_bit: the filter's bit of address a.
func epBit(a netip.Addr) uint32 {
	w, fam := datapath.WireAddr(a)
	x := w[0]
	if fam == datapath.FamilyV6 {
		x = x*epFilterMul ^ w[1]
		x = x*epFilterMul ^ w[2]
		x = x*epFilterMul ^ w[3]
	}
	return (x * epFilterMul) >> (32 - epFilterLog2)
}

// setFilterBit sets address a's bit in the filter (the programs only read it; d is its one
// writer).
func (d *Datapath) setFilterBit(a netip.Addr) error {
	bit := epBit(a)
	word := bit / 64
	var v uint64
	if err := d.objs.EpFilter.Lookup(word, &v); err != nil {
		return fmt.Errorf("dsr: read the endpoint filter: %w", err)
	}
	if v&(1<<(bit%64)) != 0 {
		return nil
	}
	v |= 1 << (bit % 64)
	if err := d.objs.EpFilter.Put(word, v); err != nil {
		return fmt.Errorf("dsr: write the endpoint filter: %w", err)
	}
	return nil
}

// rebuildFilter writes the filter afresh from the endpoints of the allowed pairs and the Pods
// of the recorded flows (whose replies are rewritten even after their pair went): bits of
// addresses that are neither any more are cleared. A word being written is read whole, old or
// new, by the programs, and either has every bit still needed.
func (d *Datapath) rebuildFilter() error {
	var words [epFilterWords]uint64
	pairs, err := d.DSRServices()
	if err != nil {
		return err
	}
	for p := range pairs {
		b := epBit(p.Endpoint.Addr())
		words[b/64] |= 1 << (b % 64)
	}
	fs, err := d.Flows()
	if err != nil {
		return err
	}
	for _, f := range fs {
		b := epBit(f.Pod.Addr())
		words[b/64] |= 1 << (b % 64)
	}
	for i, w := range words {
		if err := d.objs.EpFilter.Put(uint32(i), w); err != nil {
			return fmt.Errorf("dsr: write the endpoint filter: %w", err)
		}
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// MaxNodeAddrs is how many of the node's own addresses the egress program knows
// (MAX_NODE_ADDRS in bpf/maps.h).
const MaxNodeAddrs = 1024

// SetNodeAddresses replaces the node's own addresses the egress program knows: an ICMP error
// about a recorded flow is given the VIP only when its sender is the Pod it quotes or one of
// these (the node's stack about a packet to its Pod); any other sender's is left alone
// (counter icmp_foreign). Load and Attach set them from the addresses of the interfaces of the
// calling thread's network namespace; call it again when they change.
func (d *Datapath) SetNodeAddresses(addrs []netip.Addr) error {
	want := map[dsrNodeAddrKey]bool{}
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		var k dsrNodeAddrKey
		k.Addr.W, k.Family = datapath.WireAddr(a)
		want[k] = true
	}
	if len(want) > MaxNodeAddrs {
		return fmt.Errorf("dsr: %d node addresses: at most %d: %w", len(want), MaxNodeAddrs, datapath.ErrOutOfRange)
	}
	var (
		k     dsrNodeAddrKey
		v     uint8
		stale []dsrNodeAddrKey
	)
	it := d.objs.NodeAddrs.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("dsr: read node addresses: %w", err)
	}
	for k := range want {
		if err := d.objs.NodeAddrs.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("dsr: add node address %s: %w", datapath.AddrFromWire(k.Addr.W, k.Family), err)
		}
	}
	for _, k := range stale {
		if err := d.objs.NodeAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("dsr: delete node address %s: %w", datapath.AddrFromWire(k.Addr.W, k.Family), err)
		}
	}
	return nil
}

// hostAddresses returns the addresses of the interfaces of the calling thread's network
// namespace.
func hostAddresses() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("dsr: list the node's addresses: %w", err)
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}

// refreshNodeAddresses sets the node's addresses from its interfaces.
func (d *Datapath) refreshNodeAddresses() error {
	addrs, err := hostAddresses()
	if err != nil {
		return err
	}
	return d.SetNodeAddresses(addrs)
}

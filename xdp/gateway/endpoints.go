// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// endpointIndex keeps each backend's BACKEND_F_REVERSE_CT flag consistent with the reverse NAT
// entries: a backend whose endpoint has an ambiguous entry (for either protocol) writes a reverse
// conntrack entry for every new flow, so its replies can be translated. Like the address filter it
// is derived from the maps on load.
type endpointIndex struct {
	// backends: endpoint {address, port} -> backend ids with it.
	backends map[netip.AddrPort]map[datapath.BackendID]struct{}
	// ambiguous: endpoint {address, port, protocol} whose reverse entry is ambiguous.
	ambiguous map[datapath.Endpoint]bool
}

func (x *endpointIndex) rebuild(objs *xlbObjects) error {
	*x = endpointIndex{backends: map[netip.AddrPort]map[datapath.BackendID]struct{}{}, ambiguous: map[datapath.Endpoint]bool{}}
	var k xlbSvcKey
	var rv xlbRevValue
	it := objs.Reverse.Iterate()
	for it.Next(&k, &rv) {
		if rv.Flags&revFlagAmbiguous != 0 {
			x.ambiguous[datapath.Endpoint(frontendOf(k))] = true
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate reverse: %w", err)
	}
	const chunk = 8192
	keys := make([]uint32, chunk)
	vals := make([]xlbBackend, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := objs.Backends.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if vals[i].Family != 0 {
				x.add(datapath.BackendID(keys[i]), fromWire(vals[i].Addr, vals[i].Family), ntohs(vals[i].Port))
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read backends: %w", err)
		}
	}
}

func (x *endpointIndex) add(id datapath.BackendID, a netip.Addr, port uint16) {
	ep := netip.AddrPortFrom(a.Unmap(), port)
	if x.backends[ep] == nil {
		x.backends[ep] = map[datapath.BackendID]struct{}{}
	}
	x.backends[ep][id] = struct{}{}
}

func (x *endpointIndex) remove(id datapath.BackendID, a netip.Addr, port uint16) {
	ep := netip.AddrPortFrom(a.Unmap(), port)
	delete(x.backends[ep], id)
	if len(x.backends[ep]) == 0 {
		delete(x.backends, ep)
	}
}

// needsReverseCT says whether backends at {a, port} must keep reverse conntrack entries.
func (x *endpointIndex) needsReverseCT(a netip.Addr, port uint16) bool {
	a = a.Unmap()
	return x.ambiguous[datapath.Endpoint{Addr: a, Port: port, Proto: datapath.TCP}] || x.ambiguous[datapath.Endpoint{Addr: a, Port: port, Proto: datapath.UDP}]
}

// setAmbiguous records ep's ambiguity and rewrites the flag of the backends at ep.
func (d *Datapath) setAmbiguous(ep datapath.Endpoint, ambiguous bool) error {
	ep.Addr = ep.Addr.Unmap()
	before := d.endpoints.needsReverseCT(ep.Addr, ep.Port)
	if ambiguous {
		d.endpoints.ambiguous[ep] = true
	} else {
		delete(d.endpoints.ambiguous, ep)
	}
	after := d.endpoints.needsReverseCT(ep.Addr, ep.Port)
	if before == after {
		return nil
	}
	for id := range d.endpoints.backends[netip.AddrPortFrom(ep.Addr, ep.Port)] {
		var v xlbBackend
		if err := d.objs.Backends.Lookup(uint32(id), &v); err != nil {
			return fmt.Errorf("backend %d: %w", id, err)
		}
		v.Flags &^= backendFlagReverseCT
		if after {
			v.Flags |= backendFlagReverseCT
		}
		if err := d.objs.Backends.Put(uint32(id), &v); err != nil {
			return fmt.Errorf("backend %d: update reverse-conntrack flag: %w", id, err)
		}
	}
	return nil
}

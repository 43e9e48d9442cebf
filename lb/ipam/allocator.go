// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"net/netip"
	"slices"
	"sort"
)

// Allocator hands out VIPs from pools. Its state is derived: the controller rebuilds it on
// start by feeding every Service's status addresses back through Assign. It is not safe for
// concurrent use; the controller serialises calls.
type Allocator struct {
	// pools are the pools in configuration order (the order Assign tries them), validated,
	// each with its ranges sorted.
	pools []Pool
	// allocs: owner ("namespace/name") → its allocation. The one record of who holds what.
	allocs map[string]*allocation
	// owners: address → the owners holding it, sorted. Derived from allocs by link and
	// unlink, and changed nowhere else.
	owners map[netip.Addr][]string
	// used: the keys of owners, sorted (IPv4 first). Derived with owners, to find free
	// addresses by walking from the start of a range.
	used []netip.Addr
}

// allocation is what one owner holds.
type allocation struct {
	// req is the request that gave it: namespace, labels, sharing key and ports.
	req Request
	// addrs are the addresses held, in the order Assign returned them.
	addrs []netip.Addr
}

// New returns an allocator with no pools and no allocations.
func New() *Allocator {
	return &Allocator{allocs: map[string]*allocation{}, owners: map[netip.Addr][]string{}}
}

// SetPools replaces the pools, or returns an error and changes nothing when they are not
// valid (a bad name, a pool without addresses, a name used twice, two ranges overlapping).
// Existing allocations are kept whatever the new pools: orphans lists, sorted, the owners now
// holding an address that no pool admitting them contains (its pool is gone, has shrunk, or
// no longer admits the Service's namespace or labels). They keep serving it, and nobody else
// is given it, until their owner asks for another address or is released; the controller
// should warn about each (see Orphaned).
func (a *Allocator) SetPools(pools []Pool) (orphans []string, err error) {
	checked, err := checkPools(pools)
	if err != nil {
		return nil, err
	}
	a.pools = checked
	for owner, al := range a.allocs {
		if len(a.stranded(al)) > 0 {
			orphans = append(orphans, owner)
		}
	}
	slices.Sort(orphans)
	return orphans, nil
}

// Orphaned returns the addresses owner holds that no pool admitting it contains (see
// SetPools), or nil.
func (a *Allocator) Orphaned(owner string) []netip.Addr {
	if al := a.allocs[owner]; al != nil {
		return a.stranded(al)
	}
	return nil
}

// stranded returns al's addresses that no pool admitting its owner contains.
func (a *Allocator) stranded(al *allocation) []netip.Addr {
	var out []netip.Addr
	for _, addr := range al.addrs {
		if p := a.poolOf(addr); p == nil || p.refusal(al.req.Namespace, al.req.Labels) != "" {
			out = append(out, addr)
		}
	}
	return out
}

// Release forgets owner's allocation (its Service is gone or no longer ours); its addresses
// become free unless others share them.
func (a *Allocator) Release(owner string) { a.unlink(owner) }

// Addrs returns the addresses owner holds, or nil.
func (a *Allocator) Addrs(owner string) []netip.Addr {
	if al := a.allocs[owner]; al != nil {
		return slices.Clone(al.addrs)
	}
	return nil
}

// Owners returns the owners holding addr, sorted; nil when it is free.
func (a *Allocator) Owners(addr netip.Addr) []string {
	return slices.Clone(a.owners[addr.Unmap()])
}

// PoolOf returns the name of the pool containing addr, whether or not it is in use.
func (a *Allocator) PoolOf(addr netip.Addr) (string, bool) {
	if p := a.poolOf(addr.Unmap()); p != nil {
		return p.Name, true
	}
	return "", false
}

// poolOf returns the pool containing addr, or nil (pools do not overlap).
func (a *Allocator) poolOf(addr netip.Addr) *Pool {
	for i := range a.pools {
		if a.pools[i].contains(Range{addr, addr}) {
			return &a.pools[i]
		}
	}
	return nil
}

// pool returns the pool named name, or nil.
func (a *Allocator) pool(name string) *Pool {
	for i := range a.pools {
		if a.pools[i].Name == name {
			return &a.pools[i]
		}
	}
	return nil
}

// link records al as owner's allocation, replacing any other, and updates the indexes.
func (a *Allocator) link(owner string, al *allocation) {
	a.unlink(owner)
	if len(al.addrs) == 0 {
		return
	}
	a.allocs[owner] = al
	for _, addr := range al.addrs {
		owners := a.owners[addr]
		if len(owners) == 0 {
			i := sort.Search(len(a.used), func(i int) bool { return !a.used[i].Less(addr) })
			a.used = slices.Insert(a.used, i, addr)
		}
		i, _ := slices.BinarySearch(owners, owner)
		a.owners[addr] = slices.Insert(owners, i, owner)
	}
}

// unlink forgets owner's allocation and updates the indexes.
func (a *Allocator) unlink(owner string) {
	al := a.allocs[owner]
	if al == nil {
		return
	}
	delete(a.allocs, owner)
	for _, addr := range al.addrs {
		owners := slices.DeleteFunc(a.owners[addr], func(o string) bool { return o == owner })
		if len(owners) > 0 {
			a.owners[addr] = owners
			continue
		}
		delete(a.owners, addr)
		if i, found := slices.BinarySearchFunc(a.used, addr, netip.Addr.Compare); found {
			a.used = slices.Delete(a.used, i, i+1)
		}
	}
}

// usedIn returns the used addresses within r, sorted (a subslice of a.used: do not modify).
func (a *Allocator) usedIn(r Range) []netip.Addr {
	lo := sort.Search(len(a.used), func(i int) bool { return !a.used[i].Less(r.First) })
	hi := sort.Search(len(a.used), func(i int) bool { return r.Last.Less(a.used[i]) })
	if hi < lo {
		hi = lo
	}
	return a.used[lo:hi]
}

// SPDX-License-Identifier: Apache-2.0
package ipam

import "math"

// PoolUsage is how full one family of one pool is (for metrics and messages).
type PoolUsage struct {
	// Pool is the pool's name.
	Pool string
	// Family is the family counted.
	Family Family
	// Size is the number of addresses the pool can hand out automatically (.0 and .255
	// excluded under AvoidBuggyIPs), saturating at math.MaxUint64 for huge IPv6 pools.
	Size uint64
	// Used is the number of the pool's addresses held by at least one Service (an explicitly
	// requested .0 or .255 included).
	Used uint64
}

// Usage returns the usage of each family of each pool, pools in configuration order, IPv4
// before IPv6.
func (a *Allocator) Usage() []PoolUsage {
	var out []PoolUsage
	for i := range a.pools {
		for _, f := range []Family{IPv4, IPv6} {
			if a.pools[i].has(f) {
				out = append(out, a.usage(&a.pools[i], f))
			}
		}
	}
	return out
}

// usage counts family f of pool p.
func (a *Allocator) usage(p *Pool, f Family) PoolUsage {
	u := PoolUsage{Pool: p.Name, Family: f}
	for _, r := range p.Ranges {
		if r.Family() != f {
			continue
		}
		n := r.Size()
		if p.AvoidBuggyIPs {
			n -= buggyCount(r)
		}
		if u.Size > math.MaxUint64-n {
			u.Size = math.MaxUint64
		} else {
			u.Size += n
		}
		u.Used += uint64(len(a.usedIn(r)))
	}
	return u
}

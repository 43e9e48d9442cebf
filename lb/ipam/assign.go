// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Assign gives req.Service its addresses, one per family, in the order of req.Families, and
// records them. current are the addresses the Service holds now (its status): each is kept
// when still allowed, so that calling Assign again with its answer changes nothing. In detail:
//
//   - With req.Addresses, the answer is exactly those addresses. Each must be in a pool
//     (req.Pool, if set) admitting the Service, unless the Service already holds it (in
//     current), and free or shareable.
//   - Otherwise, for each family, the first address of current of that family is kept if it
//     is in a pool admitting the Service (req.Pool, if set), or in no such pool at all (an
//     orphan: see SetPools) unless the Service has changed its req.Pool since the last Assign
//     (its owner acted). Else an address is allocated: one shared under req.SharingKey if
//     there is one, else the lowest free address of the first pool (in configuration order)
//     that admits the Service, assigns automatically (or is req.Pool) and has one.
//   - A family the Service prefers but does not require (PreferDualStack) is left out, without
//     error, when no pool can give it.
//   - An address of current that another Service holds (and may not share with this one) is
//     an error, even for a preferred family: two Services claim it, and the later one — the
//     controller feeds the oldest Services first — is told rather than silently moved.
//
// The error is an *Error. On error the owner's existing allocation is left as it was; an owner
// without one gets the addresses of current no other owner holds, so that no address in a
// Service's status is ever handed to another Service.
func (a *Allocator) Assign(req Request, current []netip.Addr) ([]netip.Addr, error) {
	req = req.normalize()
	var cur []netip.Addr
	for _, c := range current {
		if c = c.Unmap(); c.IsValid() && c.Zone() == "" && !slices.Contains(cur, c) {
			cur = append(cur, c)
		}
	}
	addrs, err := a.choose(&req, cur)
	if err != nil {
		if _, known := a.allocs[req.Service]; !known && req.Service != "" {
			var hold []netip.Addr
			for _, c := range cur {
				if a.conflict(&req, c) == nil {
					hold = append(hold, c)
				}
			}
			a.link(req.Service, &allocation{req: req, addrs: hold})
		}
		return nil, err
	}
	a.link(req.Service, &allocation{req: req, addrs: addrs})
	return slices.Clone(addrs), nil
}

// choose works out req's addresses without changing anything.
func (a *Allocator) choose(req *Request, cur []netip.Addr) ([]netip.Addr, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	if req.Pool != "" && a.pool(req.Pool) == nil {
		e := req.fail(ReasonUnknownPool, "pool %q does not exist (%s)", req.Pool, a.poolNames())
		e.Pool = req.Pool
		return nil, e
	}
	var out []netip.Addr
	if len(req.Addresses) > 0 {
		for _, f := range req.Families {
			i := slices.IndexFunc(req.Addresses, func(x netip.Addr) bool { return FamilyOf(x) == f })
			if i < 0 {
				continue
			}
			addr := req.Addresses[i]
			if err := a.requested(req, addr, slices.Contains(cur, addr)); err != nil {
				return nil, err
			}
			out = append(out, addr)
		}
		return out, nil
	}
	required := req.required()
	for _, f := range req.Families {
		addr, err := a.keep(req, cur, f)
		if err != nil {
			return nil, err // two Services claim one address: the later one is told
		}
		if !addr.IsValid() {
			addr, err = a.allocate(req, f)
		}
		if err != nil {
			if slices.Contains(required, f) {
				return nil, err
			}
			continue
		}
		out = append(out, addr)
	}
	return out, nil
}

// requested checks an explicitly requested address; held says the Service already has it.
func (a *Allocator) requested(req *Request, addr netip.Addr, held bool) error {
	p := a.poolOf(addr)
	if !held {
		switch {
		case p == nil && req.Pool != "":
			e := req.fail(ReasonNotInAnyPool, "requested address %s is not in pool %q, nor in any other", addr, req.Pool)
			e.Addr, e.Pool = addr, req.Pool
			return e
		case p == nil:
			e := req.fail(ReasonNotInAnyPool, "requested address %s is in no address pool (%s)", addr, a.poolNames())
			e.Addr = addr
			return e
		case req.Pool != "" && p.Name != req.Pool:
			e := req.fail(ReasonNotInAnyPool, "requested address %s is in pool %q, not in the requested pool %q", addr, p.Name, req.Pool)
			e.Addr, e.Pool = addr, req.Pool
			return e
		}
		if why := p.refusal(req.Namespace, req.Labels); why != "" {
			e := req.fail(ReasonNoPoolMatches, "requested address %s cannot be used: %s", addr, why)
			e.Addr, e.Pool = addr, p.Name
			return e
		}
	}
	if e := a.conflict(req, addr); e != nil {
		return e
	}
	return nil
}

// keep returns the address of current of family f the Service may keep, the zero Addr when
// there is none, or an error when the one it holds is taken by another Service.
func (a *Allocator) keep(req *Request, cur []netip.Addr, f Family) (netip.Addr, error) {
	prev := a.allocs[req.Service]
	for _, c := range cur {
		if FamilyOf(c) != f {
			continue
		}
		if req.Pool != "" {
			p := a.poolOf(c)
			switch {
			case p != nil && p.Name == req.Pool:
			case p != nil && p.refusal(req.Namespace, req.Labels) == "":
				continue // in a pool that admits it, but the Service asks for another one
			case prev != nil && prev.req.Pool != req.Pool:
				continue // an orphan whose Service now asks for a pool: the owner acted
			}
		}
		if e := a.conflict(req, c); e != nil {
			return netip.Addr{}, e
		}
		return c, nil
	}
	return netip.Addr{}, nil
}

// conflict says why req's Service cannot hold addr next to its other owners, or nil.
//
// Services of one namespace share addr under one sharing key when no port clashes. Services of
// different namespaces share it only in a pool with CrossNamespaceSharing, and a refusal never
// tells a Service about another namespace's: its name, its sharing key, or whether it has one
// (one message whatever the reason, so that guessing keys teaches nothing).
func (a *Allocator) conflict(req *Request, addr netip.Addr) *Error {
	for _, o := range a.owners[addr] {
		if o == req.Service {
			continue
		}
		other := a.allocs[o].req
		var e *Error
		if other.Namespace != req.Namespace {
			p := a.poolOf(addr)
			cross := p != nil && p.CrossNamespaceSharing
			if !cross || req.SharingKey == "" || req.SharingKey != other.SharingKey {
				e = req.fail(ReasonAddressInUse, "address %s is in use by a Service of another namespace", addr)
				if !cross {
					e.Detail += " (addresses are shared across namespaces only in pools with crossNamespaceSharing)"
				}
			} else if q, ok := clash(req.Ports, other.Ports); ok {
				e = req.fail(ReasonPortsClash, "address %s is shared with a Service of another namespace, which already uses %s", addr, q)
				e.Port = q
			}
			if e != nil {
				e.Addr = addr
				return e
			}
			continue
		}
		switch {
		case req.SharingKey == "" && other.SharingKey == "":
			e = req.fail(ReasonAddressInUse, "address %s is in use by service %s (give both Services the same sharing key to share it)", addr, o)
		case req.SharingKey == "":
			e = req.fail(ReasonAddressInUse, "address %s is in use by service %s, which shares it under sharing key %q; this Service has no sharing key", addr, o, other.SharingKey)
		case other.SharingKey == "":
			e = req.fail(ReasonAddressInUse, "address %s is in use by service %s, which has no sharing key", addr, o)
		case req.SharingKey != other.SharingKey:
			e = req.fail(ReasonSharingKeyMismatch, "address %s is shared by service %s under sharing key %q, not %q", addr, o, other.SharingKey, req.SharingKey)
		default:
			if q, ok := clash(req.Ports, other.Ports); ok {
				e = req.fail(ReasonPortsClash, "address %s is shared with service %s, which already uses %s", addr, o, q)
				e.Port = q
			}
		}
		if e != nil {
			e.Addr, e.Other = addr, o
			return e
		}
	}
	return nil
}

// clash returns the first port of theirs that one of ours clashes with.
func clash(ours, theirs []Port) (Port, bool) {
	for _, p := range ours {
		for _, q := range theirs {
			if p.clashes(q) {
				return q, true
			}
		}
	}
	return Port{}, false
}

// allocate finds a new address of family f for req.
func (a *Allocator) allocate(req *Request, f Family) (netip.Addr, error) {
	var candidates []*Pool
	var refusals []string
	withFamily := 0
	for i := range a.pools {
		p := &a.pools[i]
		if req.Pool != "" && p.Name != req.Pool {
			continue
		}
		if !p.has(f) {
			continue
		}
		withFamily++
		if why := p.refusal(req.Namespace, req.Labels); why != "" {
			refusals = append(refusals, why)
			continue
		}
		if req.Pool == "" && !p.AutoAssign {
			refusals = append(refusals, fmt.Sprintf("pool %q is not assigned automatically (request it by name or address)", p.Name))
			continue
		}
		candidates = append(candidates, p)
	}
	switch {
	case withFamily == 0 && req.Pool != "":
		e := req.fail(ReasonFamilyUnavailable, "pool %q has no %s addresses", req.Pool, f)
		e.Pool = req.Pool
		return netip.Addr{}, e
	case withFamily == 0:
		return netip.Addr{}, req.fail(ReasonFamilyUnavailable, "no address pool has %s addresses", f)
	case len(candidates) == 0:
		return netip.Addr{}, req.fail(ReasonNoPoolMatches, "no %s pool admits it: %s", f, strings.Join(refusals, "; "))
	}
	if req.SharingKey != "" {
		for _, p := range candidates {
			for _, r := range p.Ranges {
				if r.Family() != f {
					continue
				}
				for _, u := range a.usedIn(r) {
					if !(p.AvoidBuggyIPs && buggy(u)) && a.conflict(req, u) == nil {
						return u, nil
					}
				}
			}
		}
	}
	for _, p := range candidates {
		if addr, ok := a.firstFree(p, f); ok {
			return addr, nil
		}
	}
	var full []string
	for _, p := range candidates {
		u := a.usage(p, f)
		full = append(full, fmt.Sprintf("(%s of %s %s addresses in use)", count(u.Used), count(u.Size), f))
	}
	e := req.fail(ReasonPoolExhausted, "pool %q exhausted %s", candidates[0].Name, full[0])
	if len(full) > 1 {
		for i, p := range candidates {
			full[i] = strconv.Quote(p.Name) + " " + full[i]
		}
		e.Detail = "every pool it may use is exhausted: " + strings.Join(full, ", ")
	}
	e.Pool = candidates[0].Name
	return netip.Addr{}, e
}

// firstFree returns the lowest free address of family f in p, skipping .0 and .255 under
// AvoidBuggyIPs. It walks the used addresses of each range from its start: O(used), whatever
// the range's size.
func (a *Allocator) firstFree(p *Pool, f Family) (netip.Addr, bool) {
	for _, r := range p.Ranges {
		if r.Family() != f {
			continue
		}
		used := a.usedIn(r)
		cand, i := r.First, 0
		for {
			if p.AvoidBuggyIPs && buggy(cand) || i < len(used) && used[i] == cand {
				if cand == r.Last {
					break
				}
				if i < len(used) && used[i] == cand {
					i++
				}
				cand = cand.Next()
				continue
			}
			return cand, true
		}
	}
	return netip.Addr{}, false
}

// poolNames lists the pools for a message.
func (a *Allocator) poolNames() string {
	if len(a.pools) == 0 {
		return "no pools are configured"
	}
	var names []string
	for _, p := range a.pools {
		names = append(names, strconv.Quote(p.Name))
	}
	return "pools: " + strings.Join(names, ", ")
}

// count formats n, or "2^64 or more" when it saturated.
func count(n uint64) string {
	if n == ^uint64(0) {
		return "2^64 or more"
	}
	return strconv.FormatUint(n, 10)
}

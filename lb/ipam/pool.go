// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Pool is a set of addresses VIPs are taken from, and the Services that may use them.
type Pool struct {
	// Name identifies the pool (the pool annotation names it): a DNS label, 1 to 63 lower-case
	// letters, digits and '-', starting and ending with a letter or digit; unique.
	Name string
	// Ranges are the pool's addresses, of either family or both; at least one. No two ranges,
	// of this pool or of any other, may overlap. SetPools keeps them sorted by address.
	Ranges []Range
	// AutoAssign says whether Services that name neither an address nor a pool get addresses
	// from this pool. false keeps the pool for Services that ask for it (by address or by
	// name); Services holding an address of the pool keep it either way.
	AutoAssign bool
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255. Some client stacks and
	// middleboxes still treat those as network or broadcast addresses of a classful /24 and
	// drop or mangle traffic to them, even inside a larger CIDR; the addresses are still
	// accepted when a Service requests them explicitly.
	AvoidBuggyIPs bool
	// Namespaces, if not empty, are the only namespaces whose Services may use the pool; empty
	// admits every namespace.
	Namespaces []string
	// ServiceSelector, if not empty, is a label selector (matchLabels): a Service may use the
	// pool only if it carries every label with the given value. Empty admits every Service.
	// Labels are the Service author's to write: this selects, it does not protect (Namespaces
	// is the boundary).
	ServiceSelector map[string]string
	// CrossNamespaceSharing lets Services of different namespaces share an address of this
	// pool under one sharing key. false (the default) shares an address only among Services
	// of one namespace: a sharing key is a word any tenant can write, and an address shared
	// across tenants lets one take ports of another's VIP.
	CrossNamespaceSharing bool
}

// poolName is what a pool name must look like (an RFC 1123 label).
var poolName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckPoolName says why s is not a valid pool name, if it is not.
func CheckPoolName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("pool name is empty")
	case len(s) > 63:
		return fmt.Errorf("pool name %q is longer than 63 characters", s)
	case !poolName.MatchString(s):
		return fmt.Errorf("pool name %q is not a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)", s)
	}
	return nil
}

// clone returns a deep copy of p with its ranges sorted, or says why p is not valid.
func (p Pool) clone() (Pool, error) {
	if err := CheckPoolName(p.Name); err != nil {
		return Pool{}, err
	}
	if len(p.Ranges) == 0 {
		return Pool{}, fmt.Errorf("pool %q has no addresses", p.Name)
	}
	q := p
	q.Ranges = slices.Clone(p.Ranges)
	for _, r := range q.Ranges {
		if !r.First.IsValid() || !r.Last.IsValid() || r.First.Is4() != r.Last.Is4() || r.Last.Less(r.First) ||
			r.First.Zone() != "" || r.Last.Zone() != "" || r.First.Is4In6() || r.Last.Is4In6() {
			return Pool{}, fmt.Errorf("pool %q: %v-%v is not a range of one family, lowest address first", p.Name, r.First, r.Last)
		}
	}
	slices.SortFunc(q.Ranges, func(a, b Range) int {
		if a.First.Is4() != b.First.Is4() {
			if a.First.Is4() {
				return -1
			}
			return 1
		}
		return a.First.Compare(b.First)
	})
	for i := 1; i < len(q.Ranges); i++ {
		if q.Ranges[i-1].Overlaps(q.Ranges[i]) {
			return Pool{}, fmt.Errorf("pool %q: ranges %s and %s overlap", p.Name, q.Ranges[i-1], q.Ranges[i])
		}
	}
	q.Namespaces = slices.Clone(p.Namespaces)
	for _, ns := range q.Namespaces {
		if ns == "" {
			return Pool{}, fmt.Errorf("pool %q: empty namespace name", p.Name)
		}
	}
	q.ServiceSelector = maps.Clone(p.ServiceSelector)
	for k := range q.ServiceSelector {
		if k == "" {
			return Pool{}, fmt.Errorf("pool %q: service selector has an empty label name", p.Name)
		}
	}
	return q, nil
}

// checkPools validates pools and returns sorted deep copies.
func checkPools(pools []Pool) ([]Pool, error) {
	out := make([]Pool, 0, len(pools))
	for i, p := range pools {
		q, err := p.clone()
		if err != nil {
			return nil, err
		}
		for _, prev := range out[:i] {
			if prev.Name == q.Name {
				return nil, fmt.Errorf("pool %q is defined twice", q.Name)
			}
			for _, r := range q.Ranges {
				for _, pr := range prev.Ranges {
					if r.Overlaps(pr) {
						return nil, fmt.Errorf("pools %q and %q overlap: %s and %s", prev.Name, q.Name, pr, r)
					}
				}
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// contains reports whether a is one of p's addresses.
func (p *Pool) contains(a Range) bool {
	for _, r := range p.Ranges {
		if r.Overlaps(a) {
			return true
		}
	}
	return false
}

// has reports whether p has addresses of family f.
func (p *Pool) has(f Family) bool {
	return slices.ContainsFunc(p.Ranges, func(r Range) bool { return r.Family() == f })
}

// refusal says why p does not admit a Service of namespace ns with the given labels, or ""
// when it does.
func (p *Pool) refusal(ns string, labels map[string]string) string {
	if len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, ns) {
		return fmt.Sprintf("pool %q admits only namespace%s %s", p.Name, plural(len(p.Namespaces)), strings.Join(p.Namespaces, ", "))
	}
	var all, missing []string
	for _, k := range slices.Sorted(maps.Keys(p.ServiceSelector)) {
		all = append(all, k+"="+p.ServiceSelector[k])
		if v, ok := labels[k]; !ok || v != p.ServiceSelector[k] {
			missing = append(missing, k+"="+p.ServiceSelector[k])
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("pool %q admits only Services labelled %s (this one lacks %s)", p.Name,
			strings.Join(all, ", "), strings.Join(missing, ", "))
	}
	return ""
}

// plural returns "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

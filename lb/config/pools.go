// SPDX-License-Identifier: Apache-2.0
package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/ipam"
)

// The fields of a pool (an item of pools).
var poolFields = []string{"name", "addresses", "autoAssign", "avoidBuggyIPs", "namespaces", "serviceSelector", "crossNamespaceSharing", "bgp"}

// DefaultAutoAssign is pools[].autoAssign when absent: a pool hands out addresses to every
// Service it admits.
const DefaultAutoAssign = true

// Pool is an address pool the Kubernetes controller hands VIPs out of (an item of pools).
// IPAM converts it for the allocator.
type Pool struct {
	// Name (key name; required) identifies the pool, for the pool annotation of Services and
	// in messages and metrics: a DNS label (1 to 63 lower-case letters, digits and '-',
	// starting and ending with a letter or digit), unique among the pools.
	Name string
	// Addresses (key addresses; required, at least one) are the pool's addresses, each written
	// as a CIDR ("198.18.100.0/24", "2001:db8:100::/120"), a range of one family
	// ("198.18.101.10-198.18.101.20") or one address; IPv4 and IPv6 may be mixed. No two
	// ranges, of this pool or another, may overlap, nor contain a VIP of services.
	Addresses []ipam.Range
	// AutoAssign (key autoAssign) says whether Services that name neither an address nor a
	// pool get addresses from the pool; default DefaultAutoAssign (true). false keeps the pool
	// for Services that ask for it by name or by address.
	AutoAssign bool
	// AvoidBuggyIPs (key avoidBuggyIPs) skips IPv4 addresses ending in .0 or .255 when
	// allocating (some clients and middleboxes mistake them for classful network or broadcast
	// addresses); default false.
	AvoidBuggyIPs bool
	// Namespaces (key namespaces), if not empty, are the only namespaces whose Services may
	// use the pool, each a DNS label, each once; absent or empty admits every namespace.
	Namespaces []string
	// ServiceSelector (key serviceSelector), if not empty, maps label names to values: a
	// Service may use the pool only if it carries every one of them (matchLabels). Names are
	// Kubernetes label keys (an optional DNS prefix and '/', then a name); values are label
	// values, quoted when they look like numbers or booleans. Absent or empty admits every
	// Service.
	ServiceSelector map[string]string
	// CrossNamespaceSharing (key crossNamespaceSharing) lets Services of different
	// namespaces share an address of the pool under one xlb.dev/allow-shared-ip key; default
	// false: an address is shared only among Services of one namespace (a sharing key is a
	// word any tenant can write).
	CrossNamespaceSharing bool
	// Route (key bgp) holds the BGP route attributes (communities, largeCommunities,
	// localPref, med) the VIPs of the pool are announced with, on top of the bgp section's; it
	// becomes the lb.Service.Route of the Services given its addresses.
	Route lb.RouteAttributes
}

// IPAM returns the pool as the allocator takes it.
func (p Pool) IPAM() ipam.Pool {
	return ipam.Pool{Name: p.Name, Ranges: slices.Clone(p.Addresses), AutoAssign: p.AutoAssign,
		AvoidBuggyIPs: p.AvoidBuggyIPs, Namespaces: slices.Clone(p.Namespaces), ServiceSelector: p.ServiceSelector,
		CrossNamespaceSharing: p.CrossNamespaceSharing}
}

// IPAMPools returns the pools as the allocator takes them, in configuration order.
func (c *Config) IPAMPools() []ipam.Pool {
	out := make([]ipam.Pool, 0, len(c.Pools))
	for _, p := range c.Pools {
		out = append(out, p.IPAM())
	}
	return out
}

// poolRange is a range seen in the file, to report overlaps with its place.
type poolRange struct {
	// r is the range.
	r ipam.Range
	// pool is the name of its pool.
	pool string
	// where is its item of pools[].addresses.
	where place
}

// pools walks the pools list. It returns the ranges with their places, to check the services'
// VIPs against.
func (d *decoder) pools(n *yaml.Node, path string) ([]Pool, []poolRange) {
	items, ok := d.list(n, path)
	if !ok {
		return nil, nil
	}
	if len(items) == 0 {
		d.failf(n, path, "empty (list at least one address pool)")
	}
	var out []Pool
	var ranges []poolRange
	names := map[string]place{}
	for i, item := range items {
		o, ok := d.object(item, index(path, i), poolFields)
		if !ok {
			continue
		}
		p := Pool{AutoAssign: DefaultAutoAssign}
		if v := d.required(o, "name", "required: the pool annotation of a Service names it"); v != nil {
			if s, ok := d.str(v, o.at("name")); ok {
				if err := ipam.CheckPoolName(s); err != nil {
					d.fail(v, o.at("name"), err)
				} else if first, dup := names[s]; dup {
					d.fail(v, o.at("name"), errDuplicate(strconv.Quote(s), first))
				} else {
					names[s] = place{o.path, v.Line}
				}
				p.Name = s
			}
		}
		if v := d.required(o, "addresses", "list the pool's CIDRs, ranges or addresses"); v != nil {
			p.Addresses, ranges = d.poolAddresses(v, o.at("addresses"), p.Name, ranges)
		}
		if v := o.get("autoAssign"); v != nil {
			p.AutoAssign, _ = d.boolean(v, o.at("autoAssign"))
		}
		if v := o.get("avoidBuggyIPs"); v != nil {
			p.AvoidBuggyIPs, _ = d.boolean(v, o.at("avoidBuggyIPs"))
		}
		if v := o.get("namespaces"); v != nil {
			p.Namespaces = d.namespaces(v, o.at("namespaces"))
		}
		if v := o.get("crossNamespaceSharing"); v != nil {
			p.CrossNamespaceSharing, _ = d.boolean(v, o.at("crossNamespaceSharing"))
		}
		if v := o.get("serviceSelector"); v != nil {
			p.ServiceSelector = d.selector(v, o.at("serviceSelector"))
		}
		if v := o.get("bgp"); v != nil {
			if bo, ok := d.object(v, o.at("bgp"), routeAttributeFields); ok {
				p.Route = d.routeAttributes(bo)
			}
		}
		out = append(out, p)
	}
	return out, ranges
}

// poolAddresses walks a pool's addresses, checking each against the ranges seen so far (of
// every pool) for overlaps, and returns them and seen with them added.
func (d *decoder) poolAddresses(n *yaml.Node, path, pool string, seen []poolRange) ([]ipam.Range, []poolRange) {
	items, ok := d.list(n, path)
	if !ok {
		return nil, seen
	}
	if len(items) == 0 {
		d.failf(n, path, "empty (list the pool's CIDRs, ranges or addresses)")
	}
	var out []ipam.Range
	for i, item := range items {
		p := index(path, i)
		s, ok := d.str(item, p)
		if !ok {
			continue
		}
		r, err := ipam.ParseRange(s)
		if err != nil {
			d.fail(item, p, err)
			continue
		}
		if j := slices.IndexFunc(seen, func(x poolRange) bool { return x.r.Overlaps(r) }); j >= 0 {
			d.failf(item, p, "%s overlaps %s of %s (line %d): a VIP belongs to one pool", r, seen[j].r, seen[j].where.path, seen[j].where.line)
			continue
		}
		seen = append(seen, poolRange{r, pool, place{p, item.Line}})
		out = append(out, r)
	}
	return out, seen
}

// dnsLabel matches an RFC 1123 label (a namespace name).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// namespaces walks a list of namespace names.
func (d *decoder) namespaces(n *yaml.Node, path string) []string {
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	var out []string
	seen := map[string]place{}
	for i, item := range items {
		p := index(path, i)
		s, ok := d.str(item, p)
		switch {
		case !ok:
			continue
		case len(s) > 63 || !dnsLabel.MatchString(s):
			d.failf(item, p, "%q is not a namespace name (a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)", s)
			continue
		}
		if first, dup := seen[s]; dup {
			d.fail(item, p, errDuplicate(strconv.Quote(s), first))
			continue
		}
		seen[s] = place{p, item.Line}
		out = append(out, s)
	}
	return out
}

// selector walks a label name → value mapping (matchLabels).
func (d *decoder) selector(n *yaml.Node, path string) map[string]string {
	o, ok := d.object(n, path, nil)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(o.vals))
	for k := range o.vals {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return o.vals[a].Line - o.vals[b].Line })
	out := map[string]string{}
	for _, k := range keys {
		v, p := o.vals[k], o.at(k)
		if err := checkLabelKey(k); err != nil {
			d.fail(v, p, err)
			continue
		}
		s, ok := d.str(v, p)
		if !ok {
			continue
		}
		if err := checkLabelValue(s); err != nil {
			d.fail(v, p, err)
			continue
		}
		out[k] = s
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// labelName matches the name part of a label key, a label value, and of a qualified name.
var labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// dnsSubdomain matches an RFC 1123 subdomain (the prefix of a label key).
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// checkQualifiedName says why s is not a Kubernetes qualified name (an optional DNS subdomain
// prefix and '/', then a name of at most 63 characters); what names it in the message.
func checkQualifiedName(s, what string) error {
	prefix, name, hasPrefix := strings.Cut(s, "/")
	if !hasPrefix {
		prefix, name = "", s
	}
	switch {
	case hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)):
		return fmt.Errorf("%q is not a %s: the prefix %q is not a DNS subdomain (lower-case, such as xlb.dev)", s, what, prefix)
	case name == "" || len(name) > 63 || !labelName.MatchString(name):
		return fmt.Errorf("%q is not a %s: the name %q must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", s, what, name)
	}
	return nil
}

// checkLabelKey says why k is not a label key.
func checkLabelKey(k string) error { return checkQualifiedName(k, "label name") }

// checkLabelValue says why v is not a label value (empty is one).
func checkLabelValue(v string) error {
	if v != "" && (len(v) > 63 || !labelName.MatchString(v)) {
		return fmt.Errorf("%q is not a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)", v)
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/ipam"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// The reasons of an AddressPool's Ready condition.
const (
	// ReasonPoolReady: the pool is in use.
	ReasonPoolReady = "InUse"
	// ReasonPoolInvalid: the spec cannot be used as written (the apiserver's validation lets
	// through what only a full parse finds, e.g. a CIDR with host bits or a reserved range).
	ReasonPoolInvalid = "Invalid"
	// ReasonPoolConflict: the pool overlaps, or has the name of, a pool that came first (the
	// gateways' file, or an older AddressPool).
	ReasonPoolConflict = "Conflict"
)

// PoolVerdict is what the controller made of one AddressPool object.
type PoolVerdict struct {
	// Ready says whether the pool is in use.
	Ready bool
	// Reason is ReasonPoolReady, ReasonPoolInvalid or ReasonPoolConflict.
	Reason string
	// Message says why, for the pool's condition and Event.
	Message string
	// Generation is the object's metadata.generation the verdict is about.
	Generation int64
}

// ObjectPools returns the address pools of the gateways' file (fixed, in file order) followed by
// those of the AddressPool objects that can be used, and a verdict for each object by name.
//
// An object is refused when its spec does not parse, or when it overlaps or has the name of a
// pool that came first: the file's pools first, then the objects from the oldest
// (creationTimestamp, then name). So a pool never loses its addresses to one created after it,
// and every gateway, seeing the same objects, decides the same. The usable objects follow the
// file's pools in increasing spec.priority, then name: the order the allocator tries them.
func ObjectPools(objs []v1alpha1.AddressPool, fixed []Pool) ([]Pool, map[string]PoolVerdict) {
	verdicts := make(map[string]PoolVerdict, len(objs))
	byAge := slices.Clone(objs)
	slices.SortFunc(byAge, func(a, b v1alpha1.AddressPool) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	accepted := slices.Clone(fixed)
	fromFile := map[string]bool{}
	for _, p := range fixed {
		fromFile[p.Name] = true
	}
	type usable struct {
		pool     Pool
		priority int32
	}
	var objPools []usable
	for _, o := range byAge {
		v := PoolVerdict{Generation: o.Generation}
		p, err := PoolOf(&o)
		switch {
		case err != nil:
			v.Reason, v.Message = ReasonPoolInvalid, err.Error()
		case fromFile[p.Name]:
			v.Reason, v.Message = ReasonPoolConflict, fmt.Sprintf("a pool named %q is in the gateways' config file, which wins", p.Name)
		default:
			if err := checkWith(accepted, p); err != nil {
				v.Reason, v.Message = ReasonPoolConflict, err.Error()
				break
			}
			accepted = append(accepted, p)
			objPools = append(objPools, usable{p, o.Spec.Priority})
			v.Ready, v.Reason, v.Message = true, ReasonPoolReady, "the pool is in use"
		}
		verdicts[o.Name] = v
	}
	slices.SortFunc(objPools, func(a, b usable) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), strings.Compare(a.pool.Name, b.pool.Name))
	})
	out := slices.Clone(fixed)
	for _, u := range objPools {
		out = append(out, u.pool)
	}
	return out, verdicts
}

// checkWith says why p cannot join pools (which are valid together), if it cannot.
func checkWith(pools []Pool, p Pool) error {
	all := make([]ipam.Pool, 0, len(pools)+1)
	for _, q := range pools {
		all = append(all, q.Pool)
	}
	if _, err := ipam.New().SetPools(append(all, p.Pool)); err != nil {
		return err
	}
	return nil
}

// PoolOf converts an AddressPool object to a pool, checking what the apiserver's validation
// cannot: each address parses as ipam.ParseRange takes it, and the pool is valid on its own.
func PoolOf(o *v1alpha1.AddressPool) (Pool, error) {
	p := Pool{Pool: ipam.Pool{
		Name:          o.Name,
		AutoAssign:    o.Spec.AutoAssign == nil || *o.Spec.AutoAssign,
		AvoidBuggyIPs: o.Spec.AvoidBuggyIPs,
		Namespaces:    slices.Clone(o.Spec.Namespaces),

		CrossNamespaceSharing: o.Spec.CrossNamespaceSharing,
	}}
	if len(o.Spec.ServiceSelector) > 0 {
		p.ServiceSelector = make(map[string]string, len(o.Spec.ServiceSelector))
		for k, v := range o.Spec.ServiceSelector {
			p.ServiceSelector[k] = string(v)
		}
	}
	for i, s := range o.Spec.Addresses {
		r, err := ipam.ParseRange(s)
		if err != nil {
			return Pool{}, fmt.Errorf("spec.addresses[%d]: %w", i, err)
		}
		p.Ranges = append(p.Ranges, r)
	}
	if b := o.Spec.BGP; b != nil {
		var err error
		if p.Route, err = routeOf(b, "spec.bgp"); err != nil {
			return Pool{}, err
		}
	}
	if _, err := ipam.New().SetPools([]ipam.Pool{p.Pool}); err != nil {
		return Pool{}, err
	}
	return p, nil
}

// routeOf converts BGP attributes found at field path (spec.bgp of a pool, spec of an
// advertisement), naming the field in its errors.
func routeOf(b *v1alpha1.RouteAttributes, path string) (lb.RouteAttributes, error) {
	var r lb.RouteAttributes
	for i, s := range b.Communities {
		c, err := bgp.ParseCommunity(s)
		if err != nil {
			return r, fmt.Errorf("%s.communities[%d]: %w", path, i, err)
		}
		r.Communities = append(r.Communities, c)
	}
	for i, s := range b.LargeCommunities {
		c, err := bgp.ParseLargeCommunity(s)
		if err != nil {
			return r, fmt.Errorf("%s.largeCommunities[%d]: %w", path, i, err)
		}
		r.LargeCommunities = append(r.LargeCommunities, c)
	}
	u32 := func(field string, v *int64) (*uint32, error) {
		if v == nil {
			return nil, nil
		}
		if *v < 0 || *v > 1<<32-1 {
			return nil, fmt.Errorf("%s.%s: %d is not between 0 and 4294967295", path, field, *v)
		}
		x := uint32(*v)
		return &x, nil
	}
	var err error
	if r.LocalPref, err = u32("localPref", b.LocalPref); err != nil {
		return r, err
	}
	if r.MED, err = u32("med", b.MED); err != nil {
		return r, err
	}
	return r, nil
}

// freeCount returns a pool's free addresses (size - used, both families) in decimal.
func freeCount(us []ipam.PoolUsage, pool string) (used int64, free string) {
	total := new(big.Int)
	for _, u := range us {
		if u.Pool != pool {
			continue
		}
		used += int64(min(u.Used, 1<<62))
		f := new(big.Int).SetUint64(u.Size)
		f.Sub(f, new(big.Int).SetUint64(min(u.Used, u.Size)))
		total.Add(total, f)
	}
	return used, total.String()
}

// AddressPoolObject returns the AddressPool object equivalent to pool p with the given
// priority: PoolOf of it gives p back (ranges written as ipam.Range.String reads them). It is
// what `xlb convert` writes for a config file's pools.
func AddressPoolObject(p Pool, priority int32) v1alpha1.AddressPool {
	o := v1alpha1.AddressPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "AddressPool"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name},
		Spec: v1alpha1.AddressPoolSpec{
			AutoAssign:    &p.AutoAssign,
			AvoidBuggyIPs: p.AvoidBuggyIPs,
			Namespaces:    slices.Clone(p.Namespaces),
			Priority:      priority,

			CrossNamespaceSharing: p.CrossNamespaceSharing,
		},
	}
	for _, r := range p.Ranges {
		o.Spec.Addresses = append(o.Spec.Addresses, r.String())
	}
	if len(p.ServiceSelector) > 0 {
		o.Spec.ServiceSelector = make(map[string]v1alpha1.LabelValue, len(p.ServiceSelector))
		for k, v := range p.ServiceSelector {
			o.Spec.ServiceSelector[k] = v1alpha1.LabelValue(v)
		}
	}
	r := p.Route
	if len(r.Communities) > 0 || len(r.LargeCommunities) > 0 || r.LocalPref != nil || r.MED != nil {
		b := &v1alpha1.RouteAttributes{}
		for _, c := range r.Communities {
			b.Communities = append(b.Communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
		}
		for _, c := range r.LargeCommunities {
			b.LargeCommunities = append(b.LargeCommunities, c.String())
		}
		if r.LocalPref != nil {
			b.LocalPref = ptrTo(int64(*r.LocalPref))
		}
		if r.MED != nil {
			b.MED = ptrTo(int64(*r.MED))
		}
		o.Spec.BGP = b
	}
	return o
}

// ptrTo returns a pointer to a copy of v.
func ptrTo[T any](v T) *T { return &v }

// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/xlb-dev/xlb/lb/maglev"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// PlannedBackend is one backend of a frontend.
type PlannedBackend struct {
	// Key is the backend's address and target port (0: the client's destination port).
	Key netip.AddrPort
	// Weight is its share of new flows (0 when it is not Active).
	Weight uint32
	// State is the model's state.
	State BackendState
	// DSR says packets opening a flow to it carry the frontend to its node (Forwarding.Direct):
	// its replies leave by the node, translated there (see planReverse for its reverse NAT).
	DSR bool
	// Excluded says it gets no new flows (Weight 0) only because the site is in the DSR mode
	// and its node cannot serve it (Forwarding.Excluded).
	Excluded bool
}

// FrontendPlan is what the datapath needs for one frontend.
type FrontendPlan struct {
	// Service names the service the frontend belongs to.
	Service string
	// Affinity is the service's session affinity.
	Affinity datapath.Affinity
	// SourceRanges are the service's source ranges of the frontend's family.
	SourceRanges []netip.Prefix
	// Backends are every backend of the frontend's family, sorted by Key, draining and
	// unhealthy ones included (their established flows stay).
	Backends []PlannedBackend
	// Table is the Maglev table: for each slot the index in Backends, or -1 when no backend
	// takes new flows. Its length is the prime table size M.
	Table []int
	// Serving counts the backends that take new flows; 0 means the frontend is down.
	Serving int
	// Route is the service's BGP route attributes (Service.Route).
	Route RouteAttributes
}

// ReversePlan says which frontend a backend endpoint's replies must come from.
type ReversePlan struct {
	// Frontend is the frontend when the endpoint serves exactly one.
	Frontend datapath.Frontend
	// Ambiguous is set when the endpoint serves several frontends (replies are then mapped by
	// conntrack, else by Candidates; see docs/datapath.md).
	Ambiguous bool
	// Candidates (Ambiguous only) are the frontends whose replies may leave by this endpoint,
	// sorted; nil when there are more than MaxReverseCandidates. A gateway without conntrack
	// entry for a reply finds its frontend as the one candidate whose Maglev table sends the
	// reply's forward tuple to this endpoint.
	Candidates []datapath.Frontend
}

// Desired is the datapath state every gateway derives from the same services.
type Desired struct {
	// Frontends maps each frontend to its plan.
	Frontends map[datapath.Frontend]*FrontendPlan
	// Reverse maps backend endpoints to the frontend their replies come from.
	Reverse map[datapath.Endpoint]ReversePlan
	// Site is the site's own prefixes by kind: the sources the datapath's side checks know
	// (docs/datapath.md, "Security model"). Plan puts every backend address in it
	// (SiteCluster); SetSite adds the configured and discovered prefixes and the gateway's own
	// addresses.
	Site map[netip.Prefix]datapath.SiteKind
}

// SetSite makes d's site sources every backend address d names (as Plan does), the cluster
// prefixes and the gateway's own addresses (own), each of kind SiteCluster or SiteGateway (a
// prefix that is both has both bits). Invalid prefixes and addresses are left out.
func (d *Desired) SetSite(cluster []netip.Prefix, own []netip.Addr) {
	site := map[netip.Prefix]datapath.SiteKind{}
	add := func(p netip.Prefix, k datapath.SiteKind) {
		if !p.IsValid() {
			return
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		site[p.Masked()] |= k
	}
	for _, p := range d.Frontends {
		for _, b := range p.Backends {
			a := b.Key.Addr().Unmap()
			add(netip.PrefixFrom(a, a.BitLen()), datapath.SiteCluster)
		}
	}
	for _, p := range cluster {
		add(p, datapath.SiteCluster)
	}
	for _, a := range own {
		if a.IsValid() {
			a = a.Unmap()
			add(netip.PrefixFrom(a, a.BitLen()), datapath.SiteGateway)
		}
	}
	d.Site = site
}

// DefaultTableSize is the Maglev table size of a frontend unless configured otherwise: 16381 slots
// (as Cilium's default), enough for the 100-slots-per-backend rule up to 163 backends. It is a
// constant, not a function of the backend count, because changing a table's size remaps almost
// every flow: adding a backend must move only the flows it takes.
const DefaultTableSize = 16381

// PlanOptions are the settings every gateway of a site must share.
type PlanOptions struct {
	// Seed places the backends in the Maglev tables.
	Seed uint32
	// TableSize is the Maglev table size of services that do not set their own; 0 means
	// DefaultTableSize. A prime (see maglev.CheckSize).
	TableSize int
	// Forwarding is the site's forwarding mode: which backends are served by direct server
	// return, and which are excluded.
	Forwarding Forwarding
}

// Plan computes the desired datapath state of services. A service that is invalid, or claims a
// frontend an earlier service (by name) already has, is left out and reported in errs; the others
// are planned as if it were not there.
func Plan(services []Service, opts PlanOptions) (d *Desired, errs []error) {
	if opts.TableSize == 0 {
		opts.TableSize = DefaultTableSize
	}
	if err := opts.Forwarding.Validate(); err != nil {
		return &Desired{Frontends: map[datapath.Frontend]*FrontendPlan{}, Reverse: map[datapath.Endpoint]ReversePlan{}},
			[]error{fmt.Errorf("plan: %w", err)}
	}
	d = &Desired{Frontends: map[datapath.Frontend]*FrontendPlan{}, Reverse: map[datapath.Endpoint]ReversePlan{}}
	valid, errs := validByName(services)
	for _, s := range valid {
		plans, err := planService(s, opts)
		if err == nil {
			for f := range plans {
				if other, taken := d.Frontends[f]; taken {
					err = fmt.Errorf("service %s: frontend %s already belongs to service %s", s.Name, f, other.Service)
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for f, p := range plans {
			d.Frontends[f] = p
		}
	}
	d.planReverse(opts.Forwarding)
	d.SetSite(nil, nil)
	return d, errs
}

// validByName returns the valid services sorted by name, the first of each name only, and an
// error for each of the others: the order in which planners give out frontends, so that the
// same services always claim them.
func validByName(services []Service) (valid []*Service, errs []error) {
	sorted := slices.Clone(services)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	names := map[string]bool{}
	for i := range sorted {
		s := &sorted[i]
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if names[s.Name] {
			errs = append(errs, fmt.Errorf("service %s: defined twice", s.Name))
			continue
		}
		names[s.Name] = true
		valid = append(valid, s)
	}
	return valid, errs
}

// planService plans every frontend of one valid service.
func planService(s *Service, opts PlanOptions) (map[datapath.Frontend]*FrontendPlan, error) {
	m := s.TableSize
	if m == 0 {
		m = opts.TableSize
	}
	if err := maglev.CheckSize(m); err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	out := map[datapath.Frontend]*FrontendPlan{}
	for _, vip := range s.VIPs {
		vip = vip.Unmap()
		var ranges []netip.Prefix
		for _, r := range s.SourceRanges {
			if r.Addr().Unmap().Is4() == vip.Is4() {
				ranges = append(ranges, r.Masked())
			}
		}
		if len(s.SourceRanges) > 0 && len(ranges) == 0 {
			return nil, fmt.Errorf("service %s: VIP %s: no source range of its family "+
				"(it would admit every client)", s.Name, vip)
		}
		for _, port := range s.Ports {
			f := datapath.Frontend{Addr: vip, Port: port.Port, Proto: port.Protocol}
			p := &FrontendPlan{Service: s.Name, Affinity: s.Affinity, SourceRanges: ranges, Route: s.Route}
			for _, b := range s.Backends {
				a := b.Addr.Unmap()
				if a.Is4() != vip.Is4() {
					continue
				}
				tp := b.TargetPort(port)
				if port.Port == 0 {
					tp = 0
				}
				w := b.Weight
				excluded := opts.Forwarding.Excluded(b)
				if b.State != Active || excluded {
					w = 0
				}
				p.Backends = append(p.Backends, PlannedBackend{Key: netip.AddrPortFrom(a, tp), Weight: w, State: b.State,
					DSR: opts.Forwarding.Direct(b), Excluded: excluded})
				if w > 0 {
					p.Serving++
				}
			}
			sort.Slice(p.Backends, func(i, j int) bool { return p.Backends[i].Key.Compare(p.Backends[j].Key) < 0 })
			for i := 1; i < len(p.Backends); i++ {
				if p.Backends[i].Key == p.Backends[i-1].Key {
					return nil, fmt.Errorf("service %s: frontend %s: backend %s listed twice", s.Name, f, p.Backends[i].Key)
				}
			}
			table, err := buildTable(p.Backends, m, opts.Seed)
			if err != nil {
				return nil, fmt.Errorf("service %s: frontend %s: %w", s.Name, f, err)
			}
			p.Table = table
			out[f] = p
		}
	}
	return out, nil
}

// buildTable builds the Maglev table of m slots of a frontend.
func buildTable(bes []PlannedBackend, m int, seed uint32) ([]int, error) {
	mb := make([]maglev.Backend, len(bes))
	for i, b := range bes {
		mb[i] = maglev.Backend{Name: b.Key.String(), Weight: b.Weight}
	}
	return maglev.Build(mb, m, seed)
}

// planReverse derives the reverse NAT entries from the frontends. Under fw, backends served by
// direct server return get none when the fallback is FallbackExclude: their node translates
// their replies, none of which comes through a gateway, and a gateway must not rewrite what
// merely carries their address. With FallbackReturnPath (a site whose replies may still come
// through the gateways: mixed, or switching modes) they keep them, so that a reply their node
// did not translate (a flow opened before the switch) still is.
func (d *Desired) planReverse(fw Forwarding) {
	serves := map[datapath.Endpoint][]datapath.Frontend{}
	for f, p := range d.Frontends {
		for _, b := range p.Backends {
			if b.DSR && fw.Fallback == FallbackExclude {
				continue
			}
			ep := datapath.Endpoint{Addr: b.Key.Addr(), Port: b.Key.Port(), Proto: f.Proto}
			if !slices.Contains(serves[ep], f) {
				serves[ep] = append(serves[ep], f)
			}
		}
	}
	for ep, fs := range serves {
		cands := fs
		if ep.Port != 0 {
			// The datapath tries {address, port} before {address, 0}: replies from this port of
			// an endpoint that also serves all-ports frontends (or fixed ones with target port
			// 0) are looked up here, so those frontends are candidates too, and the entry is
			// ambiguous; so is the {address, 0} one, whose replies may then come from any port.
			any := datapath.Endpoint{Addr: ep.Addr, Port: 0, Proto: ep.Proto}
			if other, ok := serves[any]; ok {
				cands = append(slices.Clone(fs), other...)
				d.Reverse[any] = ambiguous(other)
			}
		}
		if len(cands) == 1 {
			if _, done := d.Reverse[ep]; !done {
				d.Reverse[ep] = ReversePlan{Frontend: cands[0]}
			}
			continue
		}
		d.Reverse[ep] = ambiguous(cands)
	}
}

// ambiguous is the reverse plan of an endpoint serving frontends fs (sorted into Candidates, or
// none when there are too many for the datapath).
func ambiguous(fs []datapath.Frontend) ReversePlan {
	r := ReversePlan{Ambiguous: true}
	fs = slices.Clone(fs)
	slices.SortFunc(fs, datapath.Frontend.Compare)
	if fs = slices.Compact(fs); len(fs) <= datapath.MaxReverseCandidates {
		r.Candidates = fs
	}
	return r
}

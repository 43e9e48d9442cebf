// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"fmt"
	"net/netip"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// siteSet is the site's own prefixes by kind, with a longest-prefix match (site_sources).
type siteSet struct {
	prefixes map[netip.Prefix]datapath.SiteKind
	// count4 and count6 count the prefixes of each length per family; bits4 and bits6 are the
	// lengths present, longest first.
	count4       [33]int
	count6       [129]int
	bits4, bits6 []int
}

// lookup returns the kind of the longest prefix holding a (0: none).
func (s *siteSet) lookup(a netip.Addr) datapath.SiteKind {
	bits := s.bits4
	if a.Is6() {
		bits = s.bits6
	}
	for _, n := range bits {
		if k, ok := s.prefixes[netip.PrefixFrom(a, n).Masked()]; ok {
			return k
		}
	}
	return 0
}

// count adds d to the count of p's length and recomputes the lengths present.
func (s *siteSet) count(p netip.Prefix, d int) {
	counts, bits := s.count6[:], &s.bits6
	if p.Addr().Is4() {
		counts, bits = s.count4[:], &s.bits4
	}
	counts[p.Bits()] += d
	*bits = (*bits)[:0]
	for n := len(counts) - 1; n >= 0; n-- {
		if counts[n] > 0 {
			*bits = append(*bits, n)
		}
	}
}

// sitePrefix normalises a site source prefix as the XDP datapath keys it: masked, IPv4-mapped
// prefixes as IPv4.
func sitePrefix(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return p, false
	}
	a, bits := p.Addr(), p.Bits()
	if a.Is4In6() {
		if bits < 96 {
			return p, false
		}
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}

// sideCheck decides whether p, addressed to a VIP, may be balanced from where it arrived
// (vip_side_check in xdp/gateway/bpf/side.h).
func (b *Balancer) sideCheck(p *Packet) (Reason, bool) {
	if p.Role == datapath.RoleNone {
		return ReasonDropNoRole, false
	}
	if bogusSource(p.SrcAddr()) {
		return ReasonDropBogusSource, false
	}
	kind := b.site.lookup(p.SrcAddr())
	if kind&datapath.SiteGateway != 0 || b.vipAddrs[addrKey{p.Src, p.V6}] > 0 {
		return ReasonDropSiteSource, false
	}
	if p.Role == datapath.RoleClient && kind&datapath.SiteCluster != 0 {
		return ReasonDropSiteSource, false
	}
	if p.Role == datapath.RoleCluster && kind&datapath.SiteCluster == 0 {
		return ReasonDropWrongSide, false
	}
	return 0, true
}

// replySideCheck decides whether a backend's reply p may be reverse-NATed from where it arrived
// (reply_side_check in xdp/gateway/bpf/side.h).
func (b *Balancer) replySideCheck(p *Packet) (Reason, bool) {
	switch p.Role {
	case datapath.RoleCluster:
		return 0, true
	case datapath.RoleNone:
		return ReasonDropNoRole, false
	case datapath.RoleBoth:
		if b.site.lookup(p.SrcAddr())&datapath.SiteCluster != 0 {
			return 0, true
		}
	}
	return ReasonDropReplyWrongSide, false
}

// SiteSources returns the site's own prefixes by kind (datapath.Services).
func (b *Balancer) SiteSources() (map[netip.Prefix]datapath.SiteKind, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[netip.Prefix]datapath.SiteKind, len(b.site.prefixes))
	for p, k := range b.site.prefixes {
		out[p] = k
	}
	return out, nil
}

// SetSiteSource adds prefix p of kind k to the site's own prefixes (datapath.Services).
func (b *Balancer) SetSiteSource(p netip.Prefix, k datapath.SiteKind) error {
	np, ok := sitePrefix(p)
	if !ok {
		return fmt.Errorf("site source %s: %w", p, datapath.ErrBadAddress)
	}
	if k == 0 || k > datapath.SiteCluster|datapath.SiteGateway {
		return fmt.Errorf("site source %s: kind %d: %w", p, k, datapath.ErrOutOfRange)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.site.prefixes[np]; !ok && len(b.site.prefixes) >= datapath.MaxSiteSources {
		return fmt.Errorf("site source %s: %d prefixes already: %w", p, len(b.site.prefixes), datapath.ErrOutOfRange)
	}
	if _, ok := b.site.prefixes[np]; !ok {
		b.site.count(np, 1)
	}
	b.site.prefixes[np] = k
	return nil
}

// DeleteSiteSource removes prefix p; a missing one is no error (datapath.Services).
func (b *Balancer) DeleteSiteSource(p netip.Prefix) error {
	np, ok := sitePrefix(p)
	if !ok {
		return fmt.Errorf("site source %s: %w", p, datapath.ErrBadAddress)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.site.prefixes[np]; ok {
		delete(b.site.prefixes, np)
		b.site.count(np, -1)
	}
	return nil
}

// bogusSource reports whether a is an address no client can send from (bogus_source in
// xdp/gateway/bpf/side.h): IPv4 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4 and 240.0.0.0/4;
// IPv6 ::, ::1, ::ffff:0:0/96, fe80::/10 and ff00::/8.
func bogusSource(a netip.Addr) bool {
	if a.Is4() {
		b := a.As4()
		return b[0] == 0 || b[0] == 127 || b[0] >= 224 || (b[0] == 169 && b[1] == 254)
	}
	return a.IsUnspecified() || a.IsLoopback() || a.Is4In6() || a.IsLinkLocalUnicast() || a.IsMulticast()
}

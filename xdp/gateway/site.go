// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// siteKey is the site_sources key of prefix p (masked; an IPv4-mapped IPv6 prefix is IPv4).
func siteKey(p netip.Prefix) (xlbSiteKey, error) {
	if !p.IsValid() {
		return xlbSiteKey{}, fmt.Errorf("site source %s: %w", p, datapath.ErrBadAddress)
	}
	a, bits := p.Addr(), p.Bits()
	if a.Is4In6() {
		if bits < 96 {
			return xlbSiteKey{}, fmt.Errorf("site source %s: an IPv4-mapped prefix shorter than /96: %w", p, datapath.ErrBadAddress)
		}
		a, bits = a.Unmap(), bits-96
	}
	p = netip.PrefixFrom(a, bits).Masked()
	w, fam := toWire(p.Addr())
	var be [4]byte
	be[3] = fam
	return xlbSiteKey{Prefixlen: uint32(32 + p.Bits()), Family: nativeU32(be), Addr: w}, nil
}

// prefixOf is the prefix of a site_sources key.
func prefixOf(k xlbSiteKey) netip.Prefix {
	fam := uint8(datapath.FamilyV4)
	if k.Family == nativeU32([4]byte{0, 0, 0, datapath.FamilyV6}) {
		fam = datapath.FamilyV6
	}
	return netip.PrefixFrom(fromWire(k.Addr, fam), int(k.Prefixlen)-32)
}

// SiteSources returns the site's own prefixes by kind, read from the map.
func (d *Datapath) SiteSources() (map[netip.Prefix]datapath.SiteKind, error) {
	out := map[netip.Prefix]datapath.SiteKind{}
	var k xlbSiteKey
	var v uint8
	it := d.objs.SiteSources.Iterate()
	for it.Next(&k, &v) {
		out[prefixOf(k)] = datapath.SiteKind(v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list site sources: %w", err)
	}
	return out, nil
}

// SetSiteSource adds prefix p of kind k to the site's own prefixes, or changes its kind.
func (d *Datapath) SetSiteSource(p netip.Prefix, k datapath.SiteKind) (err error) {
	if k == 0 || k > datapath.SiteCluster|datapath.SiteGateway {
		return fmt.Errorf("site source %s: kind %d: %w", p, k, datapath.ErrOutOfRange)
	}
	key, err := siteKey(p)
	if err != nil {
		return err
	}
	defer d.invalidateAfter(&err)
	if err := d.objs.SiteSources.Put(&key, uint8(k)); err != nil {
		return fmt.Errorf("site source %s: %w", p, err)
	}
	return nil
}

// DeleteSiteSource removes prefix p from the site's own prefixes; a missing one is no error.
func (d *Datapath) DeleteSiteSource(p netip.Prefix) (err error) {
	key, err := siteKey(p)
	if err != nil {
		return err
	}
	defer d.invalidateAfter(&err)
	if err := d.objs.SiteSources.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete site source %s: %w", p, err)
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0
package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
)

// The BGP timer bounds (as the speaker checks them).
const (
	minHoldTime  = 3 * time.Second
	maxBGPTimer  = 65535 * time.Second
	maxMD5Length = 80 // TCP_MD5SIG_MAXKEYLEN
)

// bgp walks the bgp section.
// In Kubernetes mode (kube) the peers may be BGPPeer objects instead of the section's.
func (d *decoder) bgp(n *yaml.Node, path string, kube bool) *BGP {
	o, ok := d.object(n, path, bgpFields)
	if !ok {
		return nil
	}
	b := &BGP{MinHealthyBackends: DefaultMinHealthyBackends, WithdrawOnExit: DefaultWithdrawOnExit}
	if v := d.required(o, "routerID", "the BGP identifier, an IPv4 address such as the gateway's upstream address"); v != nil {
		if s, ok := d.str(v, o.at("routerID")); ok {
			a, err := netip.ParseAddr(s)
			switch {
			case err != nil:
				d.failf(v, o.at("routerID"), "%q is not an IPv4 address", s)
			case !a.Is4():
				d.failf(v, o.at("routerID"), "%s is not an IPv4 address (a BGP identifier is one, even for IPv6 sessions)", a)
			case a.IsUnspecified():
				d.failf(v, o.at("routerID"), "0.0.0.0 is not a usable BGP identifier")
			default:
				b.RouterID = a
			}
		}
	}
	if v := d.required(o, "asn", "the local AS number"); v != nil {
		b.ASN = d.asn(v, o.at("asn"))
	}
	if v := o.get("listenPort"); v != nil {
		b.ListenPort, _ = d.uint16Of(v, o.at("listenPort"), 0)
	}
	if v := o.get("gracefulRestart"); v != nil {
		b.GracefulRestart, _ = d.wholeSeconds(v, o.at("gracefulRestart"), 0, MaxGracefulRestart)
	}
	if v := o.get("minHealthyBackends"); v != nil {
		m, _ := d.integer(v, o.at("minHealthyBackends"), 1, math.MaxInt32)
		b.MinHealthyBackends = int(m)
	}
	if v := o.get("withdrawOnExit"); v != nil {
		b.WithdrawOnExit, _ = d.boolean(v, o.at("withdrawOnExit"))
	}
	attrs := d.routeAttributes(o)
	b.Communities, b.LargeCommunities, b.LocalPref, b.MED = attrs.Communities, attrs.LargeCommunities, attrs.LocalPref, attrs.MED
	if v := o.get("peers"); v != nil {
		b.Peers = d.bgpPeers(v, o.at("peers"), b.ListenPort, kube)
	} else if !kube {
		d.required(o, "peers", "list at least one BGP neighbour; in Kubernetes mode, BGPPeer objects may list them instead")
	}
	return b
}

// routeAttributeFields are the keys routeAttributes reads: a section that carries route
// attributes lists them among its known fields.
var routeAttributeFields = []string{"communities", "largeCommunities", "localPref", "med"}

// routeAttributes reads the BGP route attribute keys of object o (communities, largeCommunities,
// localPref, med; all optional), reporting bad values at their own lines. It is shared by the bgp
// section, services[].bgp and pools[].bgp.
func (d *decoder) routeAttributes(o object) lb.RouteAttributes {
	var a lb.RouteAttributes
	if v := o.get("communities"); v != nil {
		if items, ok := d.list(v, o.at("communities")); ok {
			for i, item := range items {
				if s, ok := d.str(item, index(o.at("communities"), i)); ok {
					if c, err := parseCommunity(s); err != nil {
						d.fail(item, index(o.at("communities"), i), err)
					} else {
						a.Communities = append(a.Communities, c)
					}
				}
			}
		}
	}
	if v := o.get("largeCommunities"); v != nil {
		if items, ok := d.list(v, o.at("largeCommunities")); ok {
			for i, item := range items {
				if s, ok := d.str(item, index(o.at("largeCommunities"), i)); ok {
					if c, err := parseLargeCommunity(s); err != nil {
						d.fail(item, index(o.at("largeCommunities"), i), err)
					} else {
						a.LargeCommunities = append(a.LargeCommunities, c)
					}
				}
			}
		}
	}
	if v := o.get("localPref"); v != nil {
		if x, ok := d.uint32Of(v, o.at("localPref")); ok {
			a.LocalPref = &x
		}
	}
	if v := o.get("med"); v != nil {
		if x, ok := d.uint32Of(v, o.at("med")); ok {
			a.MED = &x
		}
	}
	return a
}

func (d *decoder) bgpPeers(n *yaml.Node, path string, listenPort uint16, kube bool) []bgp.Peer {
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	if len(items) == 0 && !kube {
		d.failf(n, path, "empty (list at least one BGP neighbour)")
	}
	var out []bgp.Peer
	seen := map[netip.Addr]place{}
	for i, item := range items {
		o, ok := d.object(item, index(path, i), bgpPeerFields)
		if !ok {
			continue
		}
		p := bgp.Peer{}
		if v := d.required(o, "address", "required"); v != nil {
			if a, ok := d.addr(v, o.at("address")); ok {
				if first, dup := seen[a]; dup {
					d.fail(v, o.at("address"), errDuplicate(a.String(), first))
				} else {
					seen[a] = place{o.path, v.Line}
				}
				p.Address = a
			}
		}
		if v := d.required(o, "asn", "the neighbour's AS number"); v != nil {
			p.ASN = d.asn(v, o.at("asn"))
		}
		if v := o.get("port"); v != nil {
			p.Port, _ = d.uint16Of(v, o.at("port"), 1)
		}
		if v := o.get("passwordFile"); v != nil {
			if s, ok := d.nonEmpty(v, o.at("passwordFile")); ok {
				if !filepath.IsAbs(s) {
					s = filepath.Join(filepath.Dir(d.file), s)
				}
				if err := checkPasswordFile(s); err != nil {
					d.fail(v, o.at("passwordFile"), err)
				}
				p.PasswordFile = s
			}
		}
		if v := o.get("multihopTTL"); v != nil {
			ttl, _ := d.integer(v, o.at("multihopTTL"), 0, 255)
			p.MultihopTTL = uint8(ttl)
		}
		holdOK := true
		if v := o.get("holdTime"); v != nil {
			p.HoldTime, holdOK = d.wholeSeconds(v, o.at("holdTime"), minHoldTime, maxBGPTimer)
		}
		if v := o.get("keepaliveTime"); v != nil {
			ka, ok := d.wholeSeconds(v, o.at("keepaliveTime"), time.Second, maxBGPTimer)
			p.KeepaliveTime = ka
			hold, dflt := p.HoldTime, ""
			if hold == 0 {
				hold, dflt = bgp.DefaultHoldTime, ", the default"
			}
			if ok && holdOK && ka >= hold {
				d.failf(v, o.at("keepaliveTime"), "%s is not shorter than the hold time (%s%s)", ka, hold, dflt)
			}
		} else if holdOK && p.HoldTime != 0 && p.HoldTime <= bgp.DefaultKeepaliveTime {
			d.failf(o.get("holdTime"), o.at("holdTime"), "%s is not longer than the keepalive time (%s, the default)", p.HoldTime, bgp.DefaultKeepaliveTime)
		}
		if v := o.get("connectRetry"); v != nil {
			p.ConnectRetry, _ = d.wholeSeconds(v, o.at("connectRetry"), time.Second, maxBGPTimer)
		}
		if v := o.get("passive"); v != nil {
			p.Passive, _ = d.boolean(v, o.at("passive"))
			if p.Passive && listenPort == 0 {
				d.failf(v, o.at("passive"), "needs bgp.listenPort (a passive peer connects to the speaker)")
			}
		}
		if v := o.get("localAddress"); v != nil {
			if a, ok := d.addr(v, o.at("localAddress")); ok {
				if p.Address.IsValid() && a.Is4() != p.Address.Is4() {
					d.failf(v, o.at("localAddress"), "%s is not of the family of the peer's address %s", a, p.Address)
				}
				p.LocalAddress = a
			}
		}
		if v := o.get("bfd"); v != nil {
			p.BFD = d.bfd(v, o.at("bfd"))
			if p.BFD.Enabled && p.MultihopTTL > 1 {
				d.failf(v, o.at("bfd"), "single-hop BFD only, but multihopTTL is %d", p.MultihopTTL)
			}
		}
		out = append(out, p)
	}
	return out
}

// bfd reads a peer's bfd: true or false (the defaults: 300 ms × 3), or an object of
// transmitInterval, receiveInterval (50ms to 60s, whole milliseconds), multiplier (1 to 255),
// holdDown (whole seconds, 1s to 1h) and enabled (true unless said).
func (d *decoder) bfd(n *yaml.Node, path string) bgp.BFD {
	if r := resolve(n); r.Kind == yaml.ScalarNode {
		on, _ := d.boolean(n, path)
		return bgp.BFD{Enabled: on}
	}
	o, ok := d.object(n, path, bfdFields)
	if !ok {
		return bgp.BFD{}
	}
	b := bgp.BFD{Enabled: true}
	if v := o.get("enabled"); v != nil {
		b.Enabled, _ = d.boolean(v, o.at("enabled"))
	}
	for _, f := range []struct {
		key string
		to  *time.Duration
	}{{"transmitInterval", &b.TransmitInterval}, {"receiveInterval", &b.ReceiveInterval}} {
		v := o.get(f.key)
		if v == nil {
			continue
		}
		if x, ok := d.duration(v, o.at(f.key)); ok {
			if x < bgp.MinBFDInterval || x > bgp.MaxBFDInterval || x%time.Millisecond != 0 {
				d.failf(v, o.at(f.key), "%s: want whole milliseconds from %s to %s", x, bgp.MinBFDInterval, bgp.MaxBFDInterval)
			} else {
				*f.to = x
			}
		}
	}
	if v := o.get("multiplier"); v != nil {
		m, _ := d.integer(v, o.at("multiplier"), 1, 255)
		b.Multiplier = uint8(m)
	}
	if v := o.get("holdDown"); v != nil {
		b.HoldDown, _ = d.wholeSeconds(v, o.at("holdDown"), time.Second, bgp.MaxBFDHoldDown)
	}
	return b
}

// asn checks that n is an AS number, 1 to 4294967295.
func (d *decoder) asn(n *yaml.Node, path string) uint32 {
	v, _ := d.integer(n, path, 1, math.MaxUint32)
	return uint32(v)
}

// boolean checks that n is true or false.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.failf(n, path, "want true or false, got %s", describe(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		d.failf(n, path, "want true or false, got %s", describe(n))
		return false, false
	}
	return b, true
}

// wholeSeconds checks that n is a duration of whole seconds within [lo, hi]; 0 is always
// accepted (the default).
func (d *decoder) wholeSeconds(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	t, ok := d.duration(n, path)
	switch {
	case !ok:
		return 0, false
	case t == 0:
		return 0, true
	case t%time.Second != 0:
		d.failf(n, path, "%s is not a whole number of seconds", t)
	case t < lo || t > hi:
		d.failf(n, path, "%s is out of range (%s to %s, or 0 for the default)", t, lo, hi)
	default:
		return t, true
	}
	return 0, false
}

// checkPasswordFile checks that path names a readable file holding a usable TCP MD5 password.
func checkPasswordFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot read %s: %v", path, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	switch {
	case pw == "":
		return fmt.Errorf("%s is empty (want the TCP MD5 password)", path)
	case len(pw) > maxMD5Length:
		return fmt.Errorf("%s holds %d bytes; a TCP MD5 password has at most %d", path, len(pw), maxMD5Length)
	}
	return nil
}

// parseCommunity reads an RFC 1997 community written "ASN:value".
func parseCommunity(s string) (uint32, error) {
	a, b, ok := strings.Cut(s, ":")
	hi, err1 := strconv.ParseUint(a, 10, 16)
	lo, err2 := strconv.ParseUint(b, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%q is not a community (want ASN:value, each 0 to 65535, such as 65000:100)", s)
	}
	return uint32(hi)<<16 | uint32(lo), nil
}

// parseLargeCommunity reads an RFC 8092 large community written "global:local1:local2".
func parseLargeCommunity(s string) (bgp.LargeCommunity, error) {
	f := strings.Split(s, ":")
	var v [3]uint32
	for i, x := range f {
		n, err := strconv.ParseUint(x, 10, 32)
		if err != nil || len(f) != 3 {
			return bgp.LargeCommunity{}, fmt.Errorf("%q is not a large community (want global:local1:local2, each 0 to 4294967295, such as 65000:1:2)", s)
		}
		v[i] = uint32(n)
	}
	return bgp.LargeCommunity{Global: v[0], Local1: v[1], Local2: v[2]}, nil
}

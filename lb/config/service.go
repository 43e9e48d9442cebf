// SPDX-License-Identifier: Apache-2.0
package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// services walks the services list into cfg.Services and cfg.HealthChecks.
func (d *decoder) services(n *yaml.Node, path string, cfg *Config) {
	items, ok := d.list(n, path)
	if !ok {
		return
	}
	names := map[string]place{}
	for i, item := range items {
		s, hc, ok := d.service(item, index(path, i), names)
		if !ok {
			continue
		}
		cfg.Services = append(cfg.Services, s)
		if hc != nil {
			cfg.HealthChecks[s.Name] = *hc
		}
	}
}

// service walks one service. ok is false when the service has an error; then it is not
// returned.
func (d *decoder) service(n *yaml.Node, path string, names map[string]place) (s lb.Service, hc *HealthCheck, ok bool) {
	m := d.mark()
	o, ok := d.object(n, path, serviceFields)
	if !ok {
		return s, nil, false
	}

	if v := d.required(o, "name", "required"); v != nil {
		if name, ok := d.nonEmpty(v, o.at("name")); ok {
			if first, dup := names[name]; dup {
				d.fail(v, o.at("name"), errDuplicate(strconv.Quote(name), first))
			} else {
				names[name] = place{path, v.Line}
			}
			s.Name = name
		}
	}

	mv := d.mark()
	if v := d.required(o, "vips", "a service needs at least one VIP"); v != nil {
		s.VIPs = d.vips(v, o.at("vips"))
	}
	vipsOK := d.clean(mv)

	mp := d.mark()
	if v := d.required(o, "ports", "a service needs at least one port"); v != nil {
		s.Ports = d.ports(v, o.at("ports"))
	}
	portsOK := d.clean(mp)

	if v := o.get("backends"); v != nil {
		s.Backends = d.backends(v, o.at("backends"), s.VIPs, vipsOK, s.Ports, portsOK)
	}

	affinityOK := true
	if v := o.get("sessionAffinity"); v != nil {
		a, ok := d.enum(v, o.at("sessionAffinity"), "sessionAffinity", "None", "ClientIP")
		affinityOK = ok
		if a == "ClientIP" {
			s.Affinity = datapath.AffinityClientIP
			s.AffinityTimeout = DefaultAffinityTimeout
		}
	}
	if v := o.get("sessionAffinityTimeout"); v != nil {
		p := o.at("sessionAffinityTimeout")
		if t, ok := d.positiveDuration(v, p); ok {
			switch {
			case affinityOK && s.Affinity != datapath.AffinityClientIP:
				d.failf(v, p, "only applies with sessionAffinity: ClientIP")
			case t > MaxAffinityTimeout:
				d.failf(v, p, "%s is longer than the %s maximum", t, MaxAffinityTimeout)
			default:
				s.AffinityTimeout = t
			}
		}
	}

	if v := o.get("sourceRanges"); v != nil {
		s.SourceRanges = d.sourceRanges(v, o.at("sourceRanges"), s.VIPs, vipsOK)
	}

	if v := o.get("externalTrafficPolicy"); v != nil {
		if p, _ := d.enum(v, o.at("externalTrafficPolicy"), "externalTrafficPolicy", "Cluster", "Local"); p == "Local" {
			s.TrafficPolicy = lb.TrafficLocal
		}
	}

	if v := o.get("maglevTableSize"); v != nil {
		s.TableSize = d.tableSize(v, o.at("maglevTableSize"))
	}

	if v := o.get("healthCheck"); v != nil {
		hc = d.healthCheck(v, o.at("healthCheck"), s.Ports, portsOK)
	}

	if v := o.get("bgp"); v != nil {
		if bo, ok := d.object(v, o.at("bgp"), routeAttributeFields); ok {
			s.Route = d.routeAttributes(bo)
		}
	}

	if !d.clean(m) {
		return s, nil, false
	}
	// Every rule of Validate is checked above, with a line and a field path; this is a
	// safety net for rules added to Validate later.
	if err := s.Validate(); err != nil {
		d.fail(o.node, path, err)
		return s, nil, false
	}
	return s, hc, true
}

func (d *decoder) vips(n *yaml.Node, path string) []netip.Addr {
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.failf(n, path, "empty (a service needs at least one VIP)")
	}
	return uniqueItems(d, items, path, d.addr)
}

func (d *decoder) ports(n *yaml.Node, path string) []lb.Port {
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.failf(n, path, "empty (a service needs at least one port)")
	}
	type portProto struct {
		port  uint16
		proto datapath.Protocol
	}
	var out []lb.Port
	seen := map[portProto]place{}
	names := map[string]place{}
	for i, item := range items {
		m := d.mark()
		o, ok := d.object(item, index(path, i), portFields)
		if !ok {
			continue
		}
		p := lb.Port{Protocol: datapath.TCP}
		nameNode := o.node
		if v := o.get("name"); v != nil {
			p.Name, _ = d.str(v, o.at("name"))
			nameNode = v
		}
		portNode := d.required(o, "port", "required; 0 serves every port")
		if portNode != nil {
			p.Port, _ = d.uint16Of(portNode, o.at("port"), 0)
		}
		if v := o.get("protocol"); v != nil {
			if s, ok := d.str(v, o.at("protocol")); ok {
				proto, err := datapath.ParseProtocol(s)
				if err != nil {
					d.fail(v, o.at("protocol"), err)
				}
				p.Protocol = proto
			}
		}
		if v := o.get("targetPort"); v != nil {
			if tp, ok := d.uint16Of(v, o.at("targetPort"), 0); ok {
				if portNode != nil && p.Port == 0 && tp != 0 && d.clean(m) {
					d.failf(v, o.at("targetPort"), "an all-ports port (port 0) cannot have a targetPort: "+
						"backends receive the client's destination port")
				}
				p.TargetPort = tp
			}
		}
		if !d.clean(m) {
			continue
		}
		key := portProto{p.Port, p.Protocol}
		if first, dup := seen[key]; dup {
			d.fail(portNode, o.at("port"), errDuplicate(fmt.Sprintf("%d/%s", p.Port, p.Protocol), first))
			continue
		}
		seen[key] = place{o.path, portNode.Line}
		if len(items) > 1 {
			if first, dup := names[p.Name]; dup {
				if p.Name == "" {
					d.failf(o.node, o.at("name"), "missing, and %s (line %d) has no name either: "+
						"the ports of a service with several need distinct names", first.path, first.line)
				} else {
					d.fail(nameNode, o.at("name"), errDuplicate(strconv.Quote(p.Name), first))
				}
				continue
			}
			names[p.Name] = place{o.path, nameNode.Line}
		}
		out = append(out, p)
	}
	return out
}

// backends walks the backend list. vips and ports are the service's, checked against only when
// they had no error (vipsOK, portsOK), so that one mistake is not reported twice.
func (d *decoder) backends(n *yaml.Node, path string, vips []netip.Addr, vipsOK bool, ports []lb.Port, portsOK bool) []lb.Backend {
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	var out []lb.Backend
	seen := map[netip.Addr]place{}
	for i, item := range items {
		o, ok := d.object(item, index(path, i), backendFields)
		if !ok {
			continue
		}
		b := lb.Backend{Weight: DefaultWeight, State: lb.Active, DSR: true}
		if v := d.required(o, "address", "required"); v != nil {
			if a, ok := d.addr(v, o.at("address")); ok {
				if first, dup := seen[a]; dup {
					d.fail(v, o.at("address"), errDuplicate(a.String(), first))
				} else if vipsOK && len(vips) > 0 && !slices.ContainsFunc(vips, func(v netip.Addr) bool { return v.Is4() == a.Is4() }) {
					d.failf(v, o.at("address"), "%s is %s, but the service has no %s VIP to use it", a, family(a), family(a))
				}
				seen[a] = place{o.at("address"), v.Line}
				b.Addr = a
			}
		}
		if v := o.get("weight"); v != nil {
			b.Weight, _ = d.uint32Of(v, o.at("weight"))
		}
		if v := o.get("state"); v != nil {
			if s, ok := d.str(v, o.at("state")); ok {
				switch s {
				case "active":
				case "draining":
					b.State = lb.Draining
				case "unhealthy":
					d.failf(v, o.at("state"), "unhealthy is set by health checks, not by the config (want active or draining)")
				default:
					d.failf(v, o.at("state"), "unknown state %q (want active or draining)", s)
				}
			}
		}
		if v := o.get("node"); v != nil {
			b.Node, _ = d.str(v, o.at("node"))
		}
		if v := o.get("targetPorts"); v != nil {
			b.TargetPorts = d.targetPorts(v, o.at("targetPorts"), ports, portsOK)
		}
		if v := o.get("dsr"); v != nil {
			b.DSR, _ = d.boolean(v, o.at("dsr"))
		}
		out = append(out, b)
	}
	return out
}

// family names a's address family.
func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// targetPorts walks a backend's port name → target port mapping.
func (d *decoder) targetPorts(n *yaml.Node, path string, ports []lb.Port, portsOK bool) map[string]uint16 {
	o, ok := d.object(n, path, nil)
	if !ok {
		return nil
	}
	names := make([]string, 0, len(o.vals))
	for name := range o.vals {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return o.vals[a].Line - o.vals[b].Line })
	out := map[string]uint16{}
	for _, name := range names {
		v, p := o.vals[name], o.at(name)
		tp, ok := d.uint16Of(v, p, 1)
		if !ok || !portsOK {
			continue
		}
		i := slices.IndexFunc(ports, func(port lb.Port) bool { return port.Name == name })
		switch {
		case i < 0:
			d.failf(v, p, "the service has no port named %q (its ports: %s)", name, portNames(ports))
		case ports[i].Port == 0:
			d.failf(v, p, "port %q serves every port (port 0): its backends receive the client's destination port", name)
		default:
			out[name] = tp
		}
	}
	return out
}

// portNames lists the ports' names for an error message.
func portNames(ports []lb.Port) string {
	var names []string
	for _, p := range ports {
		if p.Name == "" {
			names = append(names, fmt.Sprintf("an unnamed %d/%s", p.Port, p.Protocol))
		} else {
			names = append(names, strconv.Quote(p.Name))
		}
	}
	return strings.Join(names, ", ")
}

// sourceRanges walks the allowed client prefixes. Every VIP needs one of its family when there
// are any (lb.Plan's rule: a VIP without one would admit every client).
func (d *decoder) sourceRanges(n *yaml.Node, path string, vips []netip.Addr, vipsOK bool) []netip.Prefix {
	m := d.mark()
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	out := uniqueItems(d, items, path, d.prefix)
	if len(out) == 0 || !vipsOK || !d.clean(m) {
		return out
	}
	for _, vip := range vips {
		if !slices.ContainsFunc(out, func(r netip.Prefix) bool { return r.Addr().Unmap().Is4() == vip.Is4() }) {
			d.failf(n, path, "no %s range for VIP %s: it would admit every client (add one, such as %s)",
				family(vip), vip, map[bool]string{true: "0.0.0.0/0", false: "::/0"}[vip.Is4()])
			break
		}
	}
	return out
}

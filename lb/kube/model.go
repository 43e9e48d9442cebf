// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// AnnotationSourceRanges is the cloud providers' annotation for allowed client prefixes
// (comma-separated CIDRs). ServiceModel reads it only when spec.loadBalancerSourceRanges is
// empty, as the cloud providers do.
const AnnotationSourceRanges = corev1.AnnotationLoadBalancerSourceRangesKey

// DefaultAffinityTimeout is the sessionAffinity: ClientIP timeout when the Service sets none
// (Kubernetes' default, 3 hours).
const DefaultAffinityTimeout = 10800 * time.Second

// maxAffinityTimeout is the longest timeout the API accepts (one day).
const maxAffinityTimeout = 86400 * time.Second

// denyAll returns the source range of a family that must accept no client: the prefix of its
// unspecified address, which no routed packet comes from. A Service whose given ranges are all
// invalid gets both, so that it accepts no client at all rather than every client.
func denyAll(is4 bool) netip.Prefix {
	if is4 {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 32)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 128)
}

// Input is what the controller knows about one Service.
type Input struct {
	// Service is the Service; nil yields an empty model and a Problem.
	Service *corev1.Service
	// Slices are all the EndpointSlices labelled kubernetes.io/service-name=<name> in its
	// namespace, in any order; nil entries are skipped.
	Slices []*discoveryv1.EndpointSlice
	// VIPs are the addresses allocated to it (from IPAM or its status).
	VIPs []netip.Addr
	// Route holds its pool's BGP attributes.
	Route lb.RouteAttributes
}

// NodeView answers per-node questions; the controller implements it from the Node informer and
// the node health prober. A nil NodeView excludes no node and finds every node healthy.
type NodeView interface {
	// Excluded reports whether endpoints on node must get no new flows: the Node carries the
	// label node.kubernetes.io/exclude-from-external-load-balancers. A node the controller does
	// not know (not in its cache yet, or gone) must be reported as not excluded: endpoints
	// often appear before their Node does, and node health, not this label, covers dead nodes.
	Excluded(node string) bool
	// LocalHealthy reports, for a Local traffic policy, whether endpoints on node may serve:
	// for the controller (externalTrafficPolicy), whether node passes its health checks for
	// service (kube-proxy's /healthz and the Service's healthCheckNodePort); for a node agent
	// (internalTrafficPolicy), whether node is its own. An endpoint without a nodeName is asked
	// about as node "": the controller, which cannot check it, finds it healthy; an agent finds
	// it on another node.
	LocalHealthy(node string, service types.NamespacedName) bool
	// DSR reports whether node's agent serves direct server return (its Node carries
	// AnnotationDSR with this build's carrier version: NodeDSR). A node the controller does not
	// know does not: the gateways must not carry to a node that would drop the carrier.
	DSR(node string) bool
}

// Problem is something wrong with, or worth telling about, a Service: the controller shows it
// as an Event. The rest of the Service still works.
type Problem struct {
	// Type is corev1.EventTypeWarning (something is wrong, users must act) or
	// corev1.EventTypeNormal (advice).
	Type string
	// Reason is a CamelCase reason, as Events carry.
	Reason string
	// Message says what is wrong, naming the field and the value.
	Message string
}

// maxExamples bounds how many offending values one Problem message quotes: a Service may have
// thousands of bad endpoints and its Event must stay readable.
const maxExamples = 3

// problems collects a Service's Problems, grouping repeated ones (by reason) into one each.
type problems struct {
	// list holds the problems in the order they were first seen.
	list []Problem
	// groups: reason → the count and examples of a grouped problem, written into list by done.
	groups map[string]*problemGroup
}

// problemGroup is a problem that many objects may have: one Event with a count and examples.
type problemGroup struct {
	index    int    // its place in problems.list
	what     string // what the examples are, e.g. "endpoints with an invalid address"
	advice   string // appended to the message
	count    int
	examples []string
}

func (p *problems) warn(reason, format string, args ...any) {
	p.list = append(p.list, Problem{Type: corev1.EventTypeWarning, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

func (p *problems) advise(reason, format string, args ...any) {
	p.list = append(p.list, Problem{Type: corev1.EventTypeNormal, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// count adds one example to the grouped Warning of reason.
func (p *problems) count(reason, what, advice, example string) {
	if p.groups == nil {
		p.groups = map[string]*problemGroup{}
	}
	g := p.groups[reason]
	if g == nil {
		g = &problemGroup{index: len(p.list), what: what, advice: advice}
		p.groups[reason] = g
		p.list = append(p.list, Problem{Type: corev1.EventTypeWarning, Reason: reason})
	}
	g.count++
	if len(g.examples) < maxExamples {
		g.examples = append(g.examples, example)
	}
}

// done returns the problems, grouped ones with their counts.
func (p *problems) done() []Problem {
	for _, g := range p.groups {
		msg := fmt.Sprintf("%d %s: %s", g.count, g.what, strings.Join(g.examples, "; "))
		if g.count > len(g.examples) {
			msg += "; …"
		}
		if g.advice != "" {
			msg += " (" + g.advice + ")"
		}
		p.list[g.index].Message = msg
	}
	return p.list
}

// ServiceModel turns a Service and its EndpointSlices into the lb model, and says what is wrong
// with them. It never fails: what cannot be used is left out and reported as a Problem, and the
// rest is served. It does not modify its input.
//
// Each endpoint (its first address, deduplicated across slices: the most ready copy wins) is a
// backend of weight 1 whose state is, in order:
//   - ready: Active, unless its node is Excluded or, for externalTrafficPolicy: Local, not
//     LocalHealthy: then Draining (no new flows; established flows stay). A node fails its
//     kube-proxy checks while it is drained or deleted (KEP-3836), exactly when its
//     connections should finish; xlb forwards to the Pod itself, not through kube-proxy, so a
//     failing kube-proxy does not break them either. A node that really died takes its
//     endpoints' readiness with it, and they then become Unhealthy (below).
//   - serving and terminating: Active when no endpoint of its family is Active by the rule
//     above and its node is neither Excluded nor failing (kube-proxy's fallback, KEP-1669:
//     better a Pod that is shutting down than none), otherwise Draining, so that a rolling
//     update lets established connections finish.
//   - terminating and not serving: Draining.
//   - neither ready nor terminating (a Pod starting or failing its readiness probe): Unhealthy.
//     It gets no new flows, and the reconciler marks it down so that its established flows
//     move too: a Pod whose container crashed would otherwise black-hole a UDP flow for as
//     long as the client keeps sending, whereas a moved TCP connection is reset and retried.
//     kube-proxy clears UDP conntrack entries of such endpoints too; it keeps TCP ones, which
//     the datapath cannot tell apart per backend.
//
// Each backend also has its node's direct server return capability (lb.Backend.DSR, from
// NodeView.DSR; false for an endpoint without a nodeName): whether the gateways use it is
// their forwarding mode's business.
//
// An endpoint whose slice lacks one of the Service's usable ports (a named targetPort that its
// Pod does not define) is left out and reported: sending that port to a wrong number is worse
// than losing the endpoint. Endpoints without a nodeName are never excluded; under a Local
// policy the NodeView is asked about node "" (the controller's finds them healthy, as it
// cannot check them; a node agent's finds them elsewhere).
//
// loadBalancerSourceRanges fail closed: an invalid prefix is reported and skipped, and when
// ranges are given but none is valid, or none is of a VIP's family, that family accepts no
// client (the prefixes 0.0.0.0/32 and ::/128, which no routed packet comes from) rather than
// every client.
func ServiceModel(in Input, nodes NodeView) (lb.Service, []Problem) {
	var pb problems
	svc := in.Service
	if svc == nil {
		pb.warn("InvalidService", "no Service to model")
		return lb.Service{}, pb.done()
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	out := lb.Service{
		Name:  key.String(),
		VIPs:  slices.Clone(in.VIPs),
		Route: in.Route,
	}
	switch svc.Spec.ExternalTrafficPolicy {
	case corev1.ServiceExternalTrafficPolicyLocal:
		out.TrafficPolicy = lb.TrafficLocal
	case corev1.ServiceExternalTrafficPolicyCluster, "":
		out.TrafficPolicy = lb.TrafficCluster
	default:
		pb.warn("InvalidTrafficPolicy", "spec.externalTrafficPolicy %q: expected Cluster or Local; using Cluster", svc.Spec.ExternalTrafficPolicy)
	}
	out.Affinity, out.AffinityTimeout = affinity(svc, &pb)
	out.SourceRanges = sourceRanges(svc, in.VIPs, &pb)

	out.Ports = servicePorts(svc, &pb)
	if len(out.Ports) == 0 {
		pb.warn("NoUsablePorts", "no usable port in spec.ports: xlb balances TCP and UDP ports, and the Service has none it can serve")
	} else {
		out.Backends = backends(in.Slices, key, out.Ports, out.TrafficPolicy == lb.TrafficLocal, nodes, &pb)
	}
	if a := svc.Spec.AllocateLoadBalancerNodePorts; a == nil || *a {
		pb.advise("NodePortsNotNeeded", "xlb forwards straight to Pod IPs and uses no NodePorts: set spec.allocateLoadBalancerNodePorts: false to stop allocating them (NodePorts already allocated stay until removed from spec.ports[].nodePort)")
	}
	return out, pb.done()
}

// affinity returns the Service's session affinity and its timeout.
func affinity(svc *corev1.Service, pb *problems) (datapath.Affinity, time.Duration) {
	switch svc.Spec.SessionAffinity {
	case corev1.ServiceAffinityNone, "":
		return datapath.AffinityNone, 0
	case corev1.ServiceAffinityClientIP:
	default:
		pb.warn("InvalidSessionAffinity", "spec.sessionAffinity %q: expected None or ClientIP; using None", svc.Spec.SessionAffinity)
		return datapath.AffinityNone, 0
	}
	timeout := DefaultAffinityTimeout
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		t := time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		if t <= 0 || t > maxAffinityTimeout {
			pb.warn("InvalidSessionAffinity", "spec.sessionAffinityConfig.clientIP.timeoutSeconds %d: expected 1 to 86400; using %d",
				*c.ClientIP.TimeoutSeconds, int(DefaultAffinityTimeout/time.Second))
		} else {
			timeout = t
		}
	}
	return datapath.AffinityClientIP, timeout
}

// sourceRanges returns the Service's allowed client prefixes (nil: every client), failing closed
// as ServiceModel describes.
func sourceRanges(svc *corev1.Service, vips []netip.Addr, pb *problems) []netip.Prefix {
	field := "spec.loadBalancerSourceRanges"
	given := svc.Spec.LoadBalancerSourceRanges
	if len(given) == 0 {
		if a, ok := svc.Annotations[AnnotationSourceRanges]; ok {
			field = "annotation " + AnnotationSourceRanges
			given = strings.Split(a, ",")
		}
	}
	var out []netip.Prefix
	var has4, has6 bool
	nonEmpty := 0
	for _, s := range given {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		nonEmpty++
		p, err := netip.ParsePrefix(s)
		if err == nil && p.Addr().Zone() != "" {
			err = fmt.Errorf("has a zone")
		}
		if err != nil {
			pb.warn("InvalidSourceRange", "%s: %q is not a CIDR prefix (%v); it is ignored", field, s, err)
			continue
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
		if p.Addr().Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	if nonEmpty == 0 {
		return nil
	}
	if len(out) == 0 {
		pb.warn("NoValidSourceRange", "%s: none of the %d ranges is valid, so the Service accepts no client until they are fixed", field, nonEmpty)
		return []netip.Prefix{denyAll(true), denyAll(false)}
	}
	closed := map[bool]bool{} // is4 → the closed family was reported
	for _, v := range vips {
		v = v.Unmap()
		if (v.Is4() && has4) || (v.Is6() && has6) || closed[v.Is4()] {
			continue
		}
		closed[v.Is4()] = true
		fam, open := "IPv6", "::/0"
		if v.Is4() {
			fam, open = "IPv4", "0.0.0.0/0"
		}
		pb.warn("SourceRangesCloseFamily", "%s has no %s prefix, so the %s VIP %s accepts no client (add %s to open it to every client)", field, fam, fam, v, open)
	}
	if !has4 {
		out = append(out, denyAll(true))
	}
	if !has6 {
		out = append(out, denyAll(false))
	}
	return out
}

// servicePorts returns the Service's usable ports, reporting the others.
func servicePorts(svc *corev1.Service, pb *problems) []lb.Port {
	var out []lb.Port
	type portProto struct {
		port  int32
		proto corev1.Protocol
	}
	seen := map[portProto]bool{}
	names := map[string]bool{}
	for i, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		var lp datapath.Protocol
		switch proto {
		case corev1.ProtocolTCP:
			lp = datapath.TCP
		case corev1.ProtocolUDP:
			lp = datapath.UDP
		default:
			pb.warn("UnsupportedProtocol", "spec.ports[%d] (%q, %d/%s): xlb balances TCP and UDP only; this port is not served", i, sp.Name, sp.Port, proto)
			continue
		}
		switch {
		case sp.Port < 1 || sp.Port > 65535:
			pb.warn("InvalidPort", "spec.ports[%d] (%q): port %d is not in 1-65535; this port is not served", i, sp.Name, sp.Port)
			continue
		case seen[portProto{sp.Port, proto}]:
			pb.warn("DuplicatePort", "spec.ports[%d] (%q): %d/%s is listed twice; only the first is served", i, sp.Name, sp.Port, proto)
			continue
		case names[sp.Name]:
			pb.warn("DuplicatePort", "spec.ports[%d]: name %q is used twice; only the first is served", i, sp.Name)
			continue
		}
		seen[portProto{sp.Port, proto}] = true
		names[sp.Name] = true
		out = append(out, lb.Port{Name: sp.Name, Port: uint16(sp.Port), Protocol: lp})
	}
	return out
}

// Ranks of an endpoint's conditions: when the same address is in several slices, the copy of
// the highest rank is used.
const (
	rankNotReady           = iota // neither ready nor terminating
	rankTerminating               // terminating, not serving
	rankServingTerminating        // terminating and still serving
	rankReady                     // ready
)

// candidate is one endpoint, deduplicated by address.
type candidate struct {
	addr  netip.Addr
	rank  int
	node  string
	slice int // index into the resolved slices, for the target ports
	name  string
}

// resolvedSlice is a slice's target port for each Service port.
type resolvedSlice struct {
	name  string
	ports []uint16 // by Service port index; 0: the slice lacks the port
}

// backends returns the Service's backends, sorted by address.
func backends(in []*discoveryv1.EndpointSlice, svc types.NamespacedName, ports []lb.Port, local bool, nodes NodeView, pb *problems) []lb.Backend {
	total := 0
	for _, s := range in {
		if s != nil {
			total += len(s.Endpoints)
		}
	}
	// By name, so that which copy of a duplicate wins and which examples a Problem quotes do
	// not depend on the lister's order (a changed message would be a new Event).
	in = slices.Clone(in)
	slices.SortFunc(in, func(a, b *discoveryv1.EndpointSlice) int {
		switch {
		case a == nil || b == nil:
			return boolCmp(a != nil, b != nil)
		}
		return strings.Compare(a.Name, b.Name)
	})
	cands := make([]candidate, 0, total)
	index := make(map[netip.Addr]int, total) // address → its candidate in cands
	resolved := make([]resolvedSlice, 0, len(in))
	for _, s := range in {
		if s == nil {
			continue
		}
		var is4 bool
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
			is4 = true
		case discoveryv1.AddressTypeIPv6:
		case discoveryv1.AddressTypeFQDN:
			continue
		default:
			pb.count("InvalidEndpointSlice", "EndpointSlices of an unknown addressType", "their endpoints are not used; expected IPv4 or IPv6",
				fmt.Sprintf("EndpointSlice %s has addressType %q", s.Name, s.AddressType))
			continue
		}
		rs := resolvedSlice{name: s.Name, ports: slicePorts(s, ports)}
		missing := slices.Index(rs.ports, 0)
		si := len(resolved)
		resolved = append(resolved, rs)
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			if len(ep.Addresses) == 0 {
				pb.count("InvalidEndpoint", "endpoints with no usable address", "they are not used",
					fmt.Sprintf("EndpointSlice %s endpoint %d has no address", s.Name, i))
				continue
			}
			addr, err := endpointAddr(ep.Addresses[0], is4)
			if err != nil {
				pb.count("InvalidEndpoint", "endpoints with no usable address", "they are not used",
					fmt.Sprintf("EndpointSlice %s: %v", s.Name, err))
				continue
			}
			if missing >= 0 {
				pb.count("EndpointPortMissing", "endpoints lack a port of the Service", "they are not used; check the Pods' named container ports",
					fmt.Sprintf("%s in EndpointSlice %s has no port %q/%s", addr, s.Name, ports[missing].Name, ports[missing].Protocol))
				continue
			}
			c := candidate{addr: addr, rank: rank(ep.Conditions), slice: si, name: s.Name}
			if ep.NodeName != nil {
				c.node = *ep.NodeName
			}
			if j, dup := index[addr]; dup {
				o := &cands[j]
				if c.rank > o.rank || (c.rank == o.rank && c.name < o.name) {
					*o = c
				}
				continue
			}
			index[addr] = len(cands)
			cands = append(cands, c)
		}
	}
	return assignStates(cands, resolved, svc, ports, local, nodes)
}

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// slicePorts returns s's port number for each Service port, matched by name and protocol; 0
// where s has none.
func slicePorts(s *discoveryv1.EndpointSlice, ports []lb.Port) []uint16 {
	out := make([]uint16, len(ports))
	for i, p := range ports {
		for _, sp := range s.Ports {
			name, proto := "", corev1.ProtocolTCP
			if sp.Name != nil {
				name = *sp.Name
			}
			if sp.Protocol != nil {
				proto = *sp.Protocol
			}
			if name != p.Name || proto != corev1.Protocol(p.Protocol.String()) || sp.Port == nil || *sp.Port < 1 || *sp.Port > 65535 {
				continue
			}
			out[i] = uint16(*sp.Port)
			break
		}
	}
	return out
}

// endpointAddr parses an endpoint address of a slice of the given family; it must be a unicast
// address a gateway can forward to.
func endpointAddr(s string, is4 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("address %q: not an IP address", s)
	case a.Zone() != "" || a.Is4In6():
		return netip.Addr{}, fmt.Errorf("address %q: zones and IPv4-mapped addresses are not allowed", s)
	case a.Is4() != is4:
		return netip.Addr{}, fmt.Errorf("address %q: not of the slice's addressType", s)
	case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsInterfaceLocalMulticast():
		return netip.Addr{}, fmt.Errorf("address %q: not a unicast address a gateway can forward to", s)
	}
	return a, nil
}

// rank returns the rank of an endpoint's conditions, reading nil ones as kube-proxy does (ready
// and serving unless false, terminating only if true).
func rank(c discoveryv1.EndpointConditions) int {
	ready := c.Ready == nil || *c.Ready
	serving := c.Serving == nil || *c.Serving
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case ready:
		return rankReady
	case serving && terminating:
		return rankServingTerminating
	case terminating:
		return rankTerminating
	}
	return rankNotReady
}

// assignStates turns the candidates into backends with their states and target ports.
func assignStates(cands []candidate, resolved []resolvedSlice, svc types.NamespacedName, ports []lb.Port, local bool, nodes NodeView) []lb.Backend {
	// Node answers, once per node: a Service has many endpoints on few nodes.
	excluded := map[string]bool{}
	healthy := map[string]bool{}
	dsr := map[string]bool{}
	isDSR := func(n string) bool {
		if n == "" || nodes == nil {
			return false
		}
		v, ok := dsr[n]
		if !ok {
			v = nodes.DSR(n)
			dsr[n] = v
		}
		return v
	}
	isExcluded := func(n string) bool {
		if n == "" || nodes == nil {
			return false
		}
		v, ok := excluded[n]
		if !ok {
			v = nodes.Excluded(n)
			excluded[n] = v
		}
		return v
	}
	isHealthy := func(n string) bool {
		if !local || nodes == nil {
			return true
		}
		v, ok := healthy[n]
		if !ok {
			v = nodes.LocalHealthy(n, svc)
			healthy[n] = v
		}
		return v
	}
	// usable[is4]: some ready endpoint of the family takes new flows, so no fallback.
	usable := map[bool]bool{}
	for _, c := range cands {
		if c.rank == rankReady && !isExcluded(c.node) && isHealthy(c.node) {
			usable[c.addr.Is4()] = true
		}
	}
	// Sorted by address through an index: sorting the candidates themselves, which hold
	// pointers, costs a write barrier per move and was most of the time at 10k endpoints.
	order := make([]int32, len(cands))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cands[a].addr.Compare(cands[b].addr) })
	sorted := make([]candidate, len(cands))
	for i, j := range order {
		sorted[i] = cands[j]
	}
	cands = sorted
	out := make([]lb.Backend, len(cands))
	for i, c := range cands {
		b := lb.Backend{Addr: c.addr, Weight: 1, Node: c.node, DSR: isDSR(c.node)}
		switch c.rank {
		case rankReady:
			if isExcluded(c.node) || !isHealthy(c.node) {
				b.State = lb.Draining
			}
		case rankServingTerminating:
			if usable[c.addr.Is4()] || isExcluded(c.node) || !isHealthy(c.node) {
				b.State = lb.Draining
			}
		case rankTerminating:
			b.State = lb.Draining
		default:
			b.State = lb.Unhealthy
		}
		out[i] = b
	}
	setTargetPorts(out, cands, resolved, ports)
	return out
}

// setTargetPorts sets each port's TargetPort to the number most backends use, and gives the
// backends that use another one their own in TargetPorts.
func setTargetPorts(out []lb.Backend, cands []candidate, resolved []resolvedSlice, ports []lb.Port) {
	for pi := range ports {
		counts := map[uint16]int{} // target port → backends using it
		for _, c := range cands {
			counts[resolved[c.slice].ports[pi]]++
		}
		var common uint16
		for tp, n := range counts {
			if n > counts[common] || (n == counts[common] && tp < common) {
				common = tp
			}
		}
		ports[pi].TargetPort = common
		if len(counts) < 2 {
			continue
		}
		for i, c := range cands {
			if tp := resolved[c.slice].ports[pi]; tp != common {
				if out[i].TargetPorts == nil {
					out[i].TargetPorts = map[string]uint16{}
				}
				out[i].TargetPorts[ports[pi].Name] = tp
			}
		}
	}
}

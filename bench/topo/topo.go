// SPDX-License-Identifier: Apache-2.0

// Package topo builds the benchmark's three namespaces and the two veth links between them:
//
//	generator (Gen) <-veth-> (GwIn) gateway (GwOut) <-veth-> (Sink) sink
//
// with addresses, routes and static neighbour entries, so that each datapath under test can be
// attached to GwIn and forward toward the sink. Only lab addresses (198.18.0.0/15) are used.
package topo

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// The topology's fixed addresses.
var (
	// VIP is the service address the generator sends to (configured on no interface).
	VIP = netip.MustParseAddr("198.18.100.1")
	// Backend is the sink's address: the one backend behind the VIP.
	Backend = netip.MustParseAddr("198.18.1.10")
	// ClientBase is the first client source address; flows count up from it (up to a /17).
	ClientBase = netip.MustParseAddr("198.18.128.0")
	// Clients is the prefix all client sources are in.
	Clients = netip.MustParsePrefix("198.18.128.0/17")
)

// Addresses of the links.
var (
	genAddr   = netip.MustParsePrefix("198.18.0.2/24")
	gwInAddr  = netip.MustParsePrefix("198.18.0.1/24")
	gwOutAddr = netip.MustParsePrefix("198.18.1.1/24")
	sinkAddr  = netip.PrefixFrom(Backend, 24)
)

// MACs of the four veth ends (locally administered).
var (
	GenMAC   = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	GwInMAC  = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
	GwOutMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x01, 0x01}
	SinkMAC  = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x01, 0x02}
)

// Topology is the three namespaces and their links. Interface names carry the run's prefix, so
// that the kernel threads serving them (napi/<ifname>-N) can be found and placed.
type Topology struct {
	Gen, Gateway, SinkNS *netlab.NS
	// GenIf, GwIn, GwOut and SinkIf are the interface names of the veth ends.
	GenIf, GwIn, GwOut, SinkIf string
	log                        *slog.Logger
}

// New builds the topology with names starting with prefix (at most 8 characters). On error,
// whatever was built is removed.
func New(prefix string, log *slog.Logger) (t *Topology, err error) {
	if len(prefix) > 8 {
		return nil, fmt.Errorf("topology prefix %q longer than 8 characters", prefix)
	}
	t = &Topology{GenIf: prefix + "g0", GwIn: prefix + "gi", GwOut: prefix + "gs", SinkIf: prefix + "s0", log: log}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	for _, p := range []struct {
		ns   **netlab.NS
		name string
	}{{&t.Gen, prefix + "gen"}, {&t.Gateway, prefix + "gw"}, {&t.SinkNS, prefix + "sink"}} {
		ns, err := netlab.Create(p.name)
		if err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
		*p.ns = ns
		// No IPv6 at all: no router or neighbour solicitations reach the sink's counts.
		for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
			if err := ns.SetSysctl(k, "1"); err != nil {
				return nil, fmt.Errorf("topology: %w", err)
			}
		}
	}
	if err := netlab.AddVeth(t.Gen, t.GenIf, GenMAC.String(), t.Gateway, t.GwIn, GwInMAC.String()); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if err := netlab.AddVeth(t.Gateway, t.GwOut, GwOutMAC.String(), t.SinkNS, t.SinkIf, SinkMAC.String()); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	steps := []struct {
		ns   *netlab.NS
		args string
	}{
		{t.Gen, fmt.Sprintf("addr add %s dev %s", genAddr, t.GenIf)},
		{t.Gen, fmt.Sprintf("route add default via %s", gwInAddr.Addr())},
		{t.Gateway, fmt.Sprintf("addr add %s dev %s", gwInAddr, t.GwIn)},
		{t.Gateway, fmt.Sprintf("addr add %s dev %s", gwOutAddr, t.GwOut)},
		{t.Gateway, fmt.Sprintf("route add %s via %s dev %s", Clients, genAddr.Addr(), t.GwIn)},
		// Static neighbours: bpf_fib_lookup and the kernel's forwarding never wait for ARP.
		{t.Gateway, fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", Backend, SinkMAC, t.GwOut)},
		{t.Gateway, fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", genAddr.Addr(), GenMAC, t.GwIn)},
		{t.SinkNS, fmt.Sprintf("addr add %s dev %s", sinkAddr, t.SinkIf)},
		{t.SinkNS, fmt.Sprintf("route add default via %s", gwOutAddr.Addr())},
	}
	for _, s := range steps {
		if err := s.ns.IP(s.args); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
	}
	for k, v := range map[string]string{
		"net.ipv4.conf.all.forwarding": "1",
		"net.ipv4.conf.all.rp_filter":  "0", "net.ipv4.conf.default.rp_filter": "0",
		"net.ipv4.conf." + t.GwIn + ".rp_filter": "0",
	} {
		if err := t.Gateway.SetSysctl(k, v); err != nil {
			return nil, fmt.Errorf("topology: %w", err)
		}
	}
	return t, nil
}

// Close removes the namespaces (and with them the links and any program attached to them).
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range []*netlab.NS{t.Gen, t.Gateway, t.SinkNS} {
		if ns != nil {
			errs = append(errs, ns.Delete())
		}
	}
	return errors.Join(errs...)
}

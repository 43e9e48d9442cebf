// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/xlb-dev/xlb/xdp/dsr"
)

// DSR is `xlb show dsr`: a node agent's side of direct server return, read from its pins
// (dsr.ReadPinned).
type DSR struct {
	// Interfaces are the interfaces whose links are pinned, with their direction ("both",
	// "ingress", "egress"), by name.
	Interfaces []DSRInterface `json:"interfaces"`
	// Pairs are the {frontend, endpoint} pairs the node accepts carriers for.
	Pairs []DSRPair `json:"pairs"`
	// Counters are the programs' counters by name (docs/dsr.md).
	Counters map[string]uint64 `json:"counters"`
	// Flows are the recorded flows, half-open ones included, the most recently used first, at
	// most the limit asked for; FlowsTotal is how many the maps hold.
	Flows      []DSRFlow `json:"flows"`
	FlowsTotal int       `json:"flowsTotal"`
}

// DSRInterface is an interface the node side is attached to.
type DSRInterface struct {
	Name      string `json:"name"`
	Direction string `json:"direction"`
}

// DSRPair is a {frontend, endpoint} pair the node accepts carriers for.
type DSRPair struct {
	Frontend string `json:"frontend"`
	Endpoint string `json:"endpoint"`
}

// DSRFlow is a recorded flow: the Pod's replies to Client get VIP as their source.
type DSRFlow struct {
	Proto   string  `json:"proto"`
	Client  string  `json:"client"`
	VIP     string  `json:"vip"`
	Pod     string  `json:"pod"`
	IdleSec float64 `json:"idleSeconds"`
	// HalfOpen marks a TCP flow between its carried SYN and the handshake's ACK (the node's
	// half_open table; docs/dsr.md).
	HalfOpen bool `json:"halfOpen,omitempty"`
}

// ReadDSR reads the node side of direct server return pinned in dir, with at most limit flows
// (0: all), the most recently used first.
func ReadDSR(dir string, limit int) (DSR, error) {
	p, err := dsr.ReadPinned(dir)
	if err != nil {
		return DSR{}, err
	}
	doc := DSR{Interfaces: []DSRInterface{}, Pairs: []DSRPair{}, Counters: p.Counters, Flows: []DSRFlow{}, FlowsTotal: len(p.Flows)}
	for _, name := range slices.Sorted(maps.Keys(p.Interfaces)) {
		doc.Interfaces = append(doc.Interfaces, DSRInterface{Name: name, Direction: p.Interfaces[name].String()})
	}
	for _, s := range p.Services {
		doc.Pairs = append(doc.Pairs, DSRPair{Frontend: frontendString(s.Frontend), Endpoint: endpointString(s.Endpoint.Addr(), s.Endpoint.Port())})
	}
	flows := slices.Clone(p.Flows)
	slices.SortStableFunc(flows, func(a, b dsr.Flow) int { return cmp.Compare(a.Idle, b.Idle) })
	if limit > 0 && len(flows) > limit {
		flows = flows[:limit]
	}
	for _, f := range flows {
		doc.Flows = append(doc.Flows, DSRFlow{Proto: f.Proto.String(), Client: f.Client.String(), VIP: f.VIP.String(),
			Pod: f.Pod.String(), IdleSec: f.Idle.Seconds(), HalfOpen: f.HalfOpen})
	}
	return doc, nil
}

// WriteText writes the interfaces, the pairs, the counters and the flows.
func (doc DSR) WriteText(w io.Writer) error {
	tw := newTable(w)
	var ifs []string
	for _, i := range doc.Interfaces {
		ifs = append(ifs, i.Name+" "+i.Direction)
	}
	if len(ifs) == 0 {
		fmt.Fprintln(tw, "interfaces: none (detached: no carrier is read, no reply rewritten)")
	} else {
		fmt.Fprintf(tw, "interfaces: %s\n", strings.Join(ifs, ", "))
	}
	fmt.Fprintf(tw, "pairs: %d\n", len(doc.Pairs))
	if len(doc.Pairs) > 0 {
		fmt.Fprintln(tw, "  FRONTEND\tENDPOINT\t")
	}
	for _, p := range doc.Pairs {
		fmt.Fprintf(tw, "  %s\t%s\t\n", p.Frontend, p.Endpoint)
	}
	fmt.Fprintln(tw, "counters:")
	for _, name := range dsr.CounterNames() {
		if v, ok := doc.Counters[name]; ok {
			fmt.Fprintf(tw, "  %s\t%d\t\n", name, v)
		}
	}
	fmt.Fprintf(tw, "flows: %d", doc.FlowsTotal)
	if len(doc.Flows) < doc.FlowsTotal {
		fmt.Fprintf(tw, " (the %d most recently used)", len(doc.Flows))
	}
	fmt.Fprintln(tw)
	if len(doc.Flows) > 0 {
		fmt.Fprintln(tw, "  PROTO\tCLIENT\tVIP\tPOD\tIDLE\tHALF-OPEN\t")
	}
	for _, f := range doc.Flows {
		half := "-"
		if f.HalfOpen {
			half = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%v\t%s\t\n", f.Proto, f.Client, f.VIP, f.Pod, idleString(f.IdleSec), half)
	}
	return tw.Flush()
}

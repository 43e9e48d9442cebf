// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// Flows is `xlb show flows`: conntrack entries and the connections held in handshake slots, the
// most recently used first.
type Flows struct {
	Flows []Flow `json:"flows"`
	// Total counts the entries that match the VIP asked for, also those beyond the limit.
	Total int `json:"total"`
}

// Flow is one conntrack entry.
type Flow struct {
	Proto   string `json:"proto"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	Reverse bool   `json:"reverse,omitempty"`
	// Backend is the chosen backend's endpoint (forward entries), "" if it is gone.
	Backend   string `json:"backend,omitempty"`
	BackendID uint32 `json:"backendID,omitempty"`
	VIPID     uint32 `json:"vipID"`
	Closing   bool   `json:"closing,omitempty"`
	// InSlot: a TCP connection the XDP datapath holds in its handshake slot, not in conntrack
	// (datapath.Flow.InSlot).
	InSlot  bool    `json:"inSlot,omitempty"`
	IdleSec float64 `json:"idleSeconds"`
}

// ReadFlows returns up to limit conntrack entries of p (0: all), those of VIP address only
// when it is valid, the most recently used first.
func ReadFlows(p *gateway.Pinned, only netip.Addr, limit int) (Flows, error) {
	var doc Flows
	if limit < 0 {
		return doc, fmt.Errorf("read flows: limit %d: want 0 (all) or more", limit)
	}
	flows, err := p.Flows()
	if err != nil {
		return doc, err
	}
	backends, err := p.Backends()
	if err != nil {
		return doc, err
	}
	if only = only.Unmap(); only.IsValid() {
		vips, err := p.VIPs()
		if err != nil {
			return doc, err
		}
		ids := map[datapath.VIPID]bool{}
		for f, cfg := range vips {
			if f.Addr.Unmap() == only {
				ids[cfg.ID] = true
			}
		}
		flows = slices.DeleteFunc(flows, func(f datapath.Flow) bool { return !ids[f.VIP] })
	}
	slices.SortFunc(flows, func(a, b datapath.Flow) int {
		return cmp.Or(cmp.Compare(a.Idle, b.Idle), a.Src.Compare(b.Src), a.Dst.Compare(b.Dst))
	})
	doc.Total = len(flows)
	if limit > 0 && len(flows) > limit {
		flows = flows[:limit]
	}
	doc.Flows = []Flow{}
	for _, f := range flows {
		sf := Flow{Proto: f.Proto.String(), Src: f.Src.String(), Dst: f.Dst.String(), Reverse: f.Reverse,
			VIPID: uint32(f.VIP), Closing: f.Closing, InSlot: f.InSlot, IdleSec: f.Idle.Seconds()}
		if !f.Reverse {
			sf.BackendID = uint32(f.Backend)
			if b, ok := backends[f.Backend]; ok {
				port := b.Port
				if port == 0 {
					port = f.Dst.Port() // an all-ports VIP keeps the client's port
				}
				sf.Backend = endpointString(b.Addr, port)
			}
		}
		doc.Flows = append(doc.Flows, sf)
	}
	return doc, nil
}

// WriteText writes the entries as a table, reverse entries from the client's side.
func (doc Flows) WriteText(w io.Writer) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "PROTO\tCLIENT\tVIP\tBACKEND\tIDLE\tSTATE")
	for _, f := range doc.Flows {
		var states []string
		if f.Closing {
			states = append(states, "closing")
		}
		if f.InSlot {
			states = append(states, "in handshake slot")
		}
		state := strings.Join(states, ", ")
		be := f.Backend
		if f.Reverse {
			// A reverse entry is keyed backend -> client: show it from the client's side.
			fmt.Fprintf(tw, "%s\t%s\tvip id %d\t%s\t%v\treverse %s\n", f.Proto, f.Dst, f.VIPID, f.Src,
				idleString(f.IdleSec), state)
			continue
		}
		if be == "" {
			be = fmt.Sprintf("(backend %d deleted)", f.BackendID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", f.Proto, f.Src, f.Dst, be, idleString(f.IdleSec), state)
	}
	if n := doc.Total - len(doc.Flows); n > 0 {
		fmt.Fprintf(tw, "... and %d more (--limit)\n", n)
	}
	fmt.Fprintf(tw, "%d entries\n", doc.Total)
	return tw.Flush()
}

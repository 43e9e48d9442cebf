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

// Services is `xlb show services`: every frontend with its table's backends, and the backends
// in no table.
type Services struct {
	Services []Service `json:"services"`
	// Unmapped are the backends in no Maglev table: draining or down, keeping only their
	// established flows. Not listed when the services of one VIP are asked for.
	Unmapped []Backend `json:"unmappedBackends"`
}

// Service is one frontend.
type Service struct {
	Frontend     string   `json:"frontend"` // "VIP:port/PROTO", port "*" for all ports
	ID           uint32   `json:"id"`
	Affinity     string   `json:"affinity,omitempty"`
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// TableSize is the Maglev table's M; 0 when the frontend has no table.
	TableSize int `json:"tableSize"`
	// EmptySlots are the table's slots with no backend: their new flows are dropped. All of
	// them when no backend takes new flows.
	EmptySlots int       `json:"emptySlots"`
	Packets    uint64    `json:"packets"`
	Bytes      uint64    `json:"bytes"`
	NewFlows   uint64    `json:"newFlows"`
	Backends   []Backend `json:"backends"`
}

// Backend is one backend, with its share of a table when it is in one.
type Backend struct {
	ID       uint32 `json:"id"`
	Endpoint string `json:"endpoint"` // "addr:port", port "*" when the client's is kept
	Down     bool   `json:"down,omitempty"`
	Slots    int    `json:"slots,omitempty"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	NewFlows uint64 `json:"newFlows"`
}

// ReadServices returns every frontend of p (those of VIP address only, when valid) with its
// table's backends by share, and the backends no table holds (not with only).
func ReadServices(p *gateway.Pinned, only netip.Addr) (Services, error) {
	var doc Services
	vips, err := p.VIPs()
	if err != nil {
		return doc, err
	}
	tables, err := p.MaglevTables()
	if err != nil {
		return doc, err
	}
	backends, err := p.Backends()
	if err != nil {
		return doc, err
	}
	mapped := map[datapath.BackendID]bool{}
	for _, tb := range tables {
		for _, id := range tb {
			mapped[id] = true
		}
	}
	backendOf := func(id datapath.BackendID, slots int) (Backend, error) {
		tr, err := p.BackendTraffic(id)
		if err != nil {
			return Backend{}, err
		}
		sb := Backend{ID: uint32(id), Slots: slots, Packets: tr.Packets, Bytes: tr.Bytes, NewFlows: tr.NewFlows}
		if b, ok := backends[id]; ok {
			sb.Endpoint, sb.Down = endpointString(b.Addr, b.Port), b.Down
		} else {
			sb.Endpoint = "(deleted)"
		}
		return sb, nil
	}
	only = only.Unmap()
	for f, cfg := range vips {
		if only.IsValid() && f.Addr.Unmap() != only {
			continue
		}
		tr, err := p.VIPTraffic(cfg.ID)
		if err != nil {
			return doc, err
		}
		s := Service{Frontend: frontendString(f), ID: uint32(cfg.ID), TableSize: len(tables[cfg.ID]),
			Packets: tr.Packets, Bytes: tr.Bytes, NewFlows: tr.NewFlows, Backends: []Backend{}}
		if cfg.Affinity == datapath.AffinityClientIP {
			s.Affinity = "ClientIP"
		}
		for _, r := range cfg.SourceRanges {
			s.SourceRanges = append(s.SourceRanges, r.String())
		}
		slots := map[datapath.BackendID]int{}
		for _, id := range tables[cfg.ID] {
			if id != 0 {
				slots[id]++
			} else {
				s.EmptySlots++
			}
		}
		for id, n := range slots {
			sb, err := backendOf(id, n)
			if err != nil {
				return doc, err
			}
			s.Backends = append(s.Backends, sb)
		}
		slices.SortFunc(s.Backends, func(a, b Backend) int { return cmp.Compare(a.ID, b.ID) })
		doc.Services = append(doc.Services, s)
	}
	slices.SortFunc(doc.Services, func(a, b Service) int { return cmp.Compare(a.ID, b.ID) })
	if only.IsValid() {
		return doc, nil
	}
	for id := range backends {
		if mapped[id] {
			continue
		}
		sb, err := backendOf(id, 0)
		if err != nil {
			return doc, err
		}
		doc.Unmapped = append(doc.Unmapped, sb)
	}
	slices.SortFunc(doc.Unmapped, func(a, b Backend) int { return cmp.Compare(a.ID, b.ID) })
	return doc, nil
}

// WriteText writes each frontend, its backends' shares and counters, and the backends in no
// table.
func (doc Services) WriteText(w io.Writer) error {
	tw := newTable(w)
	if len(doc.Services) == 0 {
		fmt.Fprintln(tw, "no services")
	}
	for _, s := range doc.Services {
		var extra []string
		if s.Affinity != "" {
			extra = append(extra, "affinity "+s.Affinity)
		}
		if len(s.SourceRanges) > 0 {
			extra = append(extra, "source ranges "+strings.Join(s.SourceRanges, ","))
		}
		switch {
		case s.TableSize == 0 || s.EmptySlots == s.TableSize:
			extra = append(extra, "NO BACKEND: new flows dropped")
		case s.EmptySlots > 0:
			extra = append(extra, fmt.Sprintf("%d empty slots: their new flows dropped", s.EmptySlots))
		}
		fmt.Fprintf(tw, "%s\tid %d\tM %d\tpackets %d\tbytes %d\tnew flows %d\t%s\n", s.Frontend, s.ID, s.TableSize,
			s.Packets, s.Bytes, s.NewFlows, strings.Join(extra, "; "))
		for _, b := range s.Backends {
			state := ""
			if b.Down {
				state = "down"
			}
			fmt.Fprintf(tw, "  %s\tid %d\tslots %d (%.1f%%)\tpackets %d\tbytes %d\tnew flows %d\t%s\n", b.Endpoint, b.ID,
				b.Slots, 100*float64(b.Slots)/float64(s.TableSize), b.Packets, b.Bytes, b.NewFlows, state)
		}
	}
	if len(doc.Unmapped) > 0 {
		fmt.Fprintln(tw, "backends in no table (draining or down: established flows only)")
		for _, b := range doc.Unmapped {
			state := "draining"
			if b.Down {
				state = "down"
			}
			fmt.Fprintf(tw, "  %s\tid %d\t%s\tpackets %d\tbytes %d\tnew flows %d\t\n", b.Endpoint, b.ID, state,
				b.Packets, b.Bytes, b.NewFlows)
		}
	}
	return tw.Flush()
}

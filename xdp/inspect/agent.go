// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/xlb-dev/xlb/xdp/socklb"
)

// Agent is `xlb show agent`: a node agent's socket load balancer, read from its pins.
type Agent struct {
	Frontends []AgentFrontend `json:"frontends"`
	Counters  AgentCounters   `json:"counters"`
	// Attached counts the programs whose links are pinned, of Hooks (fewer: part of the
	// balancing is detached).
	Attached int `json:"attached"`
	Hooks    int `json:"hooks"`
}

// AgentCounters are the socket load balancer's counters (socklb.Counters).
type AgentCounters struct {
	Connects      uint64 `json:"connects"`
	Refused       uint64 `json:"refused"`
	Datagrams     uint64 `json:"datagrams"`
	DatagramsKept uint64 `json:"datagramsKept"`
	Revnat        uint64 `json:"revnat"`
	AffinityKept  uint64 `json:"affinityKept"`
	NoSlot        uint64 `json:"noSlot"`
}

// AgentFrontend is one cluster-IP frontend of a node agent.
type AgentFrontend struct {
	Frontend  string   `json:"frontend"`
	Endpoints []string `json:"endpoints"`
	// AffinitySeconds is the sessionAffinity: ClientIP timeout (0: none).
	AffinitySeconds int64 `json:"affinitySeconds,omitempty"`
	// MissingSlots counts slots that were missing or another frontend's: the read raced an
	// agent's update (read again), or the maps were changed outside the agent.
	MissingSlots int `json:"missingSlots,omitempty"`
}

// ReadAgent reads the frontends and counters of the node agent pinned in dir
// (socklb.ReadPinned).
func ReadAgent(dir string) (Agent, error) {
	pa, err := socklb.ReadPinned(dir)
	if err != nil {
		return Agent{}, err
	}
	c := pa.Counters
	doc := Agent{Frontends: []AgentFrontend{}, Counters: AgentCounters{Connects: c.Connects, Refused: c.Refused,
		Datagrams: c.Datagrams, DatagramsKept: c.DatagramsKept, Revnat: c.Revnat, AffinityKept: c.AffinityKept, NoSlot: c.NoSlot},
		Attached: pa.Attached, Hooks: pa.Hooks}
	for _, f := range pa.Frontends {
		af := AgentFrontend{Frontend: f.Frontend.String(), Endpoints: []string{}, AffinitySeconds: int64(f.AffinityTimeout / time.Second),
			MissingSlots: f.Missing}
		for _, e := range f.Endpoints {
			af.Endpoints = append(af.Endpoints, e.String())
		}
		doc.Frontends = append(doc.Frontends, af)
	}
	return doc, nil
}

// WriteText writes the frontends with their endpoints, then the counters.
func (doc Agent) WriteText(w io.Writer) error {
	tw := newTable(w)
	c := doc.Counters
	if doc.Attached < doc.Hooks {
		fmt.Fprintf(tw, "DETACHED: %d of %d programs have no pinned link: part of the balancing is off (xlb cleanup stopped half-way?)\n",
			doc.Hooks-doc.Attached, doc.Hooks)
	}
	if len(doc.Frontends) == 0 {
		fmt.Fprintln(tw, "no frontends")
	}
	for _, f := range doc.Frontends {
		var notes []string
		switch n := len(f.Endpoints); {
		case n == 0 && f.MissingSlots == 0:
			notes = append(notes, "no endpoint: connections refused")
		case n == 1:
			notes = append(notes, "1 endpoint")
		default:
			notes = append(notes, fmt.Sprintf("%d endpoints", n))
		}
		if f.AffinitySeconds > 0 {
			notes = append(notes, fmt.Sprintf("affinity ClientIP %v", time.Duration(f.AffinitySeconds)*time.Second))
		}
		if f.MissingSlots > 0 {
			notes = append(notes, fmt.Sprintf("%d SLOTS MISSING: their connections are refused (the read raced an update? run again)", f.MissingSlots))
		}
		fmt.Fprintf(tw, "%s\t%s\n", f.Frontend, strings.Join(notes, "; "))
		for _, e := range f.Endpoints {
			fmt.Fprintf(tw, "  %s\t\n", e)
		}
	}
	fmt.Fprintf(tw, "counters: connects %d, refused %d, datagrams %d (kept %d), replies and getpeername %d, affinity kept %d, no slot %d\n",
		c.Connects, c.Refused, c.Datagrams, c.DatagramsKept, c.Revnat, c.AffinityKept, c.NoSlot)
	return tw.Flush()
}

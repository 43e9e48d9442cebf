// SPDX-License-Identifier: Apache-2.0

// Package run runs the benchmark: it puts each datapath under test on the gateway of a
// topo.Topology in turn, drives the generator against it and measures, at the sink, what got
// through, with every drop counter the path has.
package run

import (
	"context"

	"github.com/xlb-dev/xlb/bench/topo"
)

// Datapath is one way of doing the gateway's job (forward VIP traffic to the backend).
type Datapath interface {
	// Name is the datapath's short name in tables ("xlb", "nftables", ...).
	Name() string
	// Start installs the datapath on t's gateway.
	Start(ctx context.Context, t *topo.Topology) error
	// Drops returns the datapath's own counters of frames it did not forward, by name
	// (cumulative since Start).
	Drops() (map[string]uint64, error)
	// Stop removes everything Start installed; the topology stays.
	Stop() error
}

// Ports of the service: clients address the VIP on VIPPort; the backend's target port is
// BackendPort (TCP and UDP alike).
const (
	VIPPort     = 80
	BackendPort = 8080
)

// SPDX-License-Identifier: Apache-2.0
package run

import (
	"context"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/bench/redirect"
	"github.com/xlb-dev/xlb/bench/topo"
)

// Ceiling is the plain XDP redirect: MAC rewrite and DEVMAP redirect, no load-balancing work
// (and no DNAT: frames reach the sink still addressed to the VIP). The most any XDP forwarder
// gets through this box.
type Ceiling struct {
	r *redirect.Redirect
}

// Name implements Datapath.
func (c *Ceiling) Name() string { return "xdp-redirect" }

// Start implements Datapath.
func (c *Ceiling) Start(_ context.Context, t *topo.Topology) error {
	r, err := redirect.Start(redirect.Options{NS: t.Gateway, In: t.GwIn, Out: t.GwOut,
		DstMAC: topo.SinkMAC, SrcMAC: topo.GwOutMAC})
	if err != nil {
		return fmt.Errorf("start %s: %w", c.Name(), err)
	}
	c.r = r
	return nil
}

// Programs implements programmed.
func (c *Ceiling) Programs() []*ebpf.Program {
	if c.r == nil {
		return nil
	}
	return []*ebpf.Program{c.r.Program()}
}

// Drops implements Datapath: the program drops nothing of its own (failed redirects show in
// the veth counters).
func (c *Ceiling) Drops() (map[string]uint64, error) { return nil, nil }

// Stop implements Datapath.
func (c *Ceiling) Stop() error {
	if c.r == nil {
		return nil
	}
	err := c.r.Close()
	c.r = nil
	return err
}

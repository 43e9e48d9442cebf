// SPDX-License-Identifier: Apache-2.0
package gen

import (
	"fmt"
	"net"

	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Client is the connections-per-second mix's client side (bench_client): attached to the
// generator's veth, it answers each SYN-ACK that acknowledges a generated SYN with the
// handshake's ACK, sent back toward the gateway. Stateless: the SYN-ACK says everything the ACK
// needs (bpf/consts.h, GEN_ISN).
type Client struct {
	g    *Generator
	link link.Link
}

// AttachClient attaches the client program to ifname in ns (the generator's veth), in native
// mode. Close detaches it.
func (g *Generator) AttachClient(ns *netlab.NS, ifname string) (*Client, error) {
	c := &Client{g: g}
	err := ns.Do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		c.link, err = link.AttachXDP(link.XDPOptions{Program: g.objs.BenchClient, Interface: iface.Index, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach client to %s in %s: %w", ifname, ns.Name, err)
	}
	return c, nil
}

// Answered is how many SYN-ACKs the client program has answered since it was loaded (with the
// generator), summed over CPUs.
func (g *Generator) Answered() (uint64, error) {
	var per []uint64
	if err := g.objs.ClientCounts.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("generator: read client_counts: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches the client program.
func (c *Client) Close() error {
	if c.link == nil {
		return nil
	}
	err := c.link.Close()
	c.link = nil
	if err != nil {
		return fmt.Errorf("detach client: %w", err)
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

// Package redirect is the benchmark's ceiling: an XDP program on the gateway's ingress veth that
// rewrites the MAC addresses and redirects every frame to the egress veth, with no load-balancing
// work at all.
package redirect

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Redirect is the loaded program, attached to one interface.
type Redirect struct {
	objs redirectObjects
	link link.Link
}

// Options say where frames go.
type Options struct {
	// NS is the gateway namespace; In the interface the program runs on; Out the egress.
	NS      *netlab.NS
	In, Out string
	// DstMAC is the next hop's MAC (the sink's); SrcMAC the egress interface's.
	DstMAC, SrcMAC net.HardwareAddr
}

// Start loads the program, points it at opts.Out and attaches it to opts.In in native mode.
func Start(opts Options) (*Redirect, error) {
	if len(opts.DstMAC) != 6 || len(opts.SrcMAC) != 6 {
		return nil, fmt.Errorf("redirect: MACs %q and %q must be 6 bytes", opts.DstMAC, opts.SrcMAC)
	}
	r := &Redirect{}
	if err := loadRedirectObjects(&r.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load redirect: %+v", verr)
		}
		return nil, fmt.Errorf("load redirect: %w", err)
	}
	var m redirectMacs
	copy(m.Dst[:], opts.DstMAC)
	copy(m.Src[:], opts.SrcMAC)
	err := opts.NS.Do(func() error {
		in, err := net.InterfaceByName(opts.In)
		if err != nil {
			return err
		}
		out, err := net.InterfaceByName(opts.Out)
		if err != nil {
			return err
		}
		if err := r.objs.RedirectMacs.Put(uint32(0), &m); err != nil {
			return fmt.Errorf("write redirect_macs: %w", err)
		}
		if err := r.objs.RedirectPort.Put(uint32(0), uint32(out.Index)); err != nil {
			return fmt.Errorf("write redirect_port %s (%d): %w", opts.Out, out.Index, err)
		}
		r.link, err = link.AttachXDP(link.XDPOptions{Program: r.objs.BenchRedirect, Interface: in.Index, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		r.objs.Close()
		return nil, fmt.Errorf("start redirect %s -> %s in %s: %w", opts.In, opts.Out, opts.NS.Name, err)
	}
	return r, nil
}

// Program is the redirect program (for its bpf_stats).
func (r *Redirect) Program() *ebpf.Program { return r.objs.BenchRedirect }

// Close detaches and unloads the program.
func (r *Redirect) Close() error {
	var errs []error
	if r.link != nil {
		errs = append(errs, r.link.Close())
	}
	errs = append(errs, r.objs.Close())
	return errors.Join(errs...)
}

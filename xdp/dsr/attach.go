// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Direction says which of an interface's directions a program is attached to (the
// contract's datapath.DSRDirection, so that *Datapath is a datapath.DSRDatapath).
type Direction = datapath.DSRDirection

// The directions; Both is Ingress|Egress.
const (
	// Ingress runs the carrier's reader on the packets the interface receives: attach it where
	// the gateways' packets arrive.
	Ingress = datapath.DSRIngress
	// Egress runs the reply rewriter on the packets the interface sends: attach it where the
	// Pods' replies leave the node.
	Egress = datapath.DSREgress
	Both   = datapath.DSRBoth
)

// each returns the single directions d holds.
func each(d Direction) []Direction {
	var out []Direction
	for _, one := range []Direction{Ingress, Egress} {
		if d&one != 0 {
			out = append(out, one)
		}
	}
	return out
}

// attachType is the TCX attach type of a single direction.
func attachType(d Direction) ebpf.AttachType {
	if d == Egress {
		return ebpf.AttachTCXEgress
	}
	return ebpf.AttachTCXIngress
}

// attachment is one program on one interface.
type attachment struct {
	ifname string
	dir    Direction // Ingress or Egress
}

// String returns "ifname/direction".
func (a attachment) String() string { return a.ifname + "/" + a.dir.String() }

// pinName is the attachment's pin in the pin directory: "link_" + direction + "_" + interface.
func (a attachment) pinName() string { return linkPrefix + a.dir.String() + "_" + a.ifname }

const linkPrefix = "link_"

// parseLinkPin is the inverse of pinName.
func parseLinkPin(name string) (attachment, bool) {
	rest, ok := strings.CutPrefix(name, linkPrefix)
	if !ok {
		return attachment{}, false
	}
	for _, dir := range []Direction{Ingress, Egress} {
		if ifname, ok := strings.CutPrefix(rest, dir.String()+"_"); ok && ifname != "" {
			return attachment{ifname: ifname, dir: dir}, true
		}
	}
	return attachment{}, false
}

// Attach attaches the program of each direction in dir to interface ifname (in the calling
// thread's network namespace), with a TCX link (pinned, with a pin directory). Ingress runs
// first among the interface's TCX programs (the carrier goes before anything else reads the
// packet), egress last (replies are rewritten after everything else has seen them). A direction
// already attached is no change; a link left attached to a deleted interface of that name is
// replaced. ifname must be an Ethernet interface.
func (d *Datapath) Attach(ifname string, dir Direction) error {
	if dir&^Both != 0 || dir == 0 {
		return fmt.Errorf("dsr: attach to %s: direction %d is none of ingress, egress, both", ifname, dir)
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("dsr: attach to %s: %w", ifname, err)
	}
	if len(iface.HardwareAddr) != 6 {
		return fmt.Errorf("dsr: attach to %s: not an Ethernet interface (the programs read an Ethernet header)", ifname)
	}
	for _, one := range each(dir) {
		a := attachment{ifname: ifname, dir: one}
		if l, ok := d.links[a]; ok {
			if attachedTo(l, a, iface.Index) {
				continue
			}
			// The interface of that name was deleted (a Pod's veth) and created again: the
			// old link serves nothing.
			if err := d.Detach(ifname, one); err != nil {
				return fmt.Errorf("dsr: attach %s: replace the link of a deleted interface of that name: %w", a, err)
			}
		}
		var anchor link.Anchor = link.Tail()
		if one == Ingress {
			anchor = link.Head()
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: d.Program(one), Attach: attachType(one), Anchor: anchor})
		if err != nil {
			return fmt.Errorf("dsr: attach %s: %w", a, err)
		}
		if d.pin != "" {
			if err := l.Pin(filepath.Join(d.pin, a.pinName())); err != nil {
				l.Close()
				return fmt.Errorf("dsr: pin link %s: %w", a, err)
			}
		}
		d.links[a] = l
	}
	// The node's addresses, as seen where its interfaces are: ICMP errors from them about a
	// local Pod's flow are rewritten (icmp_foreign otherwise).
	return d.refreshNodeAddresses()
}

// Detach detaches the programs of each direction in dir from interface ifname, and removes
// their pins. A direction not attached is no error.
func (d *Datapath) Detach(ifname string, dir Direction) error {
	var errs []error
	for _, one := range each(dir) {
		a := attachment{ifname: ifname, dir: one}
		l, ok := d.links[a]
		if !ok {
			continue
		}
		if d.pin != "" {
			if err := os.Remove(filepath.Join(d.pin, a.pinName())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("dsr: unpin link %s: %w", a, err))
				continue
			}
		}
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("dsr: detach %s: %w", a, err))
		}
		delete(d.links, a)
	}
	return errors.Join(errs...)
}

// Interfaces returns the interfaces the programs are attached to, with the directions.
func (d *Datapath) Interfaces() map[string]Direction {
	out := map[string]Direction{}
	for a := range maps.Keys(d.links) {
		out[a.ifname] |= a.dir
	}
	return out
}

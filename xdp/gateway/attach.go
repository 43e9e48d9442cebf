// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/link"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"golang.org/x/sys/unix"
)

type linkHandle struct {
	link    link.Link
	ifindex int
}

func (d *Datapath) linkPin(ifname string) string {
	return filepath.Join(d.opts.PinPath, "links", ifname)
}

// Attach attaches the program to interface ifname through a bpf_link (pinned unless NoPin),
// facing the side role says, and lets the program redirect to it. If a link pinned by an earlier
// process exists, its program is replaced atomically: forwarding on the interface never stops.
// On an interface already attached, only the role changes.
func (d *Datapath) Attach(ifname string, mode datapath.AttachMode, role datapath.Role) error {
	switch mode {
	case "", datapath.AttachAuto, datapath.AttachNative, datapath.AttachGeneric:
	default:
		return fmt.Errorf("attach to %s: unknown attach mode %q (auto, native or generic)", ifname, mode)
	}
	if role == datapath.RoleNone || role > datapath.RoleBoth {
		return fmt.Errorf("attach to %s: role %d: want client, cluster or both", ifname, role)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("attach to %s: %w", ifname, err)
	}
	if iface.Index <= 0 || iface.Index >= datapath.MaxIfindex {
		return fmt.Errorf("attach to %s: interface index %d is beyond the datapath's %d", ifname, iface.Index, datapath.MaxIfindex)
	}
	// The role first: the program must never run on the interface without it.
	if err := d.objs.IfRoles.Put(uint32(iface.Index), uint8(role)); err != nil {
		return fmt.Errorf("attach to %s: set its role %s: %w", ifname, role, err)
	}
	if _, ok := d.links[ifname]; ok {
		// A flow record made on the interface under its old role must not be replayed.
		return d.invalidateCaches()
	}
	if !d.opts.NoPin {
		// The table first: once the link runs our program, its tail calls need it pinned.
		if err := d.pinProgs(); err != nil {
			return fmt.Errorf("attach to %s: %w", ifname, err)
		}
	}
	l, err := d.attachLink(iface, mode)
	if err != nil {
		if !d.opts.NoPin {
			d.unpinIdleProgs()
		}
		return err
	}
	idx := uint32(iface.Index)
	if err := d.objs.TxPorts.Put(idx, idx); err != nil {
		l.Close() // a pinned link stays; the next Attach adopts it
		return fmt.Errorf("attach to %s: add to tx_ports: %w", ifname, err)
	}
	d.links[ifname] = linkHandle{link: l, ifindex: iface.Index}
	if !d.opts.NoPin {
		d.unpinIdleProgs()
	}
	// Cached next hops may name interfaces that changed.
	return d.invalidateCaches()
}

// attachLink runs the program on iface: through the link pinned for it, whose program it
// replaces, else through a new link, pinned unless NoPin.
func (d *Datapath) attachLink(iface *net.Interface, mode datapath.AttachMode) (link.Link, error) {
	ifname := iface.Name
	if !d.opts.NoPin {
		l, err := d.adoptPinnedLink(ifname, iface.Index)
		if err != nil || l != nil {
			return l, err
		}
	}
	l, err := d.attachNew(iface, mode)
	if err != nil {
		return nil, err
	}
	if !d.opts.NoPin {
		if err := os.MkdirAll(filepath.Dir(d.linkPin(ifname)), 0o700); err != nil {
			l.Close()
			return nil, fmt.Errorf("attach to %s: %w", ifname, err)
		}
		if err := l.Pin(d.linkPin(ifname)); err != nil {
			l.Close()
			return nil, fmt.Errorf("attach to %s: pin link: %w", ifname, err)
		}
	}
	return l, nil
}

// adoptPinnedLink replaces the program of the link pinned for ifname, if there is one, and
// returns it. A stale pin (its interface was deleted and maybe recreated: the link is severed or
// points at another ifindex) is removed, and nil is returned so the caller attaches afresh.
func (d *Datapath) adoptPinnedLink(ifname string, ifindex int) (link.Link, error) {
	pinned, err := link.LoadPinnedLink(d.linkPin(ifname), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("attach to %s: load pinned link: %w", ifname, err)
	}
	stale := false
	if info, err := pinned.Info(); err != nil {
		stale = true
	} else if x := info.XDP(); x == nil || int(x.Ifindex) != ifindex {
		stale = true
	}
	if !stale {
		err := pinned.Update(d.objs.XlbXdp)
		if err == nil {
			return pinned, nil
		}
		if !errors.Is(err, unix.ENOLINK) {
			pinned.Close()
			return nil, fmt.Errorf("attach to %s: replace program of pinned link: %w", ifname, err)
		}
	}
	d.log.Warn("removing stale pinned XDP link (its interface was recreated)", "interface", ifname)
	if err := pinned.Unpin(); err != nil {
		pinned.Close()
		return nil, fmt.Errorf("attach to %s: remove stale pinned link: %w", ifname, err)
	}
	pinned.Close()
	return nil, nil
}

func (d *Datapath) attachNew(iface *net.Interface, mode datapath.AttachMode) (link.Link, error) {
	opts := link.XDPOptions{Program: d.objs.XlbXdp, Interface: iface.Index}
	switch mode {
	case datapath.AttachGeneric:
		if err := genericModeSafe(iface.Name); err != nil {
			return nil, fmt.Errorf("attach to %s: %w", iface.Name, err)
		}
		opts.Flags = link.XDPGenericMode
	default:
		opts.Flags = link.XDPDriverMode
	}
	l, err := link.AttachXDP(opts)
	if err != nil && (mode == datapath.AttachAuto || mode == "") {
		if gerr := genericModeSafe(iface.Name); gerr != nil {
			return nil, fmt.Errorf("attach to %s: native XDP refused (%w), and %w", iface.Name, err, gerr)
		}
		d.log.Warn("native XDP refused, falling back to generic mode (slower)",
			"interface", iface.Name, "error", err)
		opts.Flags = link.XDPGenericMode
		l, err = link.AttachXDP(opts)
	}
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", iface.Name, err)
	}
	return l, nil
}

// Detach detaches the program from ifname and removes its pin.
func (d *Datapath) Detach(ifname string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.links[ifname]
	if !ok && !d.opts.NoPin {
		l, err := link.LoadPinnedLink(d.linkPin(ifname), nil)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("detach from %s: load pinned link: %w", ifname, err)
		}
		h = linkHandle{link: l, ifindex: -1}
		if iface, err := net.InterfaceByName(ifname); err == nil {
			h.ifindex = iface.Index
		}
	} else if !ok {
		return nil
	}
	delete(d.links, ifname)
	var errs []error
	// Detached explicitly: the last reference of a pinned link is released from a kernel
	// workqueue, so unpinning and closing alone can leave the program running a moment after
	// this returns.
	if err := h.link.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
		errs = append(errs, fmt.Errorf("detach from %s: %w", ifname, err))
	}
	if !d.opts.NoPin {
		if err := h.link.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("detach from %s: unpin: %w", ifname, err))
		}
	}
	if err := h.link.Close(); err != nil {
		errs = append(errs, fmt.Errorf("detach from %s: %w", ifname, err))
	}
	if !d.opts.NoPin {
		d.unpinIdleProgs()
	}
	if h.ifindex > 0 {
		_ = d.objs.TxPorts.Delete(uint32(h.ifindex))
		if h.ifindex < datapath.MaxIfindex {
			_ = d.objs.IfRoles.Put(uint32(h.ifindex), uint8(datapath.RoleNone))
		}
	}
	if err := d.invalidateCaches(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Interfaces lists the interfaces the program is attached to by this Datapath or pinned links.
func (d *Datapath) Interfaces() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	for name := range d.links {
		seen[name] = true
	}
	if !d.opts.NoPin {
		names, err := d.pinnedLinks()
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			seen[n] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	return out, nil
}

func (d *Datapath) pinnedLinks() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.opts.PinPath, "links"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pinned links: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// pinnedLink is a link pinned under a pin path's links directory, named for its interface.
type pinnedLink struct {
	name string
	info *link.Info
}

// readPinnedLinks returns what the links pinned under pinPath/links are, in name order.
func readPinnedLinks(pinPath string) ([]pinnedLink, error) {
	dir := filepath.Join(pinPath, "links")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pinned links: %w", err)
	}
	var out []pinnedLink
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		l, err := link.LoadPinnedLink(path, nil) // a link has no read-only mode; only Info is called
		if err != nil {
			return nil, fmt.Errorf("open pinned link %s: %w", path, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			return nil, fmt.Errorf("pinned link %s: %w", path, err)
		}
		out = append(out, pinnedLink{e.Name(), info})
	}
	return out, nil
}

// SetIfindexRole gives the interface with index ifindex a role without attaching to it (Attach
// does both). For programs run with BPF_PROG_TEST_RUN, whose packets arrive on lo (index 1) or
// the index the run names, and for tools; RoleNone takes the role away.
func (d *Datapath) SetIfindexRole(ifindex int, role datapath.Role) error {
	if ifindex <= 0 || ifindex >= datapath.MaxIfindex || role > datapath.RoleBoth {
		return fmt.Errorf("set the role of interface %d to %s: out of range: %w", ifindex, role, datapath.ErrOutOfRange)
	}
	if err := d.objs.IfRoles.Put(uint32(ifindex), uint8(role)); err != nil {
		return fmt.Errorf("set the role of interface %d to %s: %w", ifindex, role, err)
	}
	return d.invalidateCaches()
}

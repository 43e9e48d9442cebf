// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/kernelinfo"
	"github.com/xlb-dev/xlb/xdp/linkpin"
)

// Pin names inside a pin directory: "map_" + a map's name, link pins (attachment.pinName).
const mapPrefix = "map_"

// mapNames are the maps that are pinned (budgets is not: a restart starts a fresh window).
var mapNames = []string{"services", "flows", "half_open", "frags", "stats", "ep_filter"}

// pinnedMap returns d's map of that name.
func (d *Datapath) pinnedMap(name string) *ebpf.Map {
	m := &d.objs.dsrMaps
	return map[string]*ebpf.Map{"services": m.Services, "flows": m.Flows, "half_open": m.HalfOpen, "frags": m.Frags, "stats": m.Stats, "ep_filter": m.EpFilter}[name]
}

// lock creates the pin directory and takes its lock, so that two agents on one node (a rolling
// update's surge, a second agent run by hand) never share the maps and links.
func (d *Datapath) lock() error {
	if err := os.MkdirAll(d.pin, 0o700); err != nil {
		return fmt.Errorf("dsr: pin directory: %w", err)
	}
	f, err := os.Open(d.pin)
	if err != nil {
		return fmt.Errorf("dsr: pin directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("dsr: %s is in use by another agent on this node", d.pin)
		}
		return fmt.Errorf("dsr: lock %s: %w", d.pin, err)
	}
	d.lockf = f
	return nil
}

// loadPinned loads spec on the maps pinned in d.pin (see Load), pins the maps it had to create,
// and adopts the pinned links.
func (d *Datapath) loadPinned(spec *ebpf.CollectionSpec) error {
	repl := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range repl {
			m.Close()
		}
	}()
	var fresh []string
	var notes []error
	for _, name := range mapNames {
		path := filepath.Join(d.pin, mapPrefix+name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			fresh = append(fresh, name)
			continue
		}
		if err != nil {
			return fmt.Errorf("dsr: open pinned map %s: %w (remove the pins with xlb cleanup)", path, err)
		}
		ms := spec.Maps[name]
		if err := ms.Compatible(m); err != nil {
			if (name == "flows" || name == "half_open") && m.Type() == ms.Type && m.KeySize() == ms.KeySize && m.ValueSize() == ms.ValueSize {
				nm, n, err := resize(name, m, ms)
				m.Close()
				if err != nil {
					return err
				}
				notes = append(notes, fmt.Errorf("%s resized to %d entries, %d flows copied", name, ms.MaxEntries, n))
				repl[name] = nm
			} else {
				m.Close()
				notes = append(notes, fmt.Errorf("pinned map %s replaced by an empty one (made by another build?): %w", name, err))
			}
			fresh = append(fresh, name)
			continue
		}
		repl[name] = m
	}
	if err := spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return fmt.Errorf("dsr: load programs on the pinned maps in %s: %w", d.pin, kernelinfo.VerifierHint(err))
	}
	for _, name := range fresh {
		path := filepath.Join(d.pin, mapPrefix+name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("dsr: replace pinned map %s: %w", path, err)
		}
		if err := d.pinnedMap(name).Pin(path); err != nil {
			return fmt.Errorf("dsr: pin map %s: %w", name, err)
		}
	}
	if err := d.rebuildFilter(); err != nil {
		return err
	}
	notes = append(notes, d.adoptLinks()...)
	d.replaced = errors.Join(notes...)
	return nil
}

// resize returns a new map of spec ms holding the entries of old, the pinned map name (flows
// or half_open: the same key and value), the LRU keeping the last ones written when it is
// smaller, and how many it copied. Entries the old programs write while it copies are lost: at
// worst the replies of flows that began in that instant go out unrewritten.
func resize(name string, old *ebpf.Map, ms *ebpf.MapSpec) (*ebpf.Map, int, error) {
	nm, err := ebpf.NewMap(ms)
	if err != nil {
		return nil, 0, fmt.Errorf("dsr: create %s of %d entries: %w", name, ms.MaxEntries, err)
	}
	var k dsrFlowKey
	var v dsrFlowValue
	n := 0
	it := old.Iterate()
	for it.Next(&k, &v) {
		if err := nm.Put(&k, &v); err != nil {
			nm.Close()
			return nil, 0, fmt.Errorf("dsr: copy %s into the resized map: %w", name, err)
		}
		n++
	}
	if err := it.Err(); err != nil {
		nm.Close()
		return nil, 0, fmt.Errorf("dsr: read pinned %s: %w", name, err)
	}
	return nm, n, nil
}

// adoptLinks puts the new programs into the links pinned in d.pin. A link whose interface is
// gone is unpinned (it serves nothing; Attach attaches to an interface created again under its
// name); what it did is returned.
func (d *Datapath) adoptLinks() []error {
	ents, err := os.ReadDir(d.pin)
	if err != nil {
		return []error{fmt.Errorf("read pin directory %s: %w", d.pin, err)}
	}
	var notes []error
	for _, e := range ents {
		a, ok := parseLinkPin(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(d.pin, e.Name())
		drop := func(why string) {
			notes = append(notes, fmt.Errorf("pinned link %s %s: removed", a, why))
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				notes = append(notes, fmt.Errorf("unpin %s: %w", path, err))
			}
		}
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			drop(fmt.Sprintf("cannot be opened (%v)", err))
			continue
		}
		if !attached(l, a) {
			l.Close()
			drop("is attached to no interface (it was deleted)")
			continue
		}
		if err := l.Update(d.Program(a.dir)); err != nil {
			l.Close()
			notes = append(notes, fmt.Errorf("pinned link %s: replace its program: %w (it keeps the old one)", a, err))
			continue
		}
		d.links[a] = l
	}
	return notes
}

// attached reports whether TCX link l is still attached to an interface (a link whose
// interface was deleted stays, defunct, with ifindex 0) in a's direction. The interface's name
// is not looked up: the pin's name says what it was when attached, and the caller may be in
// another network namespace than the interface.
func attached(l link.Link, a attachment) bool { return attachedTo(l, a, 0) }

// attachedTo reports whether TCX link l is attached in a's direction to the interface of index
// ifindex (0: to any interface).
func attachedTo(l link.Link, a attachment, ifindex int) bool {
	info, err := l.Info()
	if err != nil || info.TCX() == nil {
		return false
	}
	t := info.TCX()
	return t.Ifindex != 0 && (ifindex == 0 || int(t.Ifindex) == ifindex) && ebpf.AttachType(t.AttachType) == attachType(a.dir)
}

// HasPins reports whether dir holds pins of direct server return's node side: a link pin of a
// direction, or a map pin only it makes (flows, half_open, frags, ep_filter). Its services and
// stats maps are pinned under the same names as the socket load balancer's (xdp/socklb): those
// alone do not tell the two apart.
func HasPins(dir string) bool {
	for _, n := range pinFiles(dir) {
		if strings.HasPrefix(n, linkPrefix) {
			return true // pinFiles lists only the link pins of a direction
		}
		switch strings.TrimPrefix(n, mapPrefix) {
		case "flows", "half_open", "frags", "ep_filter":
			return true
		}
	}
	return false
}

// pinFiles lists the pins in dir, links first (the programs are detached before their maps go).
func pinFiles(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var links, maps []string
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), linkPrefix):
			if _, ok := parseLinkPin(e.Name()); ok {
				links = append(links, e.Name())
			}
		case strings.HasPrefix(e.Name(), mapPrefix):
			maps = append(maps, e.Name())
		}
	}
	return append(links, maps...)
}

// removePins removes the pins in dir, links first, and then dir itself when nothing else is in
// it; missing pins are no error.
func removePins(dir string) error {
	var errs []error
	for _, n := range pinFiles(dir) {
		if strings.HasPrefix(n, linkPrefix) {
			// Detached before unpinned: the program stops before this returns.
			if err := linkpin.Remove(filepath.Join(dir, n)); err != nil {
				errs = append(errs, fmt.Errorf("dsr: %w", err))
			}
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("dsr: unpin %s: %w", n, err))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("dsr: remove %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// RemovePinned detaches and deletes what a node side of direct server return pinned in dir
// (xlb cleanup), and dir. Nothing pinned there is no error.
func RemovePinned(dir string) error {
	if !HasPins(dir) {
		return nil
	}
	return removePins(dir)
}

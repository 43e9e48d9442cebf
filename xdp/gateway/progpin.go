// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf"
)

// The attached program (xlb_xdp) reaches the full path, and that the ICMP program, by tail calls
// through the map progs. The kernel empties a program array when its last user reference goes (a
// file descriptor or a pin), which breaks the cycle of programs holding the maps that hold them;
// so a table only filled by a process would be empty as soon as that process exits, and the
// pinned links would go on running a program whose tail calls all fail. Each generation of
// programs therefore pins its own table, as PinPath/progs/<id of its xlb_xdp>, before a pinned
// link is switched to it, and a table is unpinned once no pinned link runs its generation (links
// are switched one interface at a time, so the previous generation's table outlives the first
// switch). Load's lock of the pin directory keeps other processes out meanwhile.

// progsDir is the directory of the pinned tail-call tables.
func (d *Datapath) progsDir() string { return filepath.Join(d.opts.PinPath, "progs") }

// progsPin is where this Datapath's tail-call table is pinned.
func (d *Datapath) progsPin() (string, error) {
	info, err := d.objs.XlbXdp.Info()
	if err != nil {
		return "", fmt.Errorf("program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return "", errors.New("the kernel gives no program id")
	}
	return filepath.Join(d.progsDir(), strconv.FormatUint(uint64(id), 10)), nil
}

// pinProgs pins this Datapath's tail-call table, unless it is pinned already: before a pinned
// link runs our program, so that the table outlives this process however it ends.
func (d *Datapath) pinProgs() error {
	path, err := d.progsPin()
	if err != nil {
		return fmt.Errorf("pin tail-call table: %w", err)
	}
	if err := os.MkdirAll(d.progsDir(), 0o700); err != nil {
		return fmt.Errorf("pin tail-call table: %w", err)
	}
	return d.pinProgsAt(path)
}

// unpinIdleProgs unpins the tail-call tables of the generations (ours included) that no pinned
// link runs. When it cannot tell what the links run, it keeps them all (a table pinned too long,
// never one too short) and says so.
func (d *Datapath) unpinIdleProgs() {
	running, err := d.pinnedLinkPrograms()
	if err != nil {
		d.log.Warn("kept every pinned tail-call table", "error", err)
		return
	}
	dir := d.progsDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("kept every pinned tail-call table", "error", err)
		}
		return
	}
	left := 0
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || running[uint32(id)] {
			left++
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			d.log.Warn("could not unpin the tail-call table of a program no link runs", "program", id, "error", err)
			left++
			continue
		}
		d.log.Info("unpinned the tail-call table of a program no link runs any more", "program", id)
	}
	if left == 0 {
		_ = os.Remove(dir)
	}
}

// pinProgsAt pins this Datapath's tail-call table at path, unless it is pinned there already. A
// table of another generation found there (a process died between switching its links and
// unpinning, and the id of that generation's program was given to ours) is replaced.
func (d *Datapath) pinProgsAt(path string) error {
	if m, err := ebpf.LoadPinnedMap(path, nil); err == nil {
		same, err := sameMap(m, d.objs.Progs)
		m.Close()
		if err != nil {
			return fmt.Errorf("pin tail-call table: %w", err)
		}
		if same {
			return nil
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("replace the tail-call table pinned at %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pin tail-call table: read %s: %w", path, err)
	}
	// Forget an earlier pin of ours that someone removed: Pin does nothing for a path it recorded.
	if err := d.objs.Progs.Unpin(); err != nil {
		return fmt.Errorf("pin tail-call table: %w", err)
	}
	if err := d.objs.Progs.Pin(path); err != nil {
		return fmt.Errorf("pin tail-call table at %s: %w", path, err)
	}
	return nil
}

// sameMap reports whether a and b are the same kernel map.
func sameMap(a, b *ebpf.Map) (bool, error) {
	ia, err := a.Info()
	if err != nil {
		return false, fmt.Errorf("map info: %w", err)
	}
	ib, err := b.Info()
	if err != nil {
		return false, fmt.Errorf("map info: %w", err)
	}
	ida, oka := ia.ID()
	idb, okb := ib.ID()
	if !oka || !okb {
		return false, errors.New("the kernel gives no map id")
	}
	return ida == idb, nil
}

// pinnedLinkPrograms returns the ids of the programs that the links pinned under PinPath run.
func (d *Datapath) pinnedLinkPrograms() (map[uint32]bool, error) {
	links, err := readPinnedLinks(d.opts.PinPath)
	if err != nil {
		return nil, err
	}
	ids := map[uint32]bool{}
	for _, l := range links {
		ids[uint32(l.info.Program)] = true
	}
	return ids, nil
}

// stagePrograms returns the program of each index of the tail-call table, as bpf/maps.h fills it.
func (d *Datapath) stagePrograms() map[uint32]*ebpf.Program {
	p := &d.objs.xlbPrograms
	return map[uint32]*ebpf.Program{
		progFull4: p.XlbFull4, progFull6: p.XlbFull6, progDSR: p.XlbDsr,
		progTooBigClient: p.XlbTooBigClient, progTooBigBackend: p.XlbTooBigBackend,
		progICMP4: p.XlbIcmp4, progICMP6: p.XlbIcmp6, progNew4: p.XlbNew4, progNew6: p.XlbNew6,
		progReply4: p.XlbReply4, progReply6: p.XlbReply6, progEgress4: p.XlbEgress4, progEgress6: p.XlbEgress6,
	}
}

// checkProgs checks that the tail-call table holds every stage at its index: the object fills
// it at load (bpf/maps.h), and a stage missing would pass its packets untouched.
func (d *Datapath) checkProgs() error {
	for idx, want := range d.stagePrograms() {
		var id uint32
		if err := d.objs.Progs.Lookup(idx, &id); err != nil {
			return fmt.Errorf("tail-call table: stage %d: %w", idx, err)
		}
		info, err := want.Info()
		if err != nil {
			return fmt.Errorf("tail-call table: stage %d: program info: %w", idx, err)
		}
		if wid, ok := info.ID(); !ok || uint32(wid) != id {
			return fmt.Errorf("tail-call table: stage %d holds program %d, want %s (%d)", idx, id, info.Name, wid)
		}
	}
	return nil
}

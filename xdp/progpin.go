package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf/link"
)

// The attached program (xlb_xdp) reaches the full path, and that the ICMP program, by tail calls
// through the map progs. The kernel empties a program array when its last user reference goes (a
// file descriptor or a pin), which breaks the cycle of programs holding the maps that hold them;
// so a table only filled by a process would be empty as soon as that process exits, and the
// pinned links would go on running a program whose tail calls all fail. Each generation of
// programs therefore pins its own table, as PinPath/progs/<id of its xlb_xdp>, once it is attached
// through a pinned link. A table is unpinned when no pinned link runs its generation any more
// (links are switched one interface at a time, so the previous generation's table must outlive
// the first switch).

// progsDir is the directory of the pinned tail-call tables.
func (d *Datapath) progsDir() string { return filepath.Join(d.opts.PinPath, "progs") }

// syncProgsPins pins this Datapath's tail-call table, unless it is pinned already, and unpins
// those of generations that no pinned link runs. Callers hold d.mu.
func (d *Datapath) syncProgsPins() error {
	info, err := d.objs.XlbXdp.Info()
	if err != nil {
		return fmt.Errorf("pin tail-call table: program info: %w", err)
	}
	ours, ok := info.ID()
	if !ok {
		return errors.New("pin tail-call table: the kernel gives no program id")
	}
	dir := d.progsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin tail-call table: %w", err)
	}
	path := filepath.Join(dir, strconv.FormatUint(uint64(ours), 10))
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := d.objs.Progs.Pin(path); err != nil {
			return fmt.Errorf("pin tail-call table at %s: %w", path, err)
		}
	}
	running, err := d.pinnedLinkPrograms()
	if err != nil {
		// Unsure what runs: keep every table (one stays pinned too long, none too short).
		d.log.Warn("kept the pinned tail-call tables of earlier programs", "error", err)
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list pinned tail-call tables: %w", err)
	}
	var errs []error
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || uint32(id) == uint32(ours) || running[uint32(id)] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("unpin the tail-call table of program %d: %w", id, err))
		} else {
			d.log.Info("unpinned the tail-call table of a program no link runs any more", "program", id)
		}
	}
	return errors.Join(errs...)
}

// pinnedLinkPrograms returns the ids of the programs that the links pinned under PinPath run.
func (d *Datapath) pinnedLinkPrograms() (map[uint32]bool, error) {
	names, err := d.pinnedLinks()
	if err != nil {
		return nil, err
	}
	ids := map[uint32]bool{}
	for _, name := range names {
		l, err := link.LoadPinnedLink(d.linkPin(name), nil)
		if err != nil {
			return nil, fmt.Errorf("load pinned link of %s: %w", name, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			return nil, fmt.Errorf("pinned link of %s: %w", name, err)
		}
		ids[uint32(info.Program)] = true
	}
	return ids, nil
}

// removeProgsPins unpins every tail-call table (Remove: nothing runs any more).
func (d *Datapath) removeProgsPins() error {
	dir := d.progsDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list pinned tail-call tables: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("unpin tail-call table: %w", err))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

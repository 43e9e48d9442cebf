package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// Pinned is a read-only view of the state a datapath pinned under a directory: its VIPs,
// backends, Maglev tables, reverse NAT entries, conntrack and counters, as the program attached
// there sees them. It loads no program, starts nothing and writes nothing (the maps are opened
// read-only), so it may be used beside a running daemon, or while none runs and the pinned
// program forwards on its own. Open one with [OpenPinned].
type Pinned struct {
	// d holds the pinned maps in its objs and answers the reads; it has no program, no links and
	// no clock, and never leaves this type, whose methods only read.
	d *Datapath
}

// pinnedState lists the maps a Pinned reads, by name, with where they go.
func pinnedState(m *xlbMaps) map[string]**ebpf.Map {
	return map[string]**ebpf.Map{
		xlbMapVips:         &m.Vips,
		xlbMapVipById:      &m.VipById,
		xlbMapMaglevSlots:  &m.MaglevSlots,
		xlbMapBackends:     &m.Backends,
		xlbMapReverse:      &m.Reverse,
		xlbMapConntrack:    &m.Conntrack,
		xlbMapSrcRanges:    &m.SrcRanges,
		xlbMapVipStats:     &m.VipStats,
		xlbMapBackendStats: &m.BackendStats,
		xlbMapReasons:      &m.Reasons,
	}
}

// sizedByOptions are the pinned maps whose size comes from Options (ConntrackSize,
// MaglevSlots): any size is read. Every other map's size is fixed by the build (the reasons
// map's is the number of counters, which builds add to).
var sizedByOptions = map[string]bool{xlbMapConntrack: true, xlbMapMaglevSlots: true}

// OpenPinned opens the maps pinned under dir (an xlb PinPath, such as [DefaultPinPath])
// read-only. It fails, naming the map, when one is missing or was made by a build whose layout
// differs from this one's (its type, key or value size, or the size of a map that Options do
// not size).
func OpenPinned(dir string) (*Pinned, error) {
	spec, err := loadXlb()
	if err != nil {
		return nil, fmt.Errorf("load the datapath's specification: %w", err)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("open pinned datapath: %w", err)
	}
	var objs xlbObjects
	for name, dst := range pinnedState(&objs.xlbMaps) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			_ = closePinned(&objs.xlbMaps)
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("open pinned datapath in %s: map %s is not pinned (no xlb datapath there, or one of another build)", dir, name)
			}
			return nil, fmt.Errorf("open pinned map %s: %w", filepath.Join(dir, name), err)
		}
		*dst = m
		ms := spec.Maps[name]
		if m.Type() != ms.Type || m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize ||
			(!sizedByOptions[name] && m.MaxEntries() != ms.MaxEntries) {
			_ = closePinned(&objs.xlbMaps)
			return nil, fmt.Errorf("pinned map %s: type %s, %d-byte keys, %d-byte values, %d entries; this build of xlb reads type %s, %d-byte keys, %d-byte values, %d entries (made by another build)",
				filepath.Join(dir, name), m.Type(), m.KeySize(), m.ValueSize(), m.MaxEntries(),
				ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries)
		}
	}
	return &Pinned{d: &Datapath{objs: objs, opts: Options{PinPath: dir}}}, nil
}

// Close closes the maps (the pins and the datapath are left as they are).
func (p *Pinned) Close() error { return closePinned(&p.d.objs.xlbMaps) }

// closePinned closes the maps of m that a Pinned opens (those not opened are nil).
func closePinned(m *xlbMaps) error {
	var errs []error
	for name, mp := range pinnedState(m) {
		if err := (*mp).Close(); err != nil {
			errs = append(errs, fmt.Errorf("close pinned map %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// VIPs returns every frontend with its configuration, as [Datapath.VIPs].
func (p *Pinned) VIPs() (map[Frontend]VIPConfig, error) { return p.d.VIPs() }

// Backends returns every backend, as [Datapath.Backends].
func (p *Pinned) Backends() (map[BackendID]Backend, error) { return p.d.Backends() }

// MaglevTables returns every VIP's Maglev table, as [Datapath.MaglevTables].
func (p *Pinned) MaglevTables() (map[VIPID][]BackendID, error) { return p.d.MaglevTables() }

// Reverses returns every reverse NAT entry, as [Datapath.Reverses].
func (p *Pinned) Reverses() (map[Endpoint]ReverseNAT, error) { return p.d.Reverses() }

// Flows returns the conntrack entries, as [Datapath.Flows].
func (p *Pinned) Flows() ([]Flow, error) { return p.d.Flows() }

// Reasons returns the verdict counters summed over CPUs, as [Datapath.Reasons].
func (p *Pinned) Reasons() (map[Reason]uint64, error) { return p.d.Reasons() }

// VIPTraffic returns a VIP's counters, as [Datapath.VIPTraffic].
func (p *Pinned) VIPTraffic(id VIPID) (Traffic, error) { return p.d.VIPTraffic(id) }

// BackendTraffic returns a backend's counters, as [Datapath.BackendTraffic].
func (p *Pinned) BackendTraffic(id BackendID) (Traffic, error) { return p.d.BackendTraffic(id) }

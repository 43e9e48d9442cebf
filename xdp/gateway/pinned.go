// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Pinned is a read-only view of the state a datapath pinned under a directory: its VIPs,
// backends, Maglev tables, reverse NAT entries, conntrack, handshake table and counters as the
// program attached there sees them, and the settings that program runs with. It loads no
// program, starts nothing and writes nothing (the pinned maps are opened read-only;
// [Pinned.Settings] reads the attached program's .rodata, which the kernel froze), so it may be
// used beside a running daemon, or while none runs and the pinned program forwards on its own.
// Open one with [OpenPinned].
type Pinned struct {
	// d holds the pinned maps in its objs and answers the reads; it has no program, no links and
	// no clock, and never leaves this type, whose methods only read.
	d *Datapath
	// hsErr is why the handshake table could not be opened (nil: d.objs.HsSlots is open).
	hsErr error
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
		xlbMapCtReverse:    &m.CtReverse,
		xlbMapSrcRanges:    &m.SrcRanges,
		xlbMapVipStats:     &m.VipStats,
		xlbMapBackendStats: &m.BackendStats,
		xlbMapReasons:      &m.Reasons,
	}
}

// sizedByOptions are the pinned maps whose size comes from Options (ConntrackSize,
// MaglevSlots): any size is read. Every other map's size is fixed by the build (the reasons
// map's is the number of counters, which builds add to).
var sizedByOptions = map[string]bool{xlbMapConntrack: true, xlbMapCtReverse: true, xlbMapMaglevSlots: true, xlbMapHsSlots: true}

// OpenPinned opens the maps pinned under dir (an xlb PinPath, such as [DefaultPinPath])
// read-only. It fails, naming the map, when one is missing or was made by a build whose layout
// differs from this one's (its type, key or value size, or the size of a map that Options do
// not size). The handshake table is the exception: a Load of another build replaces it rather
// than refusing it, so one missing or of another layout fails only [Pinned.Handshake] (and
// leaves the connections it holds out of [Pinned.Flow]).
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
		m, err := openPinnedMap(spec, dir, name)
		if err != nil {
			_ = closePinned(&objs.xlbMaps)
			return nil, err
		}
		*dst = m
	}
	p := &Pinned{d: &Datapath{objs: objs, opts: Options{PinPath: dir}}}
	p.d.objs.HsSlots, p.hsErr = openPinnedMap(spec, dir, xlbMapHsSlots)
	return p, nil
}

// openPinnedMap opens map name pinned under dir read-only, checking its layout against spec's.
func openPinnedMap(spec *ebpf.CollectionSpec, dir, name string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open pinned datapath in %s: map %s is not pinned (no xlb datapath there, or one of another build)", dir, name)
		}
		return nil, fmt.Errorf("open pinned map %s: %w", filepath.Join(dir, name), err)
	}
	ms := spec.Maps[name]
	if m.Type() != ms.Type || m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize ||
		(!sizedByOptions[name] && m.MaxEntries() != ms.MaxEntries) {
		m.Close()
		return nil, fmt.Errorf("pinned map %s: type %s, %d-byte keys, %d-byte values, %d entries; this build of xlb reads type %s, %d-byte keys, %d-byte values, %d entries (made by another build)",
			filepath.Join(dir, name), m.Type(), m.KeySize(), m.ValueSize(), m.MaxEntries(),
			ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries)
	}
	return m, nil
}

// Close closes the maps (the pins and the datapath are left as they are).
func (p *Pinned) Close() error {
	err := closePinned(&p.d.objs.xlbMaps)
	if herr := p.d.objs.HsSlots.Close(); herr != nil {
		err = errors.Join(err, fmt.Errorf("close pinned map %s: %w", xlbMapHsSlots, herr))
	}
	return err
}

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
func (p *Pinned) VIPs() (map[datapath.Frontend]datapath.VIPConfig, error) { return p.d.VIPs() }

// Backends returns every backend, as [Datapath.Backends].
func (p *Pinned) Backends() (map[datapath.BackendID]datapath.Backend, error) { return p.d.Backends() }

// MaglevTables returns every VIP's Maglev table, as [Datapath.MaglevTables].
func (p *Pinned) MaglevTables() (map[datapath.VIPID][]datapath.BackendID, error) {
	return p.d.MaglevTables()
}

// Reverses returns every reverse NAT entry, as [Datapath.Reverses].
func (p *Pinned) Reverses() (map[datapath.Endpoint]datapath.ReverseNAT, error) { return p.d.Reverses() }

// Flows returns the conntrack entries, as [Datapath.Flows].
func (p *Pinned) Flows() ([]datapath.Flow, error) { return p.d.Flows() }

// ReasonCounts returns the verdict counters summed over CPUs, as [Datapath.ReasonCounts].
func (p *Pinned) ReasonCounts() (map[Reason]uint64, error) { return p.d.ReasonCounts() }

// VIPTraffic returns a VIP's counters, as [Datapath.VIPTraffic].
func (p *Pinned) VIPTraffic(id datapath.VIPID) (datapath.Traffic, error) { return p.d.VIPTraffic(id) }

// BackendTraffic returns a backend's counters, as [Datapath.BackendTraffic].
func (p *Pinned) BackendTraffic(id datapath.BackendID) (datapath.Traffic, error) {
	return p.d.BackendTraffic(id)
}

// Flow returns the forward conntrack entry of the flow from client to vip (a frontend's address
// and port as the client sends to it), and false when conntrack holds none.
func (p *Pinned) Flow(client, vip netip.AddrPort, proto datapath.Protocol) (datapath.Flow, bool, error) {
	k, ok := wireKey(client, vip, proto)
	if !ok {
		return datapath.Flow{}, false, nil
	}
	var e xlbCtEntry
	switch err := p.d.objs.Conntrack.Lookup(&k, &e); {
	case errors.Is(err, ebpf.ErrKeyNotExist):
	case err != nil:
		return datapath.Flow{}, false, fmt.Errorf("look up the conntrack entry of %s -> %s/%s: %w", client, vip, proto, err)
	default:
		f := flowOf(k, e, monotonicNow())
		return f, !f.Reverse, nil
	}
	if p.hsErr != nil || proto != datapath.TCP {
		return datapath.Flow{}, false, nil
	}
	// A connection its handshake slot holds (Flow.InSlot). The slot depends on the seed, which
	// only the attached program knows: the table is read whole (an inspection).
	now := monotonicNow()
	var f datapath.Flow
	found := false
	err := walkHandshakes(p.d.objs.HsSlots, func(_ uint32, h *xlbHsEntry) {
		if sk, sf, ok := slotConn(h, now); ok && !found && sk == k {
			f, found = sf, true
		}
	})
	if err != nil {
		return datapath.Flow{}, false, fmt.Errorf("look up the connection of %s -> %s/%s in the handshake table: %w", client, vip, proto, err)
	}
	return f, found, nil
}

// Handshake returns the handshake table's entry of the flow from client to vip (a frontend's
// address and port as the client sends to it) of protocol proto: for TCP the backend its SYN went
// to, which its ACK and a retransmitted SYN follow while the entry is fresh; for UDP the backend
// its first datagram went to, which its second follows. It returns false when the table holds
// none (a connection the slot holds once its handshake completed is a Flow: see [Pinned.Flow]),
// and an error when the table could not be opened (see [OpenPinned]).
func (p *Pinned) Handshake(client, vip netip.AddrPort, proto datapath.Protocol) (datapath.Handshake, bool, error) {
	if p.hsErr != nil {
		return datapath.Handshake{}, false, p.hsErr
	}
	k, ok := wireKey(client, vip, proto)
	if !ok {
		return datapath.Handshake{}, false, nil
	}
	// The slot depends on the seed, which only the attached program knows: the table is read
	// whole (an inspection, not a per-packet path).
	var e xlbHsEntry
	found := false
	err := walkHandshakes(p.d.objs.HsSlots, func(_ uint32, h *xlbHsEntry) {
		if !found && h.Key == k {
			e, found = *h, true
		}
	})
	if err != nil {
		return datapath.Handshake{}, false, fmt.Errorf("look up the handshake entry of %s -> %s/%s: %w", client, vip, proto, err)
	}
	if !found {
		return datapath.Handshake{}, false, nil
	}
	now := monotonicNow()
	f := flowOf(k, xlbCtEntry{}, now)
	return datapath.Handshake{Client: f.Src, VIPAddr: f.Dst, Proto: proto, Backend: datapath.BackendID(e.BackendId),
		VIP: datapath.VIPID(e.VipId), ISN: e.Isn, Age: slotAge(e.SynTime, now)}, true, nil
}

// MaglevTable returns VIP id's Maglev table (nil if it has none), as [Datapath.MaglevTable].
func (p *Pinned) MaglevTable(id datapath.VIPID) ([]datapath.BackendID, error) {
	return p.d.MaglevTable(id)
}

// ErrNotAttached is returned by [Pinned.Settings] when no interface is attached: only an
// attached program holds the settings.
var ErrNotAttached = errors.New("no interface attached (no live link pinned)")

// Settings returns the settings the datapath pinned under the directory runs with, and the
// interface they were read through. Seed, the timeouts, NewFlowRate (over all CPUs) and NextHopCacheTTL
// are constants of the program attached through the pinned links, in its read-only data (a
// frozen map), not in any pinned map: links whose interface is gone are skipped, and live links
// attaching different programs (a restart caught half-way) are an error. The constants are found
// by name in the BTF of the program's own .rodata, so a program of another build is read
// correctly or not at all. A program without a cap or cache (0) gives a negative NewFlowRate or
// NextHopCacheTTL, as Options say it. ConntrackSize and HandshakeSize are the pinned tables'
// sizes (HandshakeSize 0 when the table cannot be read: see [Pinned.Handshake]).
func (p *Pinned) Settings() (st datapath.Settings, iface string, err error) {
	dir := filepath.Join(p.d.opts.PinPath, "links")
	links, err := readPinnedLinks(p.d.opts.PinPath)
	if err != nil {
		return st, "", fmt.Errorf("read the datapath's settings: %w", err)
	}
	var prog ebpf.ProgramID
	for _, l := range links {
		if x := l.info.XDP(); x == nil || x.Ifindex == 0 {
			continue // its interface was deleted: nothing forwards through it
		}
		switch {
		case prog == 0:
			prog, iface = l.info.Program, l.name
		case l.info.Program != prog:
			return st, "", fmt.Errorf("read the datapath's settings: interfaces %s and %s run different programs (%d, %d): a loader is attaching, try again",
				iface, l.name, prog, l.info.Program)
		}
	}
	if prog == 0 {
		return st, "", fmt.Errorf("read the datapath's settings in %s: %w", dir, ErrNotAttached)
	}
	if st, err = readSettings(prog); err != nil {
		return st, "", fmt.Errorf("program %d attached to %s: %w", prog, iface, err)
	}
	st.ConntrackSize = p.d.objs.Conntrack.MaxEntries()
	if p.hsErr == nil {
		st.HandshakeSize = p.d.objs.HsSlots.MaxEntries()
	}
	return st, iface, nil
}

// readSettings reads the load-time constants of program id from its .rodata map.
func readSettings(id ebpf.ProgramID) (datapath.Settings, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return datapath.Settings{}, err
	}
	defer prog.Close()
	pinfo, err := prog.Info()
	if err != nil {
		return datapath.Settings{}, err
	}
	ids, ok := pinfo.MapIDs()
	if !ok {
		return datapath.Settings{}, errors.New("the kernel does not list a program's maps")
	}
	var errs []error
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			errs = append(errs, fmt.Errorf("open map %d: %w", mid, err))
			continue
		}
		st, found, err := settingsIn(m)
		m.Close()
		if found || err != nil {
			return st, err
		}
	}
	return datapath.Settings{}, errors.Join(append([]error{errors.New("no .rodata map found")}, errs...)...)
}

// settingsIn reads the settings from m if it is a .rodata map (found reports whether it is).
func settingsIn(m *ebpf.Map) (st datapath.Settings, found bool, err error) {
	mi, err := m.Info()
	if err != nil || !strings.HasSuffix(mi.Name, ".rodata") {
		return st, false, nil
	}
	btfID, ok := mi.BTFID()
	if !ok {
		return st, true, errors.New("its .rodata has no BTF: the constants cannot be found")
	}
	h, err := btf.NewHandleFromID(btfID)
	if err != nil {
		return st, true, fmt.Errorf("BTF of its .rodata: %w", err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return st, true, fmt.Errorf("BTF of its .rodata: %w", err)
	}
	var ds *btf.Datasec
	if err := spec.TypeByName(".rodata", &ds); err != nil {
		return st, true, fmt.Errorf("BTF of its .rodata: %w", err)
	}
	data := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), &data); err != nil {
		return st, true, fmt.Errorf("read its .rodata: %w", err)
	}
	constant := func(name string, size uint32) ([]byte, error) {
		for _, v := range ds.Vars {
			if vr, ok := v.Type.(*btf.Var); ok && vr.Name == name {
				if v.Size != size || int(v.Offset+v.Size) > len(data) {
					return nil, fmt.Errorf("constant %s: %d bytes at %d of %d, want %d bytes", name, v.Size, v.Offset, len(data), size)
				}
				return data[v.Offset : v.Offset+size], nil
			}
		}
		return nil, fmt.Errorf("no constant %s in its .rodata (made by another build)", name)
	}
	var errs [6]error
	var b [6][]byte
	b[0], errs[0] = constant(xlbVarCfgHashSeed, 4)
	b[1], errs[1] = constant(xlbVarCfgTcpEstablishedNs, 8)
	b[2], errs[2] = constant(xlbVarCfgTcpClosingNs, 8)
	b[3], errs[3] = constant(xlbVarCfgUdpNs, 8)
	b[4], errs[4] = constant(xlbVarCfgNewFlowRate, 8)
	b[5], errs[5] = constant(xlbVarCfgNhCacheNs, 8)
	if err := errors.Join(errs[:]...); err != nil {
		return st, true, err
	}
	st.Seed = binary.NativeEndian.Uint32(b[0])
	st.TCPEstablishedTimeout = time.Duration(binary.NativeEndian.Uint64(b[1]))
	st.TCPClosingTimeout = time.Duration(binary.NativeEndian.Uint64(b[2]))
	st.UDPTimeout = time.Duration(binary.NativeEndian.Uint64(b[3]))
	// 0 is no cap, no cache in the program; negative in Options (whose 0 is the default).
	st.NewFlowRate = int64(min(binary.NativeEndian.Uint64(b[4]), math.MaxInt64))
	if st.NewFlowRate == 0 {
		st.NewFlowRate = -1
	}
	st.NextHopCacheTTL = time.Duration(min(binary.NativeEndian.Uint64(b[5]), math.MaxInt64))
	if st.NextHopCacheTTL == 0 {
		st.NextHopCacheTTL = -1
	}
	return st, true, nil
}

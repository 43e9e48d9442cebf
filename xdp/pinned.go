package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
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
	// spec is this build's specification: where Settings finds the load-time constants.
	spec *ebpf.CollectionSpec
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
	return &Pinned{d: &Datapath{objs: objs, opts: Options{PinPath: dir}}, spec: spec}, nil
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

// Flow returns the forward conntrack entry of the flow from client to vip (a frontend's address
// and port as the client sends to it), and false when conntrack holds none.
func (p *Pinned) Flow(client, vip netip.AddrPort, proto Protocol) (Flow, bool, error) {
	src, sfam := toWire(client.Addr())
	dst, dfam := toWire(vip.Addr())
	if sfam != dfam {
		return Flow{}, false, nil
	}
	k := xlbFlowKey{Sport: htons(client.Port()), Dport: htons(vip.Port()), Proto: uint8(proto), Family: dfam}
	k.Src.W, k.Dst.W = src.W, dst.W
	var e xlbCtEntry
	switch err := p.d.objs.Conntrack.Lookup(&k, &e); {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return Flow{}, false, nil
	case err != nil:
		return Flow{}, false, fmt.Errorf("look up the conntrack entry of %s -> %s/%s: %w", client, vip, proto, err)
	}
	f := flowOf(k, e, monotonicNow())
	return f, !f.Reverse, nil
}

// Settings are the load-time settings of an attached program (Options it was loaded with).
type Settings struct {
	// Seed is the flow-hash seed (Options.Seed).
	Seed uint32
	// TCPEstablishedTimeout, TCPClosingTimeout and UDPTimeout are the conntrack idle timeouts.
	TCPEstablishedTimeout, TCPClosingTimeout, UDPTimeout time.Duration
}

// ErrNotAttached is returned by [Pinned.Settings] when no interface is attached: only an
// attached program holds the settings.
var ErrNotAttached = errors.New("no interface attached (no link pinned)")

// Settings reads the load-time settings of the program attached through the links pinned under
// the directory (the first interface's, by name): they are constants of the program, in its
// read-only data, not in any pinned map.
func (p *Pinned) Settings() (Settings, error) {
	dir := filepath.Join(p.d.opts.PinPath, "links")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(ents) == 0 {
		return Settings{}, fmt.Errorf("read the datapath's settings: %w", ErrNotAttached)
	}
	if err != nil {
		return Settings{}, fmt.Errorf("read the datapath's settings: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	path := filepath.Join(dir, names[0])
	l, err := link.LoadPinnedLink(path, nil) // a link has no read-only mode; only Info is called
	if err != nil {
		return Settings{}, fmt.Errorf("open pinned link %s: %w", path, err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return Settings{}, fmt.Errorf("pinned link %s: %w", path, err)
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return Settings{}, fmt.Errorf("program %d of pinned link %s: %w", info.Program, path, err)
	}
	defer prog.Close()
	rodata, err := p.readRodata(prog)
	if err != nil {
		return Settings{}, fmt.Errorf("program %d of pinned link %s: %w", info.Program, path, err)
	}
	u32 := func(name string) (uint32, error) {
		v, err := p.variable(rodata, name, 4)
		if err != nil {
			return 0, err
		}
		return binary.NativeEndian.Uint32(v), nil
	}
	dur := func(name string) (time.Duration, error) {
		v, err := p.variable(rodata, name, 8)
		if err != nil {
			return 0, err
		}
		return time.Duration(binary.NativeEndian.Uint64(v)), nil
	}
	var st Settings
	var errs [4]error
	st.Seed, errs[0] = u32(xlbVarCfgHashSeed)
	st.TCPEstablishedTimeout, errs[1] = dur(xlbVarCfgTcpEstablishedNs)
	st.TCPClosingTimeout, errs[2] = dur(xlbVarCfgTcpClosingNs)
	st.UDPTimeout, errs[3] = dur(xlbVarCfgUdpNs)
	if err := errors.Join(errs[:]...); err != nil {
		return Settings{}, fmt.Errorf("program %d of pinned link %s: %w", info.Program, path, err)
	}
	return st, nil
}

// readRodata returns the contents of prog's .rodata map, which must be as large as this build's.
func (p *Pinned) readRodata(prog *ebpf.Program) ([]byte, error) {
	want := p.spec.Maps[".rodata"]
	if want == nil {
		return nil, errors.New("this build has no .rodata")
	}
	pinfo, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, ok := pinfo.MapIDs()
	if !ok {
		return nil, errors.New("the kernel does not list a program's maps")
	}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // gone meanwhile, or not ours to open
		}
		mi, err := m.Info()
		if err != nil || !strings.HasSuffix(mi.Name, ".rodata") {
			m.Close()
			continue
		}
		if m.ValueSize() != want.ValueSize {
			m.Close()
			return nil, fmt.Errorf("its .rodata has %d bytes, this build's %d (made by another build)", m.ValueSize(), want.ValueSize)
		}
		b := make([]byte, m.ValueSize())
		err = m.Lookup(uint32(0), &b)
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("read its .rodata: %w", err)
		}
		return b, nil
	}
	return nil, errors.New("it has no .rodata map")
}

// variable returns the size bytes of this build's load-time constant name within rodata.
func (p *Pinned) variable(rodata []byte, name string, size uint32) ([]byte, error) {
	v := p.spec.Variables[name]
	if v == nil || v.SectionName != ".rodata" || v.Size() != size || int(v.Offset+size) > len(rodata) {
		return nil, fmt.Errorf("no %d-byte constant %s in .rodata", size, name)
	}
	return rodata[v.Offset : v.Offset+size], nil
}

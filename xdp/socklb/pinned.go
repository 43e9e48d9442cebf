package socklb

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/lb"
)

// PinnedFrontend is one frontend as a node agent's pinned maps hold it.
type PinnedFrontend struct {
	lb.Frontend
	// Endpoints take its new connections, in slot order; none: connections are refused.
	Endpoints []netip.AddrPort
	// AffinityTimeout is its sessionAffinity: ClientIP timeout (0: none).
	AffinityTimeout time.Duration
	// Incomplete says a slot was missing or another frontend's: an agent stopped inside an
	// Apply (the next agent rewrites it), or the read raced a running agent's write.
	Incomplete bool
}

// ReadPinned reads the frontends and counters of the socket load balancer pinned under dir
// (an agent's PinPath, such as [DefaultPinPath]) from its maps alone, opened read-only: it
// loads and changes nothing, so it may run beside an agent or while none runs (the pinned
// programs balance on their own). The frontends are sorted by address, port and protocol.
// Beside a running agent the maps are read one after the other: the view is not atomic.
func ReadPinned(dir string) ([]PinnedFrontend, Counters, error) {
	spec, err := loadSocklb()
	if err != nil {
		return nil, Counters{}, fmt.Errorf("socklb: %w", err)
	}
	maps := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range maps {
			m.Close()
		}
	}()
	for _, name := range []string{"services", "slots", "stats"} {
		path := filepath.Join(dir, "map_"+name)
		m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			return nil, Counters{}, fmt.Errorf("socklb: open pinned agent state in %s: map %s is not pinned (no node agent there)", dir, name)
		}
		if err != nil {
			return nil, Counters{}, fmt.Errorf("socklb: open pinned map %s: %w", path, err)
		}
		maps[name] = m
		ms := spec.Maps[name]
		if m.Type() != ms.Type || m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize || m.MaxEntries() != ms.MaxEntries {
			return nil, Counters{}, fmt.Errorf("socklb: pinned map %s: type %s, %d-byte keys, %d-byte values, %d entries; this build of xlb reads type %s, %d-byte keys, %d-byte values, %d entries (made by another build)",
				path, m.Type(), m.KeySize(), m.ValueSize(), m.MaxEntries(), ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries)
		}
	}
	var out []PinnedFrontend
	var k socklbSvcKey
	var v socklbSvcValue
	it := maps["services"].Iterate()
	for it.Next(&k, &v) {
		f := PinnedFrontend{Frontend: lb.Frontend{Addr: fromWire(k.Addr.W, k.Family), Port: htons(k.Port), Proto: lb.Protocol(k.Proto)},
			Endpoints: []netip.AddrPort{}, AffinityTimeout: time.Duration(v.AffinitySecs) * time.Second}
		for i := range v.Count {
			var sv socklbSlotValue
			if err := maps["slots"].Lookup(&socklbSlotKey{Id: v.Id, Slot: i}, &sv); err != nil || sv.Front != k {
				f.Incomplete = true
				break
			}
			f.Endpoints = append(f.Endpoints, netip.AddrPortFrom(fromWire(sv.Ep.Addr.W, sv.Ep.Family), htons(sv.Ep.Port)))
		}
		out = append(out, f)
	}
	if err := it.Err(); err != nil {
		return nil, Counters{}, fmt.Errorf("socklb: read pinned frontends: %w", err)
	}
	slices.SortFunc(out, func(a, b PinnedFrontend) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		return int(a.Proto) - int(b.Proto)
	})
	c, err := readCounters(maps["stats"])
	if err != nil {
		return nil, Counters{}, err
	}
	return out, c, nil
}

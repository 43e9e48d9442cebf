// SPDX-License-Identifier: Apache-2.0
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
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// PinnedFrontend is one frontend as a node agent's pinned maps hold it.
type PinnedFrontend struct {
	datapath.Frontend
	// Endpoints take its new connections, in slot order; none (and no Missing): connections
	// are refused.
	Endpoints []netip.AddrPort
	// AffinityTimeout is its sessionAffinity: ClientIP timeout (0: none).
	AffinityTimeout time.Duration
	// Missing counts its slots that were missing or another frontend's: the read raced an
	// agent's update (read again), or the maps were changed by something else than an agent.
	// A connection that picks one is refused (the no_slot counter).
	Missing int
}

// PinnedAgent is what a node agent's pins hold.
type PinnedAgent struct {
	// Frontends are sorted by address, port and protocol.
	Frontends []PinnedFrontend
	// Counters are the programs' counters.
	Counters datapath.SocketCounters
	// Attached counts the programs whose links are pinned, of Hooks: fewer means part of the
	// balancing is detached (a cleanup stopped half-way), and the frontends are not all served.
	Attached, Hooks int
}

// ReadPinned reads the socket load balancer pinned under dir (an agent's PinPath, such as
// [DefaultPinPath]) from its pins alone, the maps opened read-only: it loads and changes
// nothing, so it may run beside an agent or while none runs (the pinned programs balance on
// their own). Beside a running agent the maps are read one after the other: the view is not
// atomic, but lists each frontend once.
func ReadPinned(dir string) (PinnedAgent, error) {
	if dir == "" {
		return PinnedAgent{}, errors.New("socklb: read pinned agent state: no directory (an agent run with --pin-path \"\" pins nothing)")
	}
	spec, err := loadSocklb()
	if err != nil {
		return PinnedAgent{}, fmt.Errorf("socklb: %w", err)
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
			return PinnedAgent{}, fmt.Errorf("socklb: read pinned agent state in %s: map %s is not pinned (no pinned node agent there)", dir, name)
		}
		if err != nil {
			return PinnedAgent{}, fmt.Errorf("socklb: open pinned map %s: %w", path, err)
		}
		maps[name] = m
		ms := spec.Maps[name]
		if m.Type() != ms.Type || m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize || m.MaxEntries() != ms.MaxEntries {
			return PinnedAgent{}, fmt.Errorf("socklb: pinned map %s: type %s, %d-byte keys, %d-byte values, %d entries; this build of xlb reads type %s, %d-byte keys, %d-byte values, %d entries (made by another build)",
				path, m.Type(), m.KeySize(), m.ValueSize(), m.MaxEntries(), ms.Type, ms.KeySize, ms.ValueSize, ms.MaxEntries)
		}
	}
	var pa PinnedAgent
	for _, h := range (&Datapath{}).hooks() {
		pa.Hooks++
		if _, err := os.Lstat(filepath.Join(dir, "link_"+h.name)); err == nil {
			pa.Attached++
		}
	}
	// By frontend: a walk key by key may see an entry twice when an agent rewrites the table
	// meanwhile; the last read wins.
	byFront := map[datapath.Frontend]PinnedFrontend{}
	var k socklbSvcKey
	var v socklbSvcValue
	it := maps["services"].Iterate()
	for it.Next(&k, &v) {
		f, slots, missing := readFrontend(maps["slots"], k, v)
		eps := slices.DeleteFunc(slots, func(e netip.AddrPort) bool { return e == netip.AddrPort{} })
		byFront[f] = PinnedFrontend{Frontend: f, Endpoints: eps, Missing: missing,
			AffinityTimeout: time.Duration(v.AffinitySecs) * time.Second}
	}
	if err := it.Err(); err != nil {
		return PinnedAgent{}, fmt.Errorf("socklb: read pinned frontends: %w", err)
	}
	for _, f := range byFront {
		pa.Frontends = append(pa.Frontends, f)
	}
	slices.SortFunc(pa.Frontends, func(a, b PinnedFrontend) int { return a.Frontend.Compare(b.Frontend) })
	if pa.Counters, err = readCounters(maps["stats"]); err != nil {
		return PinnedAgent{}, err
	}
	return pa, nil
}

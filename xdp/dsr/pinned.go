// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Pinned is what a node side of direct server return's pins hold.
type Pinned struct {
	// Services are the allowed {frontend, endpoint} pairs, sorted by frontend and endpoint.
	Services []datapath.DSRService
	// Flows are the recorded flows, half-open ones included (Datapath.Flows).
	Flows []Flow
	// Counters are the programs' counters by name (Datapath.Counters).
	Counters map[string]uint64
	// Interfaces are the interfaces whose links are pinned, with their directions.
	Interfaces map[string]Direction
}

// ReadPinned reads the node side of direct server return pinned under dir (an agent's PinPath,
// such as [DefaultPinPath]) from its pins alone, the maps opened read-only: it loads and
// changes nothing, so it may run beside an agent (xlb show). Beside a running agent the view is
// not atomic.
func ReadPinned(dir string) (Pinned, error) {
	maps := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range maps {
			m.Close()
		}
	}()
	for _, name := range []string{"services", "flows", "stats"} {
		path := filepath.Join(dir, mapPrefix+name)
		m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			return Pinned{}, fmt.Errorf("dsr: read pins in %s: map %s is not pinned (no node side of direct server return there)", dir, name)
		}
		if err != nil {
			return Pinned{}, fmt.Errorf("dsr: open pinned map %s: %w", path, err)
		}
		maps[name] = m
	}
	// half_open is optional: pins of a build before it have none.
	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, mapPrefix+"half_open"), &ebpf.LoadPinOptions{ReadOnly: true}); err == nil {
		maps["half_open"] = m
	} else if !errors.Is(err, os.ErrNotExist) {
		return Pinned{}, fmt.Errorf("dsr: open pinned map %s: %w", filepath.Join(dir, mapPrefix+"half_open"), err)
	}
	spec, err := loadDsr()
	if err != nil {
		return Pinned{}, fmt.Errorf("dsr: %w", err)
	}
	for name, m := range maps {
		ms := spec.Maps[name]
		if m.Type() != ms.Type || m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize {
			return Pinned{}, fmt.Errorf("dsr: pinned map %s: type %s, %d-byte keys, %d-byte values; this build reads type %s, %d-byte keys, %d-byte values (made by another build)",
				name, m.Type(), m.KeySize(), m.ValueSize(), ms.Type, ms.KeySize, ms.ValueSize)
		}
	}
	p := Pinned{Interfaces: map[string]Direction{}}
	var k dsrDsrSvcKey
	var v uint8
	it := maps["services"].Iterate()
	for it.Next(&k, &v) {
		p.Services = append(p.Services, serviceFromKey(k))
	}
	if err := it.Err(); err != nil {
		return Pinned{}, fmt.Errorf("dsr: read pinned services: %w", err)
	}
	slices.SortFunc(p.Services, func(a, b datapath.DSRService) int {
		if c := a.Frontend.Compare(b.Frontend); c != 0 {
			return c
		}
		return a.Endpoint.Compare(b.Endpoint)
	})
	if p.Flows, err = readFlows(maps["flows"], maps["half_open"]); err != nil {
		return Pinned{}, err
	}
	if p.Counters, err = readCounters(maps["stats"]); err != nil {
		return Pinned{}, err
	}
	for _, n := range pinFiles(dir) {
		if a, ok := parseLinkPin(n); ok {
			p.Interfaces[a.ifname] |= a.dir
		}
	}
	return p, nil
}

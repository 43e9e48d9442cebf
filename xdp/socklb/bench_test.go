// SPDX-License-Identifier: Apache-2.0
package socklb

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// benchPlan is n frontends (cluster IPs in 198.18.96.0/20 and up, port 80/TCP) of 3 endpoints
// each.
func benchPlan(n int) plan {
	p := make(plan, n)
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, 96 + byte(i>>8), byte(i)})
		f := datapath.Frontend{Addr: a, Port: 80, Proto: datapath.TCP}
		var cf datapath.ConnectFrontend
		for j := range 3 {
			cf.Endpoints = append(cf.Endpoints, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), uint16(8080+j)))
		}
		p[f] = cf
	}
	return p
}

// benchDatapath loads a Datapath on a cgroup of its own (nothing runs in it).
func benchDatapath(b *testing.B) *Datapath {
	if os.Getuid() != 0 {
		b.Fatal("needs root (cgroup BPF programs)")
	}
	root, err := RootCgroup()
	if err != nil {
		b.Fatal(err)
	}
	cg := filepath.Join(root, "xlb-bench-"+netlab.Prefix())
	if err := os.Mkdir(cg, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := netlab.RemoveCgroup(cg); err != nil {
			b.Error(err)
		}
	})
	d, err := Load(Options{Cgroup: cg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

// BenchmarkApply10k: a node agent's reconcile pass with 10,000 frontends of 3 endpoints, as the
// datapath sees it (the writes and the Commit; the reconciler's diff is lb/reconcile's
// BenchmarkConnectApply10k): writing them all into empty maps (as at start), and one
// frontend's endpoint changing among them (the common case: what an EndpointSlice update costs
// once the model is built).
func BenchmarkApply10k(b *testing.B) {
	const n = 10000
	d := benchDatapath(b)
	p := benchPlan(n)
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			if ch, err := apply(d, p); err != nil || ch.set != n {
				b.Fatalf("apply: %+v, %v", ch, err)
			}
			b.StopTimer()
			if _, err := apply(d, plan{}); err != nil {
				b.Fatal(err)
			}
			if err := d.Commit(true); err != nil { // deletes the retired sets
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	if _, err := apply(d, p); err != nil {
		b.Fatal(err)
	}
	f := datapath.Frontend{Addr: netip.MustParseAddr("198.18.96.7"), Port: 80, Proto: datapath.TCP}
	orig := p[f]
	b.Run("one-change", func(b *testing.B) {
		i := 0
		for b.Loop() {
			cf := datapath.ConnectFrontend{Endpoints: append([]netip.AddrPort(nil), orig.Endpoints...)}
			cf.Endpoints[0] = netip.AddrPortFrom(cf.Endpoints[0].Addr(), uint16(9000+i%2))
			i++
			if err := d.SetConnectFrontend(f, cf); err != nil {
				b.Fatal(err)
			}
			if err := d.Commit(true); err != nil {
				b.Fatal(err)
			}
		}
	})
}

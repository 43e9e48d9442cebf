// SPDX-License-Identifier: Apache-2.0
package reconcile

import (
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The DSRReconciler's tests run against fakeDSRNode, an in-memory datapath.DSRNode: no kernel,
// no root. xdp/dsr's tests hold the real one to the contract, and cmd/xlb's agent tests run the
// whole agent on it.

// fakeDSRNode is a datapath.DSRNode in memory that records every call and fails the writes of
// the pairs in fail.
type fakeDSRNode struct {
	held map[datapath.DSRService]bool
	// ops: every write, in order: "add F -> E", "delete F -> E".
	ops []string
	// fail: pairs whose Add or Delete fails (and changes nothing); readErr fails DSRServices.
	fail    map[datapath.DSRService]bool
	readErr error
}

var _ datapath.DSRNode = (*fakeDSRNode)(nil)

func newFakeDSRNode(held ...datapath.DSRService) *fakeDSRNode {
	f := &fakeDSRNode{held: map[datapath.DSRService]bool{}, fail: map[datapath.DSRService]bool{}}
	for _, s := range held {
		f.held[s] = true
	}
	return f
}

func (f *fakeDSRNode) DSRServices() (map[datapath.DSRService]bool, error) {
	if f.readErr != nil {
		return nil, f.readErr
	}
	return maps.Clone(f.held), nil
}

func (f *fakeDSRNode) AddDSRService(s datapath.DSRService) error {
	f.ops = append(f.ops, "add "+pairString(s))
	if f.fail[s] {
		return errFake
	}
	f.held[s] = true
	return nil
}

func (f *fakeDSRNode) DeleteDSRService(s datapath.DSRService) error {
	f.ops = append(f.ops, "delete "+pairString(s))
	if f.fail[s] {
		return errFake
	}
	delete(f.held, s)
	return nil
}

func (f *fakeDSRNode) takeOps() []string {
	ops := f.ops
	f.ops = nil
	return ops
}

func pairString(s datapath.DSRService) string {
	return s.Frontend.String() + " -> " + s.Endpoint.String()
}

// pair is the pair of frontend vip (address:port, TCP) and endpoint ep.
func pair(vip, ep string) datapath.DSRService {
	f := netip.MustParseAddrPort(vip)
	return datapath.DSRService{Frontend: datapath.Frontend{Addr: f.Addr(), Port: f.Port(), Proto: datapath.TCP},
		Endpoint: netip.MustParseAddrPort(ep)}
}

func set(pairs ...datapath.DSRService) map[datapath.DSRService]bool {
	out := map[datapath.DSRService]bool{}
	for _, p := range pairs {
		out[p] = true
	}
	return out
}

// TestDSRReconciler: the reconciler adopts what the datapath holds (an earlier agent's pins),
// deletes what is no longer wanted before it adds what is new, each in order, leaves alone what
// stays, writes nothing when nothing changed, keeps a failed write's pair as it was and tries it
// again at the next Apply.
func TestDSRReconciler(t *testing.T) {
	a := pair("198.18.100.1:80", "198.18.4.2:8080")
	b := pair("198.18.100.1:80", "198.18.4.3:8080")
	c := pair("198.18.100.2:443", "198.18.4.2:8443")
	d := pair("198.18.100.0:53", "198.18.4.9:5353")
	dp := newFakeDSRNode(a, b)
	r, err := NewDSR(dp, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if r.Pairs() != 2 {
		t.Fatalf("adopted %d pairs, want the 2 held", r.Pairs())
	}
	// b stays untouched; a goes before c and d come (d sorts before c).
	want := set(b, c, d)
	want[a] = false // a false entry is not wanted
	res, err := r.Apply(want)
	if err != nil {
		t.Fatal(err)
	}
	wantOps := []string{"delete " + pairString(a), "add " + pairString(d), "add " + pairString(c)}
	if ops := dp.takeOps(); !slices.Equal(ops, wantOps) {
		t.Errorf("ops %q, want %q", ops, wantOps)
	}
	if res != (DSRResult{Added: 2, Removed: 1, Unchanged: 1}) || res.Changes() != 3 {
		t.Errorf("result %+v", res)
	}
	if !maps.Equal(dp.held, set(b, c, d)) || r.Pairs() != 3 {
		t.Errorf("the datapath holds %v", dp.held)
	}
	// Idempotent: the same pairs again write nothing.
	if res, err := r.Apply(set(b, c, d)); err != nil || res.Changes() != 0 || len(dp.takeOps()) != 0 {
		t.Errorf("a second Apply of the same pairs: %+v, %v", res, err)
	}
	// A failed add and a failed delete: reported, the rest applied, the datapath as before for
	// those two; the next Apply tries them again (and only them).
	dp.fail[a], dp.fail[c] = true, true
	res, err = r.Apply(set(a, b, d))
	if !errors.Is(err, errFake) || !strings.Contains(err.Error(), pairString(a)) || !strings.Contains(err.Error(), pairString(c)) {
		t.Errorf("Apply with two writes refused: %v", err)
	}
	if res != (DSRResult{Unchanged: 2}) || !maps.Equal(dp.held, set(b, c, d)) || r.Pairs() != 3 {
		t.Errorf("after the refused writes: %+v, the datapath holds %v", res, dp.held)
	}
	dp.takeOps()
	clear(dp.fail)
	res, err = r.Apply(set(a, b, d))
	wantOps = []string{"delete " + pairString(c), "add " + pairString(a)}
	if ops := dp.takeOps(); err != nil || !slices.Equal(ops, wantOps) || res != (DSRResult{Added: 1, Removed: 1, Unchanged: 2}) {
		t.Errorf("the retry: %+v, %v, ops %q, want %q", res, err, ops, wantOps)
	}
	// Nothing wanted: everything goes.
	if res, err := r.Apply(nil); err != nil || res.Removed != 3 || len(dp.held) != 0 || r.Pairs() != 0 {
		t.Errorf("Apply(nil): %+v, %v, held %v", res, err, dp.held)
	}
}

// TestDSRReconcilerAdoptFails: a datapath whose pairs cannot be read back gets no reconciler
// (writing blind could delete nothing it should and refuse carriers it accepted).
func TestDSRReconcilerAdoptFails(t *testing.T) {
	dp := newFakeDSRNode()
	dp.readErr = errors.New("services map gone")
	if _, err := NewDSR(dp, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "services map gone") {
		t.Errorf("NewDSR: %v, want the read's error", err)
	}
}

// SPDX-License-Identifier: Apache-2.0
package ctlplane

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// benchDatapath is the XDP datapath's maps, attached to no interface (the control-plane
// benchmarks measure the writes, not forwarding), with every write counted and each Maglev
// table's write time recorded.
type benchDatapath struct {
	*gateway.Datapath
	writes atomic.Int64

	mu sync.Mutex
	// backends: the backends written, by id; tableWritten is called after each table write.
	backends     map[datapath.BackendID]datapath.Backend
	tableWritten func(table []datapath.BackendID, backends map[datapath.BackendID]datapath.Backend, at time.Time)
}

// Attach, Detach and Interfaces: the benchmarks attach nothing.
func (b *benchDatapath) Attach(string, datapath.AttachMode, datapath.Role) error { return nil }
func (b *benchDatapath) Detach(string) error                                     { return nil }
func (b *benchDatapath) Interfaces() ([]string, error)                           { return nil, nil }

func (b *benchDatapath) UpsertVIP(f datapath.Frontend, c datapath.VIPConfig) error {
	b.writes.Add(1)
	return b.Datapath.UpsertVIP(f, c)
}

func (b *benchDatapath) DeleteVIP(f datapath.Frontend) error {
	b.writes.Add(1)
	return b.Datapath.DeleteVIP(f)
}

func (b *benchDatapath) UpsertBackend(id datapath.BackendID, be datapath.Backend) error {
	b.writes.Add(1)
	err := b.Datapath.UpsertBackend(id, be)
	if err == nil {
		b.mu.Lock()
		if b.backends == nil {
			b.backends = map[datapath.BackendID]datapath.Backend{}
		}
		b.backends[id] = be
		b.mu.Unlock()
	}
	return err
}

func (b *benchDatapath) DeleteBackend(id datapath.BackendID) error {
	b.writes.Add(1)
	return b.Datapath.DeleteBackend(id)
}

func (b *benchDatapath) SetMaglevTable(id datapath.VIPID, t []datapath.BackendID) error {
	b.writes.Add(1)
	err := b.Datapath.SetMaglevTable(id, t)
	b.mu.Lock()
	done := b.tableWritten
	bes := b.backends
	b.mu.Unlock()
	if err == nil && done != nil {
		done(t, bes, time.Now())
	}
	return err
}

func (b *benchDatapath) SetReverse(ep datapath.Endpoint, r datapath.ReverseNAT) error {
	b.writes.Add(1)
	return b.Datapath.SetReverse(ep, r)
}

func (b *benchDatapath) DeleteReverse(ep datapath.Endpoint) error {
	b.writes.Add(1)
	return b.Datapath.DeleteReverse(ep)
}

var _ datapath.Gateway = (*benchDatapath)(nil)

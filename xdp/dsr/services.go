// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// DSRServices returns the {frontend, endpoint} pairs the services map holds: what was added,
// or, after Load adopted pins, what an earlier agent left.
func (d *Datapath) DSRServices() (map[datapath.DSRService]bool, error) {
	out := map[datapath.DSRService]bool{}
	var k dsrDsrSvcKey
	var v uint8
	it := d.objs.Services.Iterate()
	for it.Next(&k, &v) {
		out[serviceFromKey(k)] = true
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("dsr: read services: %w", err)
	}
	return out, nil
}

// AddDSRService lets carriers for frontend s.Frontend be accepted on packets to endpoint
// s.Endpoint (a Pod on this node): their flows are recorded and their replies rewritten. An
// all-ports frontend (port 0) takes an endpoint of port 0: the gateway keeps the client's
// destination port. Adding a pair already held is no change.
func (d *Datapath) AddDSRService(s datapath.DSRService) error {
	k, err := serviceKey(s)
	if err != nil {
		return err
	}
	// The filter first: the moment the pair is in services, a carrier records a flow whose
	// replies must find their bit.
	if err := d.setFilterBit(s.Endpoint.Addr()); err != nil {
		return err
	}
	one := uint8(1)
	if err := d.objs.Services.Put(&k, &one); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("dsr: add %s -> %s: %d pairs held: %w", s.Frontend, s.Endpoint, MaxServices, datapath.ErrFull)
		}
		return fmt.Errorf("dsr: add %s -> %s: %w", s.Frontend, s.Endpoint, err)
	}
	return nil
}

// DeleteDSRService stops carriers for the pair from being accepted: their packets are dropped.
// The flows already recorded keep their replies rewritten until they are idle (an endpoint
// leaving a frontend finishes its connections). Deleting a pair not held is no error.
func (d *Datapath) DeleteDSRService(s datapath.DSRService) error {
	k, err := serviceKey(s)
	if err != nil {
		return err
	}
	if err := d.objs.Services.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("dsr: delete %s -> %s: %w", s.Frontend, s.Endpoint, err)
	}
	return nil
}

// serviceKey is s as the services map's key, or why it cannot be one (errors wrapping
// datapath.ErrBadAddress, ErrBadProtocol, ErrOutOfRange).
func serviceKey(s datapath.DSRService) (dsrDsrSvcKey, error) {
	var k dsrDsrSvcKey
	f, ep := s.Frontend, s.Endpoint
	if err := datapath.CheckFrontend(f); err != nil {
		return k, fmt.Errorf("dsr: %w", err)
	}
	if err := datapath.CheckAddr(ep.Addr()); err != nil {
		return k, fmt.Errorf("dsr: frontend %s: endpoint %s: %w", f, ep, err)
	}
	if f.Addr.Unmap().Is4() != ep.Addr().Unmap().Is4() {
		return k, fmt.Errorf("dsr: frontend %s: endpoint %s is of the other family: %w", f, ep, datapath.ErrBadAddress)
	}
	if (f.Port == 0) != (ep.Port() == 0) {
		return k, fmt.Errorf("dsr: frontend %s: endpoint %s: port 0 serves every port, on both sides or neither: %w", f, ep, datapath.ErrOutOfRange)
	}
	k.Vip.Addr.W, k.Vip.Family = datapath.WireAddr(f.Addr)
	k.Vip.Port, k.Vip.Proto = datapath.WirePort(f.Port), uint8(f.Proto)
	k.Ep.W, _ = datapath.WireAddr(ep.Addr())
	k.EpPort = datapath.WirePort(ep.Port())
	return k, nil
}

// serviceFromKey is the inverse of serviceKey.
func serviceFromKey(k dsrDsrSvcKey) datapath.DSRService {
	return datapath.DSRService{
		Frontend: datapath.Frontend{Addr: datapath.AddrFromWire(k.Vip.Addr.W, k.Vip.Family),
			Port: datapath.WirePort(k.Vip.Port), Proto: datapath.Protocol(k.Vip.Proto)},
		Endpoint: netip.AddrPortFrom(datapath.AddrFromWire(k.Ep.W, k.Vip.Family), datapath.WirePort(k.EpPort)),
	}
}

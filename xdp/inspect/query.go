// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// FlowQuery is the flow ExplainFlow is asked about: a client's packets to a VIP.
type FlowQuery struct {
	// Client is the client's address and port; To the address and port it sends to (a VIP's).
	// An IPv4 flow may be written with IPv4-mapped addresses; zones are refused.
	Client, To netip.AddrPort
	// Proto is TCP or UDP.
	Proto datapath.Protocol
	// Seed, when not nil, is the flow-hash seed to use instead of the attached program's (it
	// is needed when nothing is attached).
	Seed *uint32
}

// ErrSeedUnknown is returned by ExplainFlow when the query gives no seed and the attached
// program's cannot be read (nothing attached, or a program of another build).
var ErrSeedUnknown = errors.New("the flow-hash seed is unknown")

// Validate says what is wrong with q: a flow the datapath cannot see.
func (q FlowQuery) Validate() error {
	_, err := q.normalize()
	return err
}

// normalize returns q with the addresses of an IPv4 flow in IPv4 form, or what is wrong with it.
func (q FlowQuery) normalize() (FlowQuery, error) {
	if !q.Client.IsValid() || !q.To.IsValid() {
		return q, fmt.Errorf("flow %s -> %s: want a client's and a VIP's address:port", q.Client, q.To)
	}
	if q.Client.Addr().Zone() != "" || q.To.Addr().Zone() != "" {
		return q, fmt.Errorf("client %s, VIP %s: no zones: the datapath sees none", q.Client, q.To)
	}
	if !q.Proto.Valid() {
		return q, fmt.Errorf("flow %s -> %s: %s: %w", q.Client, q.To, q.Proto, datapath.ErrBadProtocol)
	}
	q.To = netip.AddrPortFrom(q.To.Addr().Unmap(), q.To.Port())
	if q.To.Addr().Is4() {
		q.Client = netip.AddrPortFrom(q.Client.Addr().Unmap(), q.Client.Port())
	}
	switch {
	case q.Client.Addr().Is4In6():
		return q, fmt.Errorf("client %s: an IPv4-mapped source of an IPv6 flow is not supported", q.Client)
	case q.Client.Addr().Is4() != q.To.Addr().Is4():
		return q, fmt.Errorf("client %s and VIP %s: one IPv4, one IPv6", q.Client, q.To)
	}
	return q, nil
}

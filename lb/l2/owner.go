// SPDX-License-Identifier: Apache-2.0
package l2

import (
	"net/netip"
	"slices"
)

// Member is one gateway as the ownership computation sees it.
type Member struct {
	// ID is the gateway's heartbeat address: its identity in the ranking, the same on every
	// gateway.
	ID netip.Addr
	// Serves are the VIPs the gateway can serve (enough healthy backends, eTP=Local honoured).
	Serves map[netip.Addr]bool
	// Claims are the VIPs the gateway says it answers for now.
	Claims map[netip.Addr]bool
}

// Rank is the rendezvous weight of gateway id for vip: the highest-ranked candidate owns the
// VIP. It depends only on the two addresses, so every gateway computes the same.
func Rank(vip, id netip.Addr) uint64 {
	var b [32]byte
	v, i := vip.As16(), id.As16()
	copy(b[:16], v[:])
	copy(b[16:], i[:])
	// FNV-1a over the 32 bytes, then a splitmix64 finaliser so that addresses differing in
	// their last byte spread over the whole range.
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// better reports whether a ranks above b for vip (ties, impossible for distinct IDs in
// practice, go to the lower address so the order is total).
func better(vip, a, b netip.Addr) bool {
	ra, rb := Rank(vip, a), Rank(vip, b)
	if ra != rb {
		return ra > rb
	}
	return a.Less(b)
}

// Owners returns, for each VIP that at least one member can serve, its owner's ID. With
// failback the owner is always the highest-ranked member that serves the VIP; without, a member
// that serves and claims it keeps it (the highest-ranked of the claimers, if several do), and
// only an unclaimed VIP goes to the highest-ranked server. The result depends only on the
// members' contents, never on their order.
func Owners(vips []netip.Addr, members []Member, failback bool) map[netip.Addr]netip.Addr {
	out := make(map[netip.Addr]netip.Addr, len(vips))
	for _, v := range vips {
		var best, bestClaim netip.Addr
		for _, m := range members {
			if !m.Serves[v] {
				continue
			}
			if !best.IsValid() || better(v, m.ID, best) {
				best = m.ID
			}
			if m.Claims[v] && (!bestClaim.IsValid() || better(v, m.ID, bestClaim)) {
				bestClaim = m.ID
			}
		}
		switch {
		case !best.IsValid():
		case !failback && bestClaim.IsValid():
			out[v] = bestClaim
		default:
			out[v] = best
		}
	}
	return out
}

// Duplicates returns the VIPs that self claims and another member claims too, sorted: during a
// partition between gateways each side owns what it believes is unowned, and after the heal
// both claim it until Owners resolves it (within a heartbeat).
func Duplicates(self netip.Addr, members []Member) []netip.Addr {
	var mine map[netip.Addr]bool
	for _, m := range members {
		if m.ID == self {
			mine = m.Claims
		}
	}
	var out []netip.Addr
	for v := range mine {
		for _, m := range members {
			if m.ID != self && m.Claims[v] {
				out = append(out, v)
				break
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

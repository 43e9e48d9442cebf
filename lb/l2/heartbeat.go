// SPDX-License-Identifier: Apache-2.0
package l2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The heartbeat's wire format, every field big-endian:
//
//	magic "XLB2" (4) | version 1 (1) | flags (1) | sequence (4) | MAC (6) |
//	name length (1) | name | serves count (2) | claims count (2) | addresses
//
// each address a family byte (4 or 6) and 4 or 16 bytes; the serves first, then the claims.
const (
	heartbeatMagic   = "XLB2"
	heartbeatVersion = 1
	// FlagReady: the sender has served at least one reconcile and may own VIPs.
	FlagReady = 1 << 0
	// MaxAddresses bounds the serves and claims of one heartbeat together: a datagram of at
	// most about 17 KiB (a gateway with more VIPs than that must announce the rest over BGP).
	MaxAddresses = 1024
	// MaxName bounds the sender's name.
	MaxName   = 63
	headerLen = 4 + 1 + 1 + 4 + 6 + 1
)

// Heartbeat is what a gateway tells its peers every interval.
type Heartbeat struct {
	Flags  uint8
	Seq    uint32
	MAC    [6]byte // the sender's MAC on the announcing interface: its answers carry it
	Name   string  // the sender's gateway name, for status
	Serves []netip.Addr
	Claims []netip.Addr
}

// Ready reports FlagReady.
func (h Heartbeat) Ready() bool { return h.Flags&FlagReady != 0 }

// Marshal encodes h; it fails on a name or an address list over the bounds.
func (h Heartbeat) Marshal() ([]byte, error) {
	if len(h.Name) > MaxName {
		return nil, fmt.Errorf("l2 heartbeat: name of %d bytes, at most %d", len(h.Name), MaxName)
	}
	if len(h.Serves)+len(h.Claims) > MaxAddresses {
		return nil, fmt.Errorf("l2 heartbeat: %d addresses, at most %d", len(h.Serves)+len(h.Claims), MaxAddresses)
	}
	b := make([]byte, 0, headerLen+len(h.Name)+4+17*(len(h.Serves)+len(h.Claims)))
	b = append(b, heartbeatMagic...)
	b = append(b, heartbeatVersion, h.Flags)
	b = binary.BigEndian.AppendUint32(b, h.Seq)
	b = append(b, h.MAC[:]...)
	b = append(b, byte(len(h.Name)))
	b = append(b, h.Name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Serves)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Claims)))
	for _, l := range [][]netip.Addr{h.Serves, h.Claims} {
		for _, a := range l {
			a = a.Unmap()
			switch {
			case a.Is4():
				b = append(b, 4)
			case a.Is6():
				b = append(b, 6)
			default:
				return nil, fmt.Errorf("l2 heartbeat: invalid address %v", a)
			}
			b = append(b, a.AsSlice()...)
		}
	}
	return b, nil
}

// ErrNotHeartbeat is returned for a datagram that is not an xlb heartbeat at all.
var ErrNotHeartbeat = errors.New("l2 heartbeat: bad magic")

// ParseHeartbeat decodes a datagram: hostile input, checked field by field; trailing bytes are
// an error.
func ParseHeartbeat(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if len(b) < headerLen {
		return h, fmt.Errorf("l2 heartbeat: %d bytes, shorter than the %d-byte header", len(b), headerLen)
	}
	if string(b[:4]) != heartbeatMagic {
		return h, ErrNotHeartbeat
	}
	if b[4] != heartbeatVersion {
		return h, fmt.Errorf("l2 heartbeat: version %d, want %d", b[4], heartbeatVersion)
	}
	h.Flags = b[5]
	h.Seq = binary.BigEndian.Uint32(b[6:10])
	copy(h.MAC[:], b[10:16])
	n := int(b[16])
	b = b[headerLen:]
	if n > MaxName || len(b) < n+4 {
		return h, fmt.Errorf("l2 heartbeat: name of %d bytes (at most %d) in %d bytes", n, MaxName, len(b))
	}
	h.Name = string(b[:n])
	for _, c := range h.Name {
		if c < 0x21 || c > 0x7e {
			return h, fmt.Errorf("l2 heartbeat: name %q is not printable ASCII", h.Name)
		}
	}
	b = b[n:]
	ns, nc := int(binary.BigEndian.Uint16(b[0:2])), int(binary.BigEndian.Uint16(b[2:4]))
	b = b[4:]
	if ns+nc > MaxAddresses {
		return h, fmt.Errorf("l2 heartbeat: %d addresses, at most %d", ns+nc, MaxAddresses)
	}
	read := func(count int) ([]netip.Addr, error) {
		out := make([]netip.Addr, 0, count)
		for range count {
			if len(b) < 1 {
				return nil, errors.New("l2 heartbeat: truncated address list")
			}
			l := 0
			switch b[0] {
			case 4:
				l = 4
			case 6:
				l = 16
			default:
				return nil, fmt.Errorf("l2 heartbeat: address family byte %d, want 4 or 6", b[0])
			}
			if len(b) < 1+l {
				return nil, errors.New("l2 heartbeat: truncated address")
			}
			a, _ := netip.AddrFromSlice(b[1 : 1+l])
			if l == 16 && a.Is4In6() {
				return nil, fmt.Errorf("l2 heartbeat: IPv4-mapped address %v", a)
			}
			out = append(out, a)
			b = b[1+l:]
		}
		return out, nil
	}
	var err error
	if h.Serves, err = read(ns); err != nil {
		return h, err
	}
	if h.Claims, err = read(nc); err != nil {
		return h, err
	}
	if len(b) != 0 {
		return h, fmt.Errorf("l2 heartbeat: %d trailing bytes", len(b))
	}
	return h, nil
}

// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"net/netip"
	"structs"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// wireAddr is struct addr (datapath.h): the address bytes as stored in BPF keys.
type wireAddr = struct {
	_ structs.HostLayout
	W [4]uint32
}

func toWire(a netip.Addr) (wireAddr, uint8) {
	w, fam := datapath.WireAddr(a)
	return wireAddr{W: w}, fam
}

func fromWire(w wireAddr, family uint8) netip.Addr { return datapath.AddrFromWire(w.W, family) }

// htons/ntohs convert ports between host order and the network order BPF keys hold.
func htons(p uint16) uint16 { return datapath.WirePort(p) }

func ntohs(p uint16) uint16 { return datapath.WirePort(p) }

func svcKey(a netip.Addr, port uint16, proto datapath.Protocol) xlbSvcKey {
	w, fam := toWire(a)
	return xlbSvcKey{Addr: w, Port: htons(port), Proto: uint8(proto), Family: fam}
}

func markerKey(a netip.Addr) xlbSvcKey {
	w, fam := toWire(a)
	return xlbSvcKey{Addr: w, Family: fam}
}

// nativeU32 returns the u32 whose memory bytes are b.
func nativeU32(b [4]byte) uint32 { return binary.NativeEndian.Uint32(b[:]) }

// nativeBytes returns the memory bytes of v.
func nativeBytes(v uint32) [4]byte {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return b
}

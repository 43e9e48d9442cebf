package xdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"structs"
)

// wireAddr is struct addr: the address bytes as stored in BPF keys (IPv4 in the first 4).
type wireAddr = struct {
	_ structs.HostLayout
	W [4]uint32
}

func toWire(a netip.Addr) (wireAddr, uint8) {
	var w wireAddr
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		w.W[0] = binary.NativeEndian.Uint32(b[:])
		return w, familyV4
	}
	b := a.As16()
	for i := range 4 {
		w.W[i] = binary.NativeEndian.Uint32(b[i*4:])
	}
	return w, familyV6
}

func fromWire(w wireAddr, family uint8) netip.Addr {
	var b [16]byte
	for i := range 4 {
		binary.NativeEndian.PutUint32(b[i*4:], w.W[i])
	}
	if family == familyV4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// htons/ntohs convert ports between host order and the network order BPF keys hold.
func htons(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func ntohs(p uint16) uint16 { return htons(p) }

func svcKey(a netip.Addr, port uint16, proto Protocol) xlbSvcKey {
	w, fam := toWire(a)
	return xlbSvcKey{Addr: w, Port: htons(port), Proto: uint8(proto), Family: fam}
}

func markerKey(a netip.Addr) xlbSvcKey {
	w, fam := toWire(a)
	return xlbSvcKey{Addr: w, Family: fam}
}

func checkAddr(a netip.Addr) error {
	if !a.IsValid() {
		return fmt.Errorf("no address")
	}
	if a.Zone() != "" {
		return fmt.Errorf("address %s has a zone", a)
	}
	return nil
}

// nativeU32 returns the u32 whose memory bytes are b.
func nativeU32(b [4]byte) uint32 { return binary.NativeEndian.Uint32(b[:]) }

// nativeBytes returns the memory bytes of v.
func nativeBytes(v uint32) [4]byte {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return b
}

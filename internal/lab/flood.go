// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"golang.org/x/sys/unix"
)

// FloodKind is what a flood sends.
type FloodKind int

const (
	// FloodSYN sends TCP SYNs from random sources and ports: new connections.
	FloodSYN FloodKind = iota
	// FloodACK sends bare TCP ACKs of random tuples: mid-flow packets of flows nobody opened.
	FloodACK
	// FloodUDP sends UDP datagrams of random tuples: each a new flow.
	FloodUDP
	// FloodFirstFrag sends IPv4 first fragments (more fragments set, offset 0) of UDP
	// datagrams with random IP ids whose other fragments never come.
	FloodFirstFrag
)

func (k FloodKind) String() string {
	switch k {
	case FloodSYN:
		return "syn"
	case FloodACK:
		return "ack"
	case FloodUDP:
		return "udp"
	case FloodFirstFrag:
		return "first-fragment"
	}
	return fmt.Sprintf("FloodKind(%d)", int(k))
}

// Flood is a rate-paced stream of forged IPv4 packets written whole (AF_PACKET) out of one
// interface of a lab namespace. It is bounded in count and in time: it stops at Count packets,
// after Duration, or when its context ends, whichever comes first.
type Flood struct {
	Kind FloodKind
	// NS and Ifname are where the frames leave; SrcMAC and DstMAC their Ethernet addresses
	// (the interface's own, its peer's).
	NS             *netlab.NS
	Ifname         string
	SrcMAC, DstMAC net.HardwareAddr
	// Sources are the packets' source addresses, chosen at random (IPv4; lab addresses only,
	// routed back to a namespace that drops them, so replies go nowhere).
	Sources netip.Prefix
	// Targets are the destinations, taken in turn (IPv4 VIP:port).
	Targets []netip.AddrPort
	// Rate is the packets per second aimed at (required); Count and Duration bound the flood
	// (both required).
	Rate     int
	Count    int
	Duration time.Duration
}

// FloodResult is what a flood did.
type FloodResult struct {
	Sent int           // frames written
	Took time.Duration // from the first frame to the end
}

// Rate is the achieved rate, packets per second.
func (r FloodResult) Rate() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Took.Seconds()
}

// Run sends the flood and returns when it is done. It paces itself every millisecond (at most
// Rate/1000+1 frames at a time), never faster than Rate over the whole run; when the machine
// cannot keep up it sends what it can (Result.Rate says how much).
func (f *Flood) Run(ctx context.Context) (FloodResult, error) {
	switch {
	case f.Rate <= 0 || f.Count <= 0 || f.Duration <= 0:
		return FloodResult{}, fmt.Errorf("flood %s: rate %d, count %d, duration %v: each must be positive", f.Kind, f.Rate, f.Count, f.Duration)
	case len(f.Targets) == 0:
		return FloodResult{}, fmt.Errorf("flood %s: no targets", f.Kind)
	case !f.Sources.Addr().Is4() || f.Sources.Bits() > 30:
		return FloodResult{}, fmt.Errorf("flood %s: sources %s: want an IPv4 prefix of at least 4 addresses", f.Kind, f.Sources)
	}
	for _, t := range f.Targets {
		if !t.Addr().Is4() {
			return FloodResult{}, fmt.Errorf("flood %s: target %s: IPv4 only", f.Kind, t)
		}
	}
	var res FloodResult
	err := f.NS.Do(func() error {
		iface, err := net.InterfaceByName(f.Ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		// Straight to the driver: the flood is paced here, not by a queueing discipline.
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
		sa := &unix.SockaddrLinklayer{Ifindex: iface.Index, Halen: 6, Protocol: htons(0x0800)}
		copy(sa.Addr[:], f.DstMAC)
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		buf := make([]byte, 128)
		base := binary.BigEndian.Uint32(f.Sources.Masked().Addr().AsSlice())
		span := uint32(1) << (32 - f.Sources.Bits())
		burst := f.Rate/1000 + 1
		start := time.Now()
		deadline := start.Add(f.Duration)
		for res.Sent < f.Count && ctx.Err() == nil {
			now := time.Now()
			if !now.Before(deadline) {
				break
			}
			due := min(int(float64(f.Rate)*now.Sub(start).Seconds())+1, f.Count)
			if due <= res.Sent {
				time.Sleep(time.Millisecond)
				continue
			}
			for n := min(due-res.Sent, burst); n > 0; n-- {
				// Neither the network's nor the broadcast address of the range.
				src := base + 1 + rng.Uint32N(span-2)
				dst := f.Targets[res.Sent%len(f.Targets)]
				frame := f.frame(buf, rng, src, dst)
				if err := unix.Sendto(fd, frame, 0, sa); err != nil {
					if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
						break // the device is busy: next tick
					}
					return fmt.Errorf("send: %w", err)
				}
				res.Sent++
			}
		}
		res.Took = time.Since(start)
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("flood %s out of %s in %s: %w", f.Kind, f.Ifname, f.NS.Name, err)
	}
	return res, nil
}

// floodPayload is what a UDP datagram or first fragment of a flood carries.
var floodPayload = []byte("xlb-lab-flood!!!") // 16 bytes: a first fragment's data is a multiple of 8

// frame builds one frame of the flood in buf: src (a random source) to dst, random source port,
// IP id and TCP sequence numbers, checksums computed.
func (f *Flood) frame(buf []byte, rng *rand.Rand, src uint32, dst netip.AddrPort) []byte {
	copy(buf[0:6], f.DstMAC)
	copy(buf[6:12], f.SrcMAC)
	binary.BigEndian.PutUint16(buf[12:14], 0x0800)
	ip := buf[14:34]
	l4 := buf[34:]
	sport := uint16(1024 + rng.IntN(65536-1024))
	var proto byte
	var l4len int
	switch f.Kind {
	case FloodSYN, FloodACK:
		proto, l4len = 6, 20
		tcp := l4[:20]
		binary.BigEndian.PutUint16(tcp[0:2], sport)
		binary.BigEndian.PutUint16(tcp[2:4], dst.Port())
		binary.BigEndian.PutUint32(tcp[4:8], rng.Uint32())
		ack := uint32(0)
		flags := byte(0x02) // SYN
		if f.Kind == FloodACK {
			ack, flags = rng.Uint32(), 0x10
		}
		binary.BigEndian.PutUint32(tcp[8:12], ack)
		tcp[12] = 5 << 4
		tcp[13] = flags
		binary.BigEndian.PutUint16(tcp[14:16], 65535)
		clear(tcp[16:20])
	default:
		proto, l4len = 17, 8+len(floodPayload)
		udp := l4[:l4len]
		binary.BigEndian.PutUint16(udp[0:2], sport)
		binary.BigEndian.PutUint16(udp[2:4], dst.Port())
		length := l4len
		if f.Kind == FloodFirstFrag {
			length += 1000 // the rest of the datagram never comes
		}
		binary.BigEndian.PutUint16(udp[4:6], uint16(length))
		clear(udp[6:8])
		copy(udp[8:], floodPayload)
	}
	ip[0] = 0x45
	ip[1] = 0
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+l4len))
	binary.BigEndian.PutUint16(ip[4:6], uint16(rng.Uint32()))
	frag := uint16(0x4000) // DF
	if f.Kind == FloodFirstFrag {
		frag = 0x2000 // MF, offset 0
	}
	binary.BigEndian.PutUint16(ip[6:8], frag)
	ip[8] = 64
	ip[9] = proto
	clear(ip[10:12])
	binary.BigEndian.PutUint32(ip[12:16], src)
	copy(ip[16:20], dst.Addr().AsSlice())
	binary.BigEndian.PutUint16(ip[10:12], ^csumFold(csumAdd(0, ip)))
	if f.Kind != FloodFirstFrag { // a first fragment's UDP checksum stays 0 (none)
		sum := csumAdd(0, ip[12:20])
		sum += uint32(proto) + uint32(l4len)
		sum = csumAdd(sum, l4[:l4len])
		c := ^csumFold(sum)
		if proto == 17 && c == 0 {
			c = 0xffff
		}
		off := 16
		if proto == 17 {
			off = 6
		}
		binary.BigEndian.PutUint16(l4[off:off+2], c)
	}
	return buf[:34+l4len]
}

// csumAdd adds b's 16-bit words (big-endian; an odd last byte padded with 0) to sum.
func csumAdd(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

// csumFold folds a 32-bit one's complement sum to 16 bits.
func csumFold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

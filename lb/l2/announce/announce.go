// SPDX-License-Identifier: Apache-2.0

// Package announce answers ARP requests and IPv6 neighbour solicitations for the VIPs a gateway
// owns in L2 mode, and announces a VIP it takes (gratuitous ARP, unsolicited neighbour
// advertisement, repeated), from userspace on an AF_PACKET socket bound to the client-facing
// interface.
//
// Userspace, not the kernel's neighbour machinery: the kernel answers only for addresses
// configured on the host, and a VIP configured on an interface would make the gateway's own
// sockets answer on it (docs/datapath.md, "Security model"); proxy ARP/NDP would answer for a
// whole prefix whatever the ownership. Not the XDP program: the gateway's XDP program passes ARP
// and neighbour discovery to the stack, where this socket sees them; answering them is a few
// packets a second per client, nothing a datapath must be fast at.
package announce

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Repeats are the delays, from the take-over, of the announcements of a VIP: switches and hosts
// that miss or rate-limit the first still learn the new MAC within a few seconds.
var Repeats = []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond,
	1500 * time.Millisecond, 3100 * time.Millisecond}

// Responder answers for the VIPs it is given on one interface.
type Responder struct {
	ifi *net.Interface
	mac [6]byte
	fd  int
	log *slog.Logger

	mu sync.Mutex
	// owned: VIP → the generation of its take-over (a newer take-over stops older repeats).
	owned map[netip.Addr]uint64
	gen   uint64
	// Answered counts the answers sent, Announced the announcements (for metrics).
	answered, announced uint64
	// probing: VIPs being probed for duplicates (RFC 5227 / RFC 4862 style), → until when.
	probing map[netip.Addr]time.Time
	// seen: the last answer or announcement seen for an owned or probed VIP from a MAC not
	// ours (another host, or a peer gateway during a split brain or a hand-over).
	seen   map[netip.Addr]Sighting
	closed bool
	done   chan struct{}
}

// Listen opens the responder on interface name: an AF_PACKET socket receiving ARP and ICMPv6
// on it (all-multicast on, so that neighbour solicitations to the VIPs' solicited-node groups
// arrive on a real NIC). Close stops it.
func Listen(name string, log *slog.Logger) (*Responder, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("l2 announce: interface %q: %w", name, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("l2 announce: interface %q has no Ethernet address", name)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("l2 announce: AF_PACKET socket: %w", err)
	}
	prog := filter()
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("l2 announce: attach the socket filter: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("l2 announce: bind to %q: %w", name, err)
	}
	mr := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_ALLMULTI}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("l2 announce: all-multicast on %q: %w", name, err)
	}
	// A read wakes at least every 200 ms, so Close is noticed.
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	r := &Responder{ifi: ifi, fd: fd, log: log, owned: map[netip.Addr]uint64{}, probing: map[netip.Addr]time.Time{}, seen: map[netip.Addr]Sighting{},
		done: make(chan struct{})}
	copy(r.mac[:], ifi.HardwareAddr)
	go r.run()
	return r, nil
}

// MAC is the interface's address, the one the answers carry.
func (r *Responder) MAC() [6]byte { return r.mac }

// Close stops answering; the VIPs are not withdrawn (nothing withdraws an ARP entry: the next
// owner's announcements replace it).
func (r *Responder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	<-r.done
	return unix.Close(r.fd)
}

// Set makes owned the VIPs answered for: a VIP new to the set is announced at once and again at
// the Repeats; one left out is no longer answered.
func (r *Responder) Set(owned map[netip.Addr]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for v := range r.owned {
		if !owned[v] {
			delete(r.owned, v)
		}
	}
	for v, ok := range owned {
		if _, had := r.owned[v]; ok && !had {
			r.gen++
			r.owned[v] = r.gen
			r.announceLocked(v, r.gen)
		}
	}
}

// Reannounce announces v again (with its repeats) if it is owned: after a duplicate owner was
// resolved in this gateway's favour, the other's announcements may have been the last.
func (r *Responder) Reannounce(v netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.owned[v]; ok {
		r.gen++
		r.owned[v] = r.gen
		r.announceLocked(v, r.gen)
	}
}

// Stats returns the answers and announcements sent so far.
func (r *Responder) Stats() (answered, announced uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answered, r.announced
}

// Sighting is another MAC answering for a VIP.
type Sighting struct {
	MAC [6]byte
	At  time.Time
}

// Seen returns, for the owned and probed VIPs, the last answer from another MAC.
func (r *Responder) Seen() map[netip.Addr]Sighting {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[netip.Addr]Sighting, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// Forget drops what was seen for v.
func (r *Responder) Forget(v netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, v)
}

// ProbeTimes are the delays of the duplicate address probes of a VIP, and ProbeWait how long
// after the first an answer still counts.
var (
	ProbeTimes = []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
	ProbeWait  = 300 * time.Millisecond
)

// Probe asks whether another host answers for v (an ARP probe from 0.0.0.0, a neighbour
// solicitation from ::), at ProbeTimes; any answer within ProbeWait shows in Seen.
func (r *Responder) Probe(v netip.Addr) {
	r.mu.Lock()
	r.probing[v] = time.Now().Add(ProbeWait)
	r.mu.Unlock()
	for _, d := range ProbeTimes {
		time.AfterFunc(d, func() {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return
			}
			if err := r.send(probe(r.mac, v)); err != nil {
				r.log.Warn("l2: probe a VIP", "vip", v, "interface", r.ifi.Name, "error", err)
			}
		})
	}
}

func (r *Responder) announceLocked(v netip.Addr, gen uint64) {
	for _, d := range Repeats {
		time.AfterFunc(d, func() {
			r.mu.Lock()
			cur, ok := r.owned[v]
			live := ok && cur == gen && !r.closed
			if live {
				r.announced++
			}
			r.mu.Unlock()
			if !live {
				return
			}
			if err := r.send(announcement(r.mac, v)); err != nil {
				r.log.Warn("l2: announce a VIP", "vip", v, "interface", r.ifi.Name, "error", err)
			}
		})
	}
}

func (r *Responder) send(frame []byte) error {
	return unix.Sendto(r.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: r.ifi.Index, Halen: 6,
		Addr: [8]byte{frame[0], frame[1], frame[2], frame[3], frame[4], frame[5]}})
}

func (r *Responder) run() {
	defer close(r.done)
	buf := make([]byte, 2048)
	for {
		n, from, err := unix.Recvfrom(r.fd, buf, 0)
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			r.log.Error("l2: read from the AF_PACKET socket; answering stopped", "interface", r.ifi.Name, "error", err)
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		r.handle(buf[:n])
	}
}

// handle answers one received frame if it asks for an owned VIP, and notes a conflict if it is
// another host's answer for one.
func (r *Responder) handle(f []byte) {
	q, ok := parse(f)
	if !ok || q.srcMAC == r.mac {
		return
	}
	now := time.Now()
	r.mu.Lock()
	_, owned := r.owned[q.target]
	until, probing := r.probing[q.target]
	if probing && now.After(until) {
		delete(r.probing, q.target)
		probing = false
	}
	if (owned || probing) && q.answer {
		r.seen[q.target] = Sighting{MAC: q.srcMAC, At: now}
	}
	if owned && !q.answer {
		r.answered++
	}
	r.mu.Unlock()
	if !owned || q.answer {
		return
	}
	if err := r.send(reply(r.mac, q)); err != nil {
		r.log.Warn("l2: answer", "vip", q.target, "error", err)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

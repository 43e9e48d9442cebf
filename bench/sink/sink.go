// SPDX-License-Identifier: Apache-2.0

// Package sink is the benchmark's sink: an XDP program on the sink's veth that counts what
// arrives, by class, and drops it, so that what it counts is what got through the gateway.
package sink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Class is what the sink saw arrive, by destination (see bpf/consts.h).
type Class uint32

// The sink's classes.
const (
	// Backend: IPv4 to the backend address, translated by a load balancer.
	Backend Class = iota
	// VIP: IPv4 to the VIP, forwarded untranslated (the plain-redirect ceiling).
	VIP
	// Other: any other IP frame (strays).
	Other
	// NonIP: not IP (ARP).
	NonIP
	// Answered: in responding mode, a SYN to the backend the sink answered with a SYN-ACK
	// (Backend then counts only the ACKs that complete a handshake).
	Answered
	numClasses
)

func (c Class) String() string {
	return [...]string{"backend", "vip", "other", "non-ip", "answered"}[min(c, numClasses-1)]
}

// Count is packets and bytes of one class.
type Count struct {
	Packets, Bytes uint64
	// Carried is, of the Backend class, the frames that held direct server return's carrier
	// (the gateway's IPv4 option).
	Carried uint64
}

// Counts are a sink's counts by class.
type Counts [numClasses]Count

// Forwarded is what a load balancer or forwarder delivered: the Backend and VIP classes.
func (c Counts) Forwarded() uint64 { return c[Backend].Packets + c[VIP].Packets }

// Carried is how many of the frames to the backend held direct server return's carrier.
func (c Counts) Carried() uint64 { return c[Backend].Carried }

// Answered is how many SYNs a responding sink answered.
func (c Counts) Answered() uint64 { return c[Answered].Packets }

// Sink is the loaded sink program, attached to one interface.
type Sink struct {
	objs sinkObjects
	link link.Link
}

// Load loads the sink program, classifying by backend and vip (IPv4). progress is the
// generator's acknowledgement map (gen.Generator.Progress), which the sink advances as frames
// arrive. With respond, the sink is the connections-per-second mix's stateless server: it
// answers every SYN to the backend with a SYN-ACK, and counts as Backend (and acknowledges to
// the generator) only the ACKs that complete a handshake.
func Load(backend, vip netip.Addr, progress *ebpf.Map, respond bool) (*Sink, error) {
	if !backend.Is4() || !vip.Is4() {
		return nil, fmt.Errorf("load sink: backend %s and VIP %s must be IPv4", backend, vip)
	}
	if progress == nil {
		return nil, errors.New("load sink: no progress map (the generator's)")
	}
	s := &Sink{}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"progress": progress}}
	if err := loadSinkObjects(&s.objs, opts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load sink: %+v", verr)
		}
		return nil, fmt.Errorf("load sink: %w", err)
	}
	b, v := backend.As4(), vip.As4()
	cfg := sinkSinkCfg{Backend: nativeOf(b), Vip: nativeOf(v)}
	if respond {
		cfg.Respond = 1
	}
	if err := s.objs.SinkConfig.Put(uint32(0), &cfg); err != nil {
		s.objs.Close()
		return nil, fmt.Errorf("load sink: write sink_config: %w", err)
	}
	return s, nil
}

// nativeOf is the uint32 whose in-memory bytes are a (the program compares raw header words).
func nativeOf(a [4]byte) uint32 {
	return uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24
}

// Attach attaches the sink to ifname in ns, in native mode.
func (s *Sink) Attach(ns *netlab.NS, ifname string) error {
	return ns.Do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("attach sink to %s in %s: %w", ifname, ns.Name, err)
		}
		s.link, err = link.AttachXDP(link.XDPOptions{Program: s.objs.BenchSink, Interface: iface.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach sink to %s in %s: %w", ifname, ns.Name, err)
		}
		return nil
	})
}

// Counts reads the counts, summed over CPUs.
func (s *Sink) Counts() (Counts, error) {
	var c Counts
	for class := range numClasses {
		var per []sinkSinkCount
		if err := s.objs.SinkCounts.Lookup(uint32(class), &per); err != nil {
			return c, fmt.Errorf("sink: read class %s: %w", class, err)
		}
		for _, p := range per {
			c[class].Packets += p.Packets
			c[class].Bytes += p.Bytes
			c[class].Carried += p.Carried
		}
	}
	return c, nil
}

// Close detaches and unloads the sink.
func (s *Sink) Close() error {
	var errs []error
	if s.link != nil {
		errs = append(errs, s.link.Close())
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}

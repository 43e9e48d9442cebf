package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/afxdp"
)

// gatewayDatapath is what the daemon needs of a datapath (config datapath.kind): what the
// reconciler writes, the interfaces it is attached to and its counters.
type gatewayDatapath interface {
	reconcile.Datapath
	Attach(ifname string, mode config.AttachMode) error
	Detach(ifname string) error
	Interfaces() ([]string, error)
	VIPTraffic(xdp.VIPID) (xdp.Traffic, error)
	BackendTraffic(xdp.BackendID) (xdp.Traffic, error)
	// Reasons returns the verdict counters by name.
	Reasons() (map[string]uint64, error)
	FlowCount() (int, error)
	// Close stops using the datapath; what outlives the process (Persistent) keeps forwarding.
	Close() error
	// Remove stops the datapath and removes everything of it.
	Remove() error
	// Persistent says whether forwarding outlives the process (the XDP datapath's pins).
	Persistent() bool
}

// loadDatapath loads the configured datapath.
func loadDatapath(cfg *config.Config, log *slog.Logger) (gatewayDatapath, error) {
	c := cfg.Datapath
	if c.Kind == config.DatapathAFXDP {
		// An XDP datapath left pinned (a plain SIGTERM) is still attached and forwarding: the
		// steer program could not attach next to it, and two datapaths must not share a gateway.
		pins := cmp.Or(c.PinPath, xdp.DefaultPinPath)
		if _, err := os.Stat(pins); err == nil {
			return nil, fmt.Errorf("datapath kind afxdp: the XDP datapath's pins are in %s (it may still be "+
				"attached and forwarding); run `xlb cleanup --pin-path %s` first", pins, pins)
		}
		if c.MaglevSlots != 0 {
			log.Warn("datapath.maglevSlots does not apply to the AF_XDP datapath; ignored")
		}
		d, err := afxdp.Load(afxdp.Config{Engine: afxdp.Options{Seed: c.Seed, ConntrackSize: int(c.ConntrackSize),
			HandshakeSize: int(c.HandshakeSize), TCPEstablishedTimeout: c.TCPEstablishedTimeout,
			TCPClosingTimeout: c.TCPClosingTimeout, UDPTimeout: c.UDPTimeout, NewFlowRate: c.NewFlowRate},
			NextHopCacheTTL: c.NextHopCacheTTL, Logger: log})
		if err != nil {
			return nil, err
		}
		return afxdpDatapath{d}, nil
	}
	d, err := xdp.Load(datapathOptions(cfg, log))
	if err != nil {
		return nil, err
	}
	return xdpDatapath{d}, nil
}

func datapathOptions(cfg *config.Config, log *slog.Logger) xdp.Options {
	c := cfg.Datapath
	return xdp.Options{PinPath: c.PinPath, ConntrackSize: c.ConntrackSize, HandshakeSize: c.HandshakeSize, MaglevSlots: c.MaglevSlots,
		Seed: c.Seed, TCPEstablishedTimeout: c.TCPEstablishedTimeout, TCPClosingTimeout: c.TCPClosingTimeout,
		UDPTimeout: c.UDPTimeout, NewFlowRate: c.NewFlowRate, NextHopCacheTTL: c.NextHopCacheTTL, Logger: log}
}

func attachMode(m config.AttachMode) xdp.AttachMode {
	switch m {
	case config.AttachNative:
		return xdp.AttachNative
	case config.AttachGeneric:
		return xdp.AttachGeneric
	}
	return xdp.AttachAuto
}

// xdpDatapath is the XDP program (package xdp).
type xdpDatapath struct{ *xdp.Datapath }

func (d xdpDatapath) Attach(ifname string, mode config.AttachMode) error {
	return d.Datapath.Attach(ifname, attachMode(mode))
}

func (d xdpDatapath) Reasons() (map[string]uint64, error) {
	rs, err := d.Datapath.Reasons()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(rs))
	for r, n := range rs {
		out[r.String()] = n
	}
	return out, nil
}

func (d xdpDatapath) Persistent() bool { return true }

// afxdpDatapath is the AF_XDP datapath (package xdp/afxdp).
type afxdpDatapath struct{ *afxdp.Datapath }

func (d afxdpDatapath) Attach(ifname string, mode config.AttachMode) error {
	if err := d.Datapath.Attach(ifname, attachMode(mode)); err != nil {
		return fmt.Errorf("attach to %s: %w", ifname, err)
	}
	return nil
}

func (d afxdpDatapath) Interfaces() ([]string, error) { return d.Datapath.Interfaces(), nil }

func (d afxdpDatapath) VIPTraffic(id xdp.VIPID) (xdp.Traffic, error) {
	return d.Datapath.VIPTraffic(id), nil
}

func (d afxdpDatapath) BackendTraffic(id xdp.BackendID) (xdp.Traffic, error) {
	return d.Datapath.BackendTraffic(id), nil
}

// Reasons adds to the engine's verdicts what happened before a frame reached it: the steer
// program's counts (steered_*) and the sockets' kernel counters (xsk_*: frames the kernel
// dropped because the worker fell behind).
func (d afxdpDatapath) Reasons() (map[string]uint64, error) {
	out := map[string]uint64{}
	for r, n := range d.Datapath.Reasons() {
		out[r.String()] = n
	}
	st, err := d.SocketStats()
	if err != nil {
		return out, err
	}
	for k, n := range st {
		if k != "xsk_tx_ring_empty" { // times the kernel found nothing to send: no packets
			out[k] = n
		}
	}
	s, err := d.Steered()
	if err != nil {
		return out, err
	}
	out["steered_to_socket"], out["steered_passed"], out["steered_no_socket"] = s.ToSocket, s.Passed, s.NoSocket
	out["icmp_echo_reply"], out["pass_not_vip"] = s.EchoReplies, s.NotOurs // the XDP datapath's names
	return out, nil
}

func (d afxdpDatapath) FlowCount() (int, error) { return d.Datapath.FlowCount(), nil }

// Remove is Close: nothing of the AF_XDP datapath outlives it.
func (d afxdpDatapath) Remove() error { return d.Datapath.Close() }

func (d afxdpDatapath) Persistent() bool { return false }

// SPDX-License-Identifier: Apache-2.0

// Package dsr is the node side of direct server return: two TC programs the node agent attaches
// with TCX links to the node's interfaces. On ingress, a packet a gateway DNATed to a Pod on
// this node carries the VIP frontend it was sent to (the carrier, datapath.h's DSR_OPT*): the
// program checks the {frontend, endpoint} pair against the pairs the agent allows (the
// datapath.DSRNode methods), records the flow, and removes the carrier before the Pod sees the
// packet. On egress, the Pod's replies of a recorded flow, and the ICMP errors about it, get the
// VIP and service port as their source, and leave by the node's own routing straight to the
// client.
//
// Load loads the programs; Attach attaches them to an interface. With a pin directory the maps
// and links are pinned: they outlive the agent (replies keep being rewritten while it
// restarts), and the next Load adopts them, replacing the programs in the pinned links and
// keeping the maps, so a restarted agent loses no flow. See docs/dsr.md.
package dsr

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/kernelinfo"
)

// DefaultPinPath is where the node agent pins the maps and links of direct server return.
const DefaultPinPath = "/sys/fs/bpf/xlb-dsr"

// MaxServices is how many {frontend, local endpoint} pairs the node accepts carriers for
// (MAX_DSR_SERVICES in bpf/maps.h).
const MaxServices = 65536

// DefaultFlows is the flows LRU's size unless Options.Flows says otherwise: as many flows as a
// gateway's conntrack holds (datapath.DefaultConntrackSize). LRU maps are preallocated: about
// 136 bytes per entry, 136 MiB of kernel memory at this size (docs/dsr.md).
const DefaultFlows = datapath.DefaultConntrackSize

// MinFlows and MaxFlows bound Options.Flows. The floor keeps clear of the kernel's per-CPU LRU
// free lists (up to 128 entries held by each CPU), which on a many-CPU node would evict live
// entries from a small map long before it is full.
const (
	MinFlows = 16384
	MaxFlows = 1 << 24
)

// MinHalfOpen is the least size of the half_open LRU (the TCP flows between their carried SYN
// and the handshake's ACK), which Load sizes at Options.Flows / 16, at least this (the floor
// of MinFlows, for the same per-CPU free lists).
const MinHalfOpen = MinFlows

// halfOpenSize is the half_open LRU's size for a flows LRU of flows entries.
func halfOpenSize(flows int) int { return max(flows/16, MinHalfOpen) }

// DefaultTCPPickupBudget and DefaultUDPNewBudget are Options.TCPPickupBudget's and
// Options.UDPNewBudget's defaults, flows a second over all CPUs. TCP pickups are rare in normal
// operation (a node that lost its state, a flow a gateway picked up mid-way after ECMP moved
// it): a SYN flood's handshakes come through half_open instead, and 8,192 a second refills a
// node's lost table fast enough while a forged-ACK flood of distinct tuples cannot evict more
// than that many idle flows a second. UDP has no handshake: every new flow costs budget, so
// its budget is the larger.
const (
	DefaultTCPPickupBudget = 8192
	DefaultUDPNewBudget    = 65536
	// DefaultSYNBudget is Options.SYNBudget's default: as many candidates a second as the
	// default half_open holds.
	DefaultSYNBudget = DefaultFlows / 16
	// MaxBudget bounds both budgets.
	MaxBudget = 1 << 24
)

// Options configure Load.
type Options struct {
	// PinPath is a bpffs directory for the maps and links. With one, attached programs stay
	// attached and the maps keep their entries after Close, and the next Load adopts them,
	// until Remove; "" pins nothing and Close detaches. One Datapath at a time holds a pin
	// directory.
	PinPath string
	// Flows sizes the flows LRU: how many flows' replies can be rewritten at once, the least
	// recently used dropping out. 0 means DefaultFlows; MinFlows to MaxFlows. Pinned flows of
	// another size are copied into a map of the new size. The half_open LRU (TCP flows
	// between SYN and ACK) gets Flows / 16 entries, at least MinHalfOpen.
	Flows int
	// TCPTimeout and UDPTimeout are the flows' idle timeouts: a flow whose replies and carried
	// packets stopped for longer is no longer rewritten (until a carried packet records it
	// again). 0 means the gateway's conntrack defaults (datapath.DefaultTCPEstablishedTimeout,
	// datapath.DefaultUDPTimeout); at least datapath.MinTimeout (entries are refreshed once a
	// second).
	TCPTimeout, UDPTimeout time.Duration
	// TCPPickupBudget is how many TCP flows a second (over all CPUs) a carried packet other
	// than a SYN may add to flows when neither flows nor half_open knows it (a node that lost
	// its state, or a forged ACK); over it the packet is delivered and its flow not recorded
	// (counter tcp_pickup_over_budget). 0 means DefaultTCPPickupBudget; 1 to MaxBudget.
	TCPPickupBudget int
	// UDPNewBudget is how many UDP flows a second (over all CPUs) carried datagrams may add to
	// flows; over it the datagram is delivered and its flow not recorded (counter
	// udp_new_over_budget). Refreshing a recorded flow takes no budget. 0 means
	// DefaultUDPNewBudget; 1 to MaxBudget.
	UDPNewBudget int
	// SYNBudget is how many carried TCP SYNs a second (over all CPUs) may add a candidate to
	// half_open; over it the SYN is delivered and records nothing, its SYN-ACK leaves
	// unrewritten (counter syn_over_budget) and the client retransmits. 0 means
	// DefaultSYNBudget; 1 to MaxBudget.
	//
	// Every budget is also shared: one frontend may take at most half of it a second, one
	// client prefix (IPv4 /24, IPv6 /48) an eighth (counters budget_frontend_spent,
	// budget_prefix_spent), so that a flood to one Service or from one network leaves the rest
	// to the others.
	SYNBudget int

	// budgetSeed, when not 0, keys the budgets' shares instead of a random value (tests: which
	// frontends and prefixes share a bucket is then fixed).
	budgetSeed uint32
}

// withDefaults returns o with its zero fields set, or says what is wrong with it.
func (o Options) withDefaults() (Options, error) {
	if o.Flows == 0 {
		o.Flows = DefaultFlows
	}
	if o.Flows < MinFlows || o.Flows > MaxFlows {
		return o, fmt.Errorf("dsr: %d flows: the flows LRU holds %d to %d: %w", o.Flows, MinFlows, MaxFlows, datapath.ErrOutOfRange)
	}
	if o.TCPTimeout == 0 {
		o.TCPTimeout = datapath.DefaultTCPEstablishedTimeout
	}
	if o.UDPTimeout == 0 {
		o.UDPTimeout = datapath.DefaultUDPTimeout
	}
	if o.TCPPickupBudget == 0 {
		o.TCPPickupBudget = DefaultTCPPickupBudget
	}
	if o.UDPNewBudget == 0 {
		o.UDPNewBudget = DefaultUDPNewBudget
	}
	if o.SYNBudget == 0 {
		o.SYNBudget = DefaultSYNBudget
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"TCP pickup", o.TCPPickupBudget}, {"UDP new-flow", o.UDPNewBudget}, {"SYN", o.SYNBudget}} {
		if b.v < 1 || b.v > MaxBudget {
			return o, fmt.Errorf("dsr: %s budget %d a second: want 1 to %d: %w", b.name, b.v, MaxBudget, datapath.ErrOutOfRange)
		}
	}
	for _, t := range []struct {
		name string
		v    time.Duration
	}{{"TCP", o.TCPTimeout}, {"UDP", o.UDPTimeout}} {
		if t.v < datapath.MinTimeout {
			return o, fmt.Errorf("dsr: %s timeout %s is below %s: %w", t.name, t.v, datapath.MinTimeout, datapath.ErrOutOfRange)
		}
	}
	return o, nil
}

// Datapath is the loaded node side of direct server return. Not safe for concurrent use: one
// agent owns it.
type Datapath struct {
	objs     dsrObjects
	pin      string
	links    map[attachment]link.Link
	lockf    *os.File // the pin directory, flock'ed while d holds it
	replaced error    // what Load could not adopt (Replaced)
}

var _ datapath.DSRDatapath = (*Datapath)(nil)

// Load loads the programs and their maps; Attach attaches them. With Options.PinPath, maps and
// links pinned there by an earlier Load are adopted: the new programs replace the old in the
// pinned links (each interface keeps being served without a gap), on the pinned maps (services
// and flows are kept). A pinned map that cannot be adopted (another build's layout) is
// replaced by an empty one, pinned flows of another size are copied into the new size, and a
// pinned link whose interface is gone is removed; Replaced says what happened.
func Load(opts Options) (*Datapath, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	spec, err := loadDsr()
	if err != nil {
		return nil, fmt.Errorf("dsr: %w", err)
	}
	spec.Maps["flows"].MaxEntries = uint32(opts.Flows)
	spec.Maps["half_open"].MaxEntries = uint32(halfOpenSize(opts.Flows))
	for name, v := range map[string]any{
		"cfg_tcp_ns":      uint64(opts.TCPTimeout),
		"cfg_udp_ns":      uint64(opts.UDPTimeout),
		"cfg_tcp_pickup":  uint32(opts.TCPPickupBudget),
		"cfg_udp_new":     uint32(opts.UDPNewBudget),
		"cfg_syn":         uint32(opts.SYNBudget),
		"cfg_budget_seed": cmp.Or(opts.budgetSeed, rand.Uint32()),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("dsr: set %s: %w", name, err)
		}
	}
	d := &Datapath{pin: opts.PinPath, links: map[attachment]link.Link{}}
	if d.pin == "" {
		if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
			return nil, fmt.Errorf("dsr: load programs: %w", kernelinfo.VerifierHint(err))
		}
	} else {
		if err := d.lock(); err != nil {
			return nil, err
		}
		if err := d.loadPinned(spec); err != nil {
			d.Close()
			return nil, err
		}
	}
	if err := d.refreshNodeAddresses(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Replaced returns what Load found pinned and could not adopt (nil: it adopted everything, or
// found nothing).
func (d *Datapath) Replaced() error { return d.replaced }

// Persistent reports whether the programs outlive d (they are pinned).
func (d *Datapath) Persistent() bool { return d.pin != "" }

// Close releases the programs, maps and links and the pin directory's lock. What is pinned
// stays attached and keeps rewriting replies (Remove detaches it); without pins the programs
// are detached.
func (d *Datapath) Close() error {
	var errs []error
	for a, l := range d.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("dsr: close link %s: %w", a, err))
		}
	}
	d.links = map[attachment]link.Link{}
	if err := d.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("dsr: close objects: %w", err))
	}
	d.objs = dsrObjects{}
	if d.lockf != nil {
		d.lockf.Close()
		d.lockf = nil
	}
	return errors.Join(errs...)
}

// Remove detaches the programs from every interface, deletes the pins and closes d: replies are
// no longer rewritten and carriers no longer removed.
func (d *Datapath) Remove() error {
	var err error
	if d.pin != "" {
		err = removePins(d.pin)
	}
	return errors.Join(err, d.Close())
}

// Program returns the ingress or the egress program (for benchmarks and tests).
func (d *Datapath) Program(dir Direction) *ebpf.Program {
	if dir == Egress {
		return d.objs.DsrEgress
	}
	return d.objs.DsrIngress
}

// FrontendShareDiv and PrefixShareDiv are the budgets' shares (FRONTEND_SHARE_DIV and
// PREFIX_SHARE_DIV in bpf/maps.h): one frontend may take 1/FrontendShareDiv of a budget a
// second, one client prefix (IPv4 /24, IPv6 /48) 1/PrefixShareDiv.
const (
	FrontendShareDiv = 2
	PrefixShareDiv   = 8
)

// SPDX-License-Identifier: Apache-2.0

// Package socklb is the node agent's datapath: eBPF programs on a cgroup's socket calls
// (connect, sendmsg, recvmsg and getpeername, IPv4 and IPv6) that send connections to a
// Service's cluster IP and port straight to one of its endpoints, chosen when the socket
// connects (or, for an unconnected UDP socket, when it first sends to the service), as
// kube-proxy does for ClusterIP Services but with no per-packet NAT and no conntrack. Replies
// and getpeername show the application the cluster IP it asked for.
//
// Load attaches the programs. *Datapath implements datapath.SocketLB: SetConnectFrontend and
// DeleteConnectFrontend change the maps one frontend at a time, Commit ends a reconcile pass,
// and ConnectFrontends reads back what the maps hold (an earlier agent's pins, at start). What
// to change is the reconciler's to decide (lb/reconcile's ConnectReconciler). See
// docs/agent.md.
package socklb

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/kernelinfo"
	"github.com/xlb-dev/xlb/xdp/linkpin"
)

// Where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup on a unified host (every current
// distribution and Kubernetes node), /sys/fs/cgroup/unified on a hybrid one (cgroup v1
// controllers, with v2 beside them).
var cgroup2Mounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// RootCgroup returns the root of the cgroup v2 hierarchy: attached there, the programs see every
// process on the node, Pods and host processes alike.
func RootCgroup() (string, error) {
	for _, p := range cgroup2Mounts {
		if isCgroup2(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("socklb: no cgroup v2 hierarchy mounted at %s", strings.Join(cgroup2Mounts, " or "))
}

// MaxFrontends is how many frontends (cluster IP, port, protocol) the maps hold.
const MaxFrontends = 65536

// DefaultPinPath is where the node agent pins its maps and links.
const DefaultPinPath = "/sys/fs/bpf/xlb-agent"

// Options configure Load.
type Options struct {
	// Cgroup is the cgroup v2 directory whose processes' socket calls are balanced, with every
	// cgroup below it; "" means RootCgroup().
	Cgroup string
	// PinPath is a bpffs directory for the maps and links. With one, the programs stay attached
	// and the maps keep their entries after Close (a restarted agent adopts them: cluster IPs
	// stay balanced while it is down) until Remove; "" pins nothing and Close detaches.
	PinPath string
	// Sockets sizes the four LRU maps (affinity, client_affinity, revnat_udp, revnat_tcp):
	// how many {socket, endpoint} pairs per protocol, UDP sockets' kept endpoints and clients'
	// affinities are remembered. 0 means DefaultSockets; MinSockets to MaxSockets. Their memory
	// is preallocated: about 120 bytes per entry and map. Pins of another size are replaced.
	Sockets int
}

// DefaultSockets is the LRU maps' size unless Options.Sockets says otherwise (~120 MiB for
// the four).
const DefaultSockets = 262144

// MinSockets and MaxSockets bound the size Options.Sockets may give them. The floor keeps
// clear of the kernel's per-CPU LRU free lists (up to 128 entries held by each CPU), which on
// a many-CPU node would evict live entries from a small map long before it is full.
const (
	MinSockets = 16384
	MaxSockets = 1 << 24
)

// lruMaps are the maps Options.Sockets sizes.
var lruMaps = []string{"affinity", "client_affinity", "revnat_udp", "revnat_tcp"}

// sizeMaps gives the LRU maps of spec n entries each.
func sizeMaps(spec *ebpf.CollectionSpec, n int) {
	for _, name := range lruMaps {
		if m := spec.Maps[name]; m != nil {
			m.MaxEntries = uint32(n)
		}
	}
}

// Datapath is the loaded and attached socket load balancer. Not safe for concurrent use: one
// reconciler owns it.
type Datapath struct {
	objs     socklbObjects
	pin      string // Options.PinPath
	sockets  int    // Options.Sockets
	links    []link.Link
	current  map[datapath.Frontend]applied // what the maps hold, frontend → its slot set
	retiring []applied                     // slot sets replaced since the last Commit
	retired  []applied                     // slot sets replaced before the last Commit, deleted by the next
	used     map[uint32]bool               // the ids of current, retiring and retired slot sets
	nextID   uint32                        // the next slot set id to try (0 is never used: no slot set)

	reap    *reaper // the UDP socket iterator (CloseLostUDP); nil when it could not be loaded
	reapErr error   // why it could not

	lockf     *os.File // the pin directory, flock'ed while d holds it
	replaced  error    // why Load replaced pins it found (Replaced)
	replacing bool     // the old pins still stand, until the first Commit(true)
}

var _ datapath.SocketLB = (*Datapath)(nil)

// applied is one frontend's slot set as written.
type applied struct {
	id uint32 // 0 when the frontend has no endpoints (it refuses connections)
	// Endpoints are in slot order; a slot read back missing is the zero AddrPort.
	datapath.ConnectFrontend
	stale bool // read back incomplete from pinned maps: its slots are found by id (deleteSet)
}

// hooks are the attach points, in the order Load attaches them.
func (d *Datapath) hooks() []hook {
	p := &d.objs.socklbPrograms
	return []hook{
		{"connect4", ebpf.AttachCGroupInet4Connect, p.SocklbConnect4},
		{"connect6", ebpf.AttachCGroupInet6Connect, p.SocklbConnect6},
		{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, p.SocklbSendmsg4},
		{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, p.SocklbSendmsg6},
		{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, p.SocklbRecvmsg4},
		{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, p.SocklbRecvmsg6},
		{"getpeername4", ebpf.AttachCgroupInet4GetPeername, p.SocklbGetpeername4},
		{"getpeername6", ebpf.AttachCgroupInet6GetPeername, p.SocklbGetpeername6},
	}
}

// hook is one attach point: its pin name ("link_" + name), attach type and program.
type hook struct {
	name string
	typ  ebpf.AttachType
	prog *ebpf.Program
}

// Load loads the programs and attaches them to opts.Cgroup. Without pins the maps start empty:
// no frontend is balanced until SetConnectFrontend. With pins from an earlier Load
// (Options.PinPath), the new programs replace the pinned ones in the same links, on the pinned
// maps, and what the maps hold is read back (ConnectFrontends), so that a reconciler changes
// only what differs. Pins that cannot be adopted (another version's layout, another cgroup, a
// missing pin) are replaced, make before break: the new programs are attached before the old
// pins go, at the first Commit(true) (Replaced says why). Close detaches what is not pinned.
// One Datapath at a time holds a pin directory.
func Load(opts Options) (*Datapath, error) {
	cg, err := resolveCgroup(opts.Cgroup)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Sockets == 0:
		opts.Sockets = DefaultSockets
	case opts.Sockets < MinSockets || opts.Sockets > MaxSockets:
		return nil, fmt.Errorf("socklb: %d sockets: the LRU maps hold between %d and %d entries", opts.Sockets, MinSockets, MaxSockets)
	}
	d := &Datapath{pin: opts.PinPath, sockets: opts.Sockets, current: map[datapath.Frontend]applied{}, used: map[uint32]bool{}, nextID: 1}
	if opts.PinPath != "" {
		if err := d.lock(); err != nil {
			return nil, err
		}
		if HasPins(opts.PinPath) {
			err := d.adopt(cg)
			if err == nil {
				d.loadReaper()
				return d, nil
			}
			// Make before break: fresh programs are attached now, unpinned, while the old
			// pinned ones keep balancing (they run first; the new ones leave the endpoint
			// addresses they wrote alone). The first Commit(true) drops the old pins and pins
			// the new objects (finishReplace).
			d.closeObjects()
			d.current, d.used, d.nextID, d.replaced = map[datapath.Frontend]applied{}, map[uint32]bool{}, 1, err
			d.replacing = true
		}
	}
	spec, err := loadSocklb()
	if err == nil {
		sizeMaps(spec, d.sockets)
		err = spec.LoadAndAssign(&d.objs, nil)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("socklb: load programs: %w", kernelinfo.VerifierHint(err))
	}
	for _, h := range d.hooks() {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: h.typ, Program: h.prog})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("socklb: attach %s to cgroup %s: %w", h.typ, cg, err)
		}
		d.links = append(d.links, l)
	}
	if opts.PinPath != "" && !d.replacing {
		if err := d.pinAll(); err != nil {
			_ = removePinFiles(opts.PinPath)
			d.Close()
			return nil, err
		}
	}
	d.loadReaper()
	return d, nil
}

// finishReplace ends a replacement (see Load) once the new maps hold a whole plan (Commit(true)):
// the old pins go, which detaches the old programs, and the new objects take their place.
func (d *Datapath) finishReplace() error {
	if err := removePinFiles(d.pin); err != nil {
		return err
	}
	if err := d.pinAll(); err != nil {
		return err
	}
	d.replacing = false
	return nil
}

// Replaced returns why Load replaced the pins it found instead of adopting them, nil when it
// adopted them or found none.
func (d *Datapath) Replaced() error { return d.replaced }

// resolveCgroup returns the cgroup v2 directory to attach to: RootCgroup() for "", dir when it
// is a cgroup v2 directory, dir/unified when dir is a hybrid host's /sys/fs/cgroup (a
// container's view of it included).
func resolveCgroup(dir string) (string, error) {
	if dir == "" {
		return RootCgroup()
	}
	for _, p := range []string{dir, filepath.Join(dir, "unified")} {
		if isCgroup2(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("socklb: %s is not a cgroup v2 directory (nor is %s)", dir, filepath.Join(dir, "unified"))
}

// isCgroup2 reports whether dir is in a cgroup v2 hierarchy.
func isCgroup2(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// lock creates the pin directory and takes its lock, so that two agents on one node (a rolling
// update's surge, a second agent run by hand) never share the maps and their slot set ids.
func (d *Datapath) lock() error {
	if err := os.MkdirAll(d.pin, 0o700); err != nil {
		return fmt.Errorf("socklb: pin directory: %w", err)
	}
	f, err := os.Open(d.pin)
	if err != nil {
		return fmt.Errorf("socklb: pin directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("socklb: %s is in use by another agent on this node", d.pin)
		}
		return fmt.Errorf("socklb: lock %s: %w", d.pin, err)
	}
	d.lockf = f
	return nil
}

// Pin names inside Options.PinPath: "map_" + a map's name, "link_" + a hook's.
func (d *Datapath) pinnedMaps() map[string]*ebpf.Map {
	m := &d.objs.socklbMaps
	return map[string]*ebpf.Map{"services": m.Services, "slots": m.Slots, "members": m.Members,
		"affinity": m.Affinity, "client_affinity": m.ClientAffinity, "revnat_udp": m.RevnatUdp,
		"revnat_tcp": m.RevnatTcp, "stats": m.Stats}
}

// HasPins reports whether dir holds any pin of a socket load balancer.
func HasPins(dir string) bool {
	for _, n := range pinNames() {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			return true
		}
	}
	return false
}

// pinNames are the names of every pin of a socket load balancer, links first.
func pinNames() []string {
	var names []string
	for _, h := range (&Datapath{}).hooks() {
		names = append(names, "link_"+h.name)
	}
	for name := range (&Datapath{}).pinnedMaps() {
		names = append(names, "map_"+name)
	}
	return names
}

// pinAll pins every map and link under d.pin.
func (d *Datapath) pinAll() error {
	if err := os.MkdirAll(d.pin, 0o700); err != nil {
		return fmt.Errorf("socklb: pin directory: %w", err)
	}
	for name, m := range d.pinnedMaps() {
		if err := m.Pin(filepath.Join(d.pin, "map_"+name)); err != nil {
			return fmt.Errorf("socklb: pin map %s: %w", name, err)
		}
	}
	for i, h := range d.hooks() {
		if err := d.links[i].Pin(filepath.Join(d.pin, "link_"+h.name)); err != nil {
			return fmt.Errorf("socklb: pin link %s: %w", h.name, err)
		}
	}
	return nil
}

// removePinFiles removes the pins of a socket load balancer from dir, links first (balancing
// stops before the maps go); missing pins are no error.
func removePinFiles(dir string) error {
	var errs []error
	for _, n := range pinNames() {
		if strings.HasPrefix(n, "link_") {
			// Detached before unpinned: connects stop being balanced before this returns.
			if err := linkpin.Remove(filepath.Join(dir, n)); err != nil {
				errs = append(errs, fmt.Errorf("socklb: %w", err))
			}
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("socklb: unpin %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// removePins removes the pins and then dir itself.
func removePins(dir string) error {
	err := removePinFiles(dir)
	if err2 := os.Remove(dir); err2 != nil && !errors.Is(err2, os.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("socklb: remove %s: %w", dir, err2))
	}
	return err
}

// adopt loads the programs on the pinned maps, swaps them into the pinned links (which must be
// attached to cgroup) and reads back what the maps hold.
func (d *Datapath) adopt(cgroup string) error {
	spec, err := loadSocklb()
	if err != nil {
		return fmt.Errorf("socklb: %w", err)
	}
	sizeMaps(spec, d.sockets)
	repl := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range repl {
			m.Close()
		}
	}()
	for name := range d.pinnedMaps() {
		m, err := ebpf.LoadPinnedMap(filepath.Join(d.pin, "map_"+name), nil)
		if err != nil {
			return fmt.Errorf("socklb: open pinned map %s: %w (remove the pins with xlb cleanup --pin-path %s)", name, err, d.pin)
		}
		repl[name] = m
	}
	if err := spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return fmt.Errorf("socklb: load programs on the pinned maps (pinned by another version, or with another size of the LRU maps? remove them with xlb cleanup --pin-path %s): %w", d.pin, kernelinfo.VerifierHint(err))
	}
	var st unix.Stat_t
	if err := unix.Stat(cgroup, &st); err != nil {
		return fmt.Errorf("socklb: cgroup %s: %w", cgroup, err)
	}
	for _, h := range d.hooks() {
		l, err := link.LoadPinnedLink(filepath.Join(d.pin, "link_"+h.name), nil)
		if err != nil {
			return fmt.Errorf("socklb: open pinned link %s: %w", h.name, err)
		}
		d.links = append(d.links, l)
		info, err := l.Info()
		if err != nil {
			return fmt.Errorf("socklb: pinned link %s: %w", h.name, err)
		}
		if c := info.Cgroup(); c == nil || c.CgroupId != st.Ino {
			return fmt.Errorf("socklb: the pinned programs are attached to another cgroup than %s: remove them with xlb cleanup --pin-path %s", cgroup, d.pin)
		}
		if err := l.Update(h.prog); err != nil {
			return fmt.Errorf("socklb: replace the program of pinned link %s: %w", h.name, err)
		}
	}
	return d.readBack()
}

// readBack rebuilds current from the maps, and deletes slot sets no frontend points to (left by
// an agent that stopped inside a reconcile pass).
func (d *Datapath) readBack() error {
	var k socklbSvcKey
	var v socklbSvcValue
	live := map[uint32]bool{}
	it := d.objs.Services.Iterate()
	for it.Next(&k, &v) {
		f, eps, missing := readFrontend(d.objs.Slots, k, v)
		// A stale frontend's missing slots are zero AddrPorts, which no plan holds: the
		// reconciler rewrites it.
		a := applied{id: v.Id, stale: missing > 0}
		a.Endpoints = eps
		a.AffinityTimeout = time.Duration(v.AffinitySecs) * time.Second
		d.current[f] = a
		if v.Id != 0 {
			live[v.Id] = true
			d.used[v.Id] = true
		}
		d.nextID = max(d.nextID, v.Id+1)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("socklb: read pinned frontends: %w", err)
	}
	deleteStale(d.objs.Slots, func(k *socklbSlotKey) bool { return !live[k.Id] }, new(socklbSlotValue))
	deleteStale(d.objs.Members, func(k *socklbMemberKey) bool { return !live[k.Id] }, new(uint8))
	return nil
}

// readFrontend reads frontend k's slot set (its services value v) from slots: the endpoints in
// slot order, the zero AddrPort in place of each slot that was missing or another frontend's (a
// write raced, or the maps were changed by something else than an agent), and how many were.
func readFrontend(slots *ebpf.Map, k socklbSvcKey, v socklbSvcValue) (datapath.Frontend, []netip.AddrPort, int) {
	f := datapath.Frontend{Addr: datapath.AddrFromWire(k.Addr.W, k.Family), Port: datapath.WirePort(k.Port), Proto: datapath.Protocol(k.Proto)}
	eps := make([]netip.AddrPort, 0, min(v.Count, 1024))
	missing := 0
	for i := range v.Count {
		var sv socklbSlotValue
		if err := slots.Lookup(&socklbSlotKey{Id: v.Id, Slot: i}, &sv); err != nil || sv.Front != k {
			missing++
			eps = append(eps, netip.AddrPort{})
			continue
		}
		eps = append(eps, endpointFromWire(sv.Ep))
	}
	return f, eps, missing
}

// deleteStale deletes the entries of m whose key stale says yes to (value is scratch for the
// iteration).
func deleteStale[K any, V any](m *ebpf.Map, stale func(*K) bool, value *V) {
	var k K
	var dead []K
	for it := m.Iterate(); it.Next(&k, value); {
		if stale(&k) {
			dead = append(dead, k)
		}
	}
	for i := range dead {
		_ = m.Delete(&dead[i])
	}
}

// Close releases the programs, maps and links and the pin directory's lock: what is pinned
// stays attached and keeps balancing (Remove detaches it); without pins the programs are
// detached.
func (d *Datapath) Close() error {
	err := d.closeObjects()
	if d.lockf != nil {
		d.lockf.Close()
		d.lockf = nil
	}
	return err
}

// closeObjects closes the links, programs and maps.
func (d *Datapath) closeObjects() error {
	var errs []error
	for _, l := range d.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("socklb: close link: %w", err))
		}
	}
	d.links = nil
	if d.reap != nil {
		if err := d.reap.close(); err != nil {
			errs = append(errs, fmt.Errorf("socklb: close the UDP socket iterator: %w", err))
		}
		d.reap = nil
	}
	if err := d.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("socklb: close objects: %w", err))
	}
	d.objs = socklbObjects{}
	return errors.Join(errs...)
}

// Remove detaches the programs, deletes the pins and closes d: cluster IPs are no longer
// balanced.
func (d *Datapath) Remove() error {
	var err error
	if d.pin != "" {
		err = removePins(d.pin)
	}
	return errors.Join(err, d.Close())
}

// RemovePinned detaches and deletes what a socket load balancer pinned in dir (xlb cleanup),
// and dir. Nothing pinned there is no error.
func RemovePinned(dir string) error {
	if !HasPins(dir) {
		return nil
	}
	return removePins(dir)
}

// ConnectFrontends returns every frontend the maps hold, as written or (after Load adopted
// pins) read back: a slot that could not be read back is the zero AddrPort, so that no plan
// equals the frontend and the reconciler rewrites it.
func (d *Datapath) ConnectFrontends() (map[datapath.Frontend]datapath.ConnectFrontend, error) {
	out := make(map[datapath.Frontend]datapath.ConnectFrontend, len(d.current))
	for f, a := range d.current {
		out[f] = datapath.ConnectFrontend{Endpoints: slices.Clone(a.Endpoints), AffinityTimeout: a.AffinityTimeout}
	}
	return out, nil
}

// SetConnectFrontend makes new connections to f go to cf's endpoints (none: refuse them). The
// endpoints go into a new slot set, written before the frontend points to it: a connect sees
// the old endpoints or the new ones, never a mix. The set it replaces is deleted by the second
// Commit from now (the next reconcile pass's), long after any program that read its id has
// finished. A frontend that cannot be written (an endpoint of the other family, a full map)
// keeps what it had, and the error says why.
func (d *Datapath) SetConnectFrontend(f datapath.Frontend, cf datapath.ConnectFrontend) error {
	cur, had := d.current[f]
	return d.put(f, cf, cur, had)
}

// DeleteConnectFrontend removes frontend f: connections to it are left alone again. Its slot
// set is deleted by the second Commit from now. A frontend the maps do not hold is no error.
func (d *Datapath) DeleteConnectFrontend(f datapath.Frontend) error {
	cur, had := d.current[f]
	if !had {
		return nil
	}
	k := svcKey(f)
	if err := d.objs.Services.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("socklb: remove frontend %s: %w", f, err)
	}
	d.retiring = append(d.retiring, cur)
	delete(d.current, f)
	return nil
}

// Commit ends a reconcile pass. It deletes the slot sets replaced or removed before the last
// Commit: every program that read their id has long finished. Those of this pass are deleted by
// the next Commit. With complete (the maps hold a whole plan), it also finishes a replacement
// of pins Load could not adopt: the old pins go, which detaches the old programs, and the new
// objects are pinned in their place.
func (d *Datapath) Commit(complete bool) error {
	for _, r := range d.retired {
		d.deleteSet(r)
		delete(d.used, r.id)
	}
	d.retired, d.retiring = d.retiring, d.retired[:0]
	if d.replacing && complete {
		if err := d.finishReplace(); err != nil {
			return fmt.Errorf("socklb: replace the old pins: %w", err)
		}
	}
	return nil
}

// put writes frontend f as cf in place of cur (when had).
func (d *Datapath) put(f datapath.Frontend, cf datapath.ConnectFrontend, cur applied, had bool) error {
	if err := checkFrontend(f, cf); err != nil {
		return err
	}
	if len(d.current) >= MaxFrontends && !had {
		return fmt.Errorf("socklb: frontend %s: the map is full (%d frontends)", f, MaxFrontends)
	}
	next := applied{ConnectFrontend: datapath.ConnectFrontend{Endpoints: slices.Clone(cf.Endpoints), AffinityTimeout: cf.AffinityTimeout}}
	if len(cf.Endpoints) > 0 {
		next.id = d.newID()
		if err := d.writeSet(f, next); err != nil {
			d.deleteSet(next)
			delete(d.used, next.id)
			return fmt.Errorf("socklb: frontend %s: %w", f, err)
		}
	}
	k := svcKey(f)
	v := socklbSvcValue{Id: next.id, Count: uint32(len(cf.Endpoints)), AffinitySecs: uint32(cf.AffinityTimeout / time.Second)}
	if err := d.objs.Services.Put(&k, &v); err != nil {
		d.deleteSet(next)
		delete(d.used, next.id)
		return fmt.Errorf("socklb: frontend %s: write: %w", f, err)
	}
	if had {
		d.retiring = append(d.retiring, cur)
	}
	d.current[f] = next
	return nil
}

// newID returns a slot set id no frontend and no set waiting for deletion uses (ids wrap after
// 2^32 - 1), and marks it used.
func (d *Datapath) newID() uint32 {
	for d.nextID == 0 || d.used[d.nextID] {
		d.nextID++
	}
	id := d.nextID
	d.nextID++
	d.used[id] = true
	return id
}

// checkFrontend says what makes f and cf impossible to balance.
func checkFrontend(f datapath.Frontend, cf datapath.ConnectFrontend) error {
	eps := cf.Endpoints
	if f.Proto != datapath.TCP && f.Proto != datapath.UDP {
		return fmt.Errorf("socklb: frontend %s: protocol %s is not supported (TCP or UDP)", f, f.Proto)
	}
	if f.Port == 0 || !f.Addr.IsValid() {
		return fmt.Errorf("socklb: frontend %s: needs an address and a port", f)
	}
	if cf.AffinityTimeout < 0 || cf.AffinityTimeout/time.Second > math.MaxUint32 {
		return fmt.Errorf("socklb: frontend %s: affinity timeout %v out of range", f, cf.AffinityTimeout)
	}
	for _, ep := range eps {
		if !ep.IsValid() || ep.Port() == 0 || ep.Addr().Unmap().Is4() != f.Addr.Unmap().Is4() {
			return fmt.Errorf("socklb: frontend %s: endpoint %s is not a usable endpoint of the frontend's family", f, ep)
		}
	}
	return nil
}

// writeSet writes slot set s of frontend f: its slots and its members.
func (d *Datapath) writeSet(f datapath.Frontend, s applied) error {
	front := svcKey(f)
	for i, ep := range s.Endpoints {
		sk := socklbSlotKey{Id: s.id, Slot: uint32(i)}
		e := endpointOf(ep)
		sv := socklbSlotValue{Ep: e, Front: front}
		if err := d.objs.Slots.Put(&sk, &sv); err != nil {
			return fmt.Errorf("write slot %d (%s): %w", i, ep, err)
		}
		mk := socklbMemberKey{Id: s.id, Ep: e}
		one := uint8(1)
		if err := d.objs.Members.Put(&mk, &one); err != nil {
			return fmt.Errorf("write member %s: %w", ep, err)
		}
	}
	return nil
}

// deleteSet deletes what writeSet wrote for s (what is missing already is no error: a failed
// write leaves part of a set).
func (d *Datapath) deleteSet(s applied) {
	if s.id == 0 {
		return
	}
	if s.stale { // read back in part: its entries are found by id
		deleteStale(d.objs.Slots, func(k *socklbSlotKey) bool { return k.Id == s.id }, new(socklbSlotValue))
		deleteStale(d.objs.Members, func(k *socklbMemberKey) bool { return k.Id == s.id }, new(uint8))
		return
	}
	for i, ep := range s.Endpoints {
		sk := socklbSlotKey{Id: s.id, Slot: uint32(i)}
		_ = d.objs.Slots.Delete(&sk)
		mk := socklbMemberKey{Id: s.id, Ep: endpointOf(ep)}
		_ = d.objs.Members.Delete(&mk)
	}
}

// Counters returns the programs' counts since they were loaded (pinned programs: since the
// first agent loaded them), summed over CPUs.
func (d *Datapath) Counters() (datapath.SocketCounters, error) { return readCounters(d.objs.Stats) }

// readCounters sums the stats map over CPUs.
func readCounters(stats *ebpf.Map) (datapath.SocketCounters, error) {
	var c datapath.SocketCounters
	for i, dst := range []*uint64{&c.Connects, &c.Refused, &c.Datagrams, &c.DatagramsKept, &c.Revnat, &c.NoSlot, &c.AffinityKept} {
		var per []uint64
		if err := stats.Lookup(uint32(i), &per); err != nil {
			return datapath.SocketCounters{}, fmt.Errorf("socklb: read counter %d: %w", i, err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return c, nil
}

// Frontends returns how many frontends the maps hold.
func (d *Datapath) Frontends() int { return len(d.current) }

// svcKey is frontend f as the services map's key.
func svcKey(f datapath.Frontend) socklbSvcKey {
	var k socklbSvcKey
	k.Addr.W, k.Family = datapath.WireAddr(f.Addr)
	k.Port, k.Proto = datapath.WirePort(f.Port), uint8(f.Proto)
	return k
}

// endpointOf is ep as the maps hold an endpoint.
func endpointOf(ep netip.AddrPort) socklbEndpoint {
	var e socklbEndpoint
	e.Addr.W, e.Family = datapath.WireAddr(ep.Addr())
	e.Port = datapath.WirePort(ep.Port())
	return e
}

// endpointFromWire is the inverse of endpointOf.
func endpointFromWire(e socklbEndpoint) netip.AddrPort {
	return netip.AddrPortFrom(datapath.AddrFromWire(e.Addr.W, e.Family), datapath.WirePort(e.Port))
}

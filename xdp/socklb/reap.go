// SPDX-License-Identifier: Apache-2.0
package socklb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// ErrReapUnsupported is wrapped by ReapUDPErr and CloseLostUDP's error when the kernel cannot
// destroy sockets from BPF (bpf_sock_destroy and UDP socket iterators need Linux 6.5). It
// wraps datapath.ErrUnsupported.
var ErrReapUnsupported = fmt.Errorf("socklb: closing the UDP sockets of removed endpoints: %w", datapath.ErrUnsupported)

// DefaultNetnsDir is where containerd and CRI-O pin Pods' network namespaces.
const DefaultNetnsDir = "/run/netns"

// reaper is the loaded UDP socket iterator (bpf/reap.c) and its link, on the Datapath's maps.
type reaper struct {
	objs reapPrograms
	iter *link.Iter
}

// loadReaper loads the iterator onto d's maps. Its failure is kept in d.reapErr, not returned:
// balancing works without it.
func (d *Datapath) loadReaper() {
	d.reap, d.reapErr = nil, nil
	spec, err := loadReap()
	if err != nil {
		d.reapErr = fmt.Errorf("socklb: the UDP socket iterator's spec: %w", err)
		return
	}
	sizeMaps(spec, d.sockets)
	r := &reaper{}
	err = spec.LoadAndAssign(&r.objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"services":   d.objs.Services,
		"members":    d.objs.Members,
		"revnat_udp": d.objs.RevnatUdp,
	}})
	if err != nil {
		d.reapErr = fmt.Errorf("socklb: load the UDP socket iterator: %w", unsupported(err))
		return
	}
	r.iter, err = link.AttachIter(link.IterOptions{Program: r.objs.SocklbReapUdp})
	if err != nil {
		r.objs.Close()
		d.reapErr = fmt.Errorf("socklb: attach the UDP socket iterator: %w", unsupported(err))
		return
	}
	d.reap = r
}

// unsupported adds ErrReapUnsupported to err when it says the kernel lacks what the iterator
// needs (rather than, say, a missing capability).
func unsupported(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: %w", ErrReapUnsupported, err)
	}
	return err
}

// close releases the iterator.
func (r *reaper) close() error {
	return errors.Join(r.iter.Close(), r.objs.Close())
}

// ReapUDPErr returns why CloseLostUDP cannot work (wrapping ErrReapUnsupported when the kernel
// lacks what it needs), nil when it can.
func (d *Datapath) ReapUDPErr() error { return d.reapErr }

// CloseLostUDP closes, in the caller's network namespace and in every one pinned in netnsDir
// (where the container runtime pins Pods', DefaultNetnsDir; "" for the caller's only: see
// Namespaces), the connected UDP sockets that the programs sent to an endpoint that no longer
// serves the frontend they asked for: an endpoint SetConnectFrontend removed, or any endpoint
// of a frontend DeleteConnectFrontend removed. Their applications' next send fails with
// EDESTADDRREQ (the socket is no longer connected) and their next receive with ECONNABORTED; a
// new socket is balanced afresh. Unconnected sockets need none of this (each sendto is
// balanced), nor do TCP connections (kube-proxy leaves them too: their endpoint's end resets
// them). It returns what it closed or failed to close, with the errors of the namespaces it
// could not list or visit. Without the UDP socket iterator it closes nothing and returns an
// error wrapping datapath.ErrUnsupported (and ReapUDPErr).
func (d *Datapath) CloseLostUDP(netnsDir string) ([]datapath.ClosedSocket, error) {
	if d.reap == nil {
		return nil, d.noReaper()
	}
	netns, err := Namespaces(netnsDir)
	closed, err2 := d.reapUDP(netns)
	return closed, errors.Join(err, err2)
}

// noReaper is CloseLostUDP's error without the iterator. It wraps datapath.ErrUnsupported
// whatever kept the iterator from loading (the kernel, or a missing permission): nothing can be
// closed with this Datapath, as ReapUDPErr said when it loaded.
func (d *Datapath) noReaper() error {
	switch {
	case d.reapErr == nil:
		return ErrReapUnsupported
	case errors.Is(d.reapErr, datapath.ErrUnsupported):
		return d.reapErr
	}
	return fmt.Errorf("socklb: no UDP socket iterator (%w): %w", datapath.ErrUnsupported, d.reapErr)
}

// reapUDP is CloseLostUDP in each network namespace in netns (paths of nsfs files:
// /run/netns/<name>, /proc/<pid>/ns/net). A namespace given twice, or under two names, is
// visited once; one that no longer exists (or whose file no longer holds a namespace) is
// skipped. It returns what it destroyed, and the errors of the namespaces it could not visit.
func (d *Datapath) reapUDP(netns []string) ([]datapath.ClosedSocket, error) {
	if d.reap == nil {
		return nil, d.noReaper()
	}
	var (
		out  []datapath.ClosedSocket
		errs []error
		seen = map[[2]uint64]bool{}
	)
	for _, path := range netns {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("socklb: network namespace %s: %w", path, err))
			}
			continue
		}
		id := [2]uint64{uint64(st.Dev), st.Ino}
		if seen[id] {
			continue
		}
		seen[id] = true
		reaped, err := d.reap.in(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EINVAL) {
			continue // the Pod went away meanwhile (its file is unmounted: setns refuses it)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("socklb: close UDP sockets in network namespace %s: %w", path, err))
		}
		out = append(out, reaped...)
	}
	return out, errors.Join(errs...)
}

// in runs the iterator in the network namespace at path and decodes what it destroyed.
func (r *reaper) in(path string) ([]datapath.ClosedSocket, error) {
	ns, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	rc, err := openIn(ns, r.iter)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// The walk runs as the output is read: read it to the end, in reads well below the
	// kernel's iterator buffer (a record that overflows it is dropped, and its socket, already
	// destroyed, is not seen again).
	var raw []byte
	chunk := make([]byte, 4096)
	for {
		n, err := rc.Read(chunk)
		raw = append(raw, chunk[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("run the UDP socket iterator: %w", err)
		}
	}
	var (
		out []datapath.ClosedSocket
		rec reapReapRecord
		sz  = binary.Size(rec)
	)
	if len(raw)%sz != 0 {
		return nil, fmt.Errorf("the UDP socket iterator wrote %d bytes, not a whole number of %d-byte records", len(raw), sz)
	}
	for rd := bytes.NewReader(raw); rd.Len() > 0; {
		if err := binary.Read(rd, binary.NativeEndian, &rec); err != nil {
			return out, fmt.Errorf("decode the UDP socket iterator's output: %w", err)
		}
		x := datapath.ClosedSocket{
			Netns:    path,
			Endpoint: netip.AddrPortFrom(datapath.AddrFromWire(rec.Peer.Addr.W, rec.Peer.Family), datapath.WirePort(rec.Peer.Port)),
			Frontend: netip.AddrPortFrom(datapath.AddrFromWire(rec.Front.Addr.W, rec.Front.Family), datapath.WirePort(rec.Front.Port)),
		}
		if rec.Err != 0 {
			x.Err = syscall.Errno(-rec.Err)
		}
		out = append(out, x)
	}
	return out, nil
}

// openIn opens an instance of it inside network namespace ns: a socket iterator walks the
// sockets of the namespace its reader was opened in. The opening thread enters ns and comes
// back; a thread that cannot come back is never reused (it stays locked to its goroutine, and
// ends with it).
func openIn(ns *os.File, it *link.Iter) (io.ReadCloser, error) {
	type opened struct {
		rc  io.ReadCloser
		err error
	}
	done := make(chan opened, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- opened{nil, fmt.Errorf("open this thread's network namespace: %w", err)}
			return
		}
		defer home.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- opened{nil, fmt.Errorf("enter the namespace: %w", err)}
			return
		}
		rc, err := it.Open()
		if err != nil {
			err = fmt.Errorf("open the UDP socket iterator: %w", err)
		}
		if berr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); berr != nil {
			// The thread stays locked: it ends with this goroutine.
			if rc != nil {
				rc.Close()
			}
			done <- opened{nil, errors.Join(err, fmt.Errorf("return to the agent's namespace: %w", berr))}
			return
		}
		runtime.UnlockOSThread()
		done <- opened{rc, err}
	}()
	o := <-done
	return o.rc, o.err
}

// Namespaces returns the network namespaces CloseLostUDP visits: the caller's own, then
// every namespace pinned in dir (where the container runtime pins Pods', DefaultNetnsDir), in
// name order. A dir that does not exist gives only the caller's.
func Namespaces(dir string) ([]string, error) {
	out := []string{"/proc/self/ns/net"}
	if dir == "" {
		return out, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("socklb: list network namespaces in %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(names)
	return append(out, names...), nil
}

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
)

// ErrReapUnsupported is wrapped by ReapUDPErr and ReapUDP's error when the kernel cannot
// destroy sockets from BPF (bpf_sock_destroy and UDP socket iterators need Linux 6.5).
var ErrReapUnsupported = errors.New("socklb: closing the UDP sockets of removed endpoints is not supported by this kernel")

// DefaultNetnsDir is where containerd and CRI-O pin Pods' network namespaces.
const DefaultNetnsDir = "/run/netns"

// Reaped is a connected UDP socket that ReapUDP destroyed.
type Reaped struct {
	Netns    string         // the network namespace's path, as given to ReapUDP
	Endpoint netip.AddrPort // the endpoint the socket was connected to
	Frontend netip.AddrPort // the cluster IP and port the application had asked for
	Err      error          // the kernel's error when it could not destroy the socket
}

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

// ReapUDPErr returns why ReapUDP cannot work (wrapping ErrReapUnsupported), nil when it can.
func (d *Datapath) ReapUDPErr() error { return d.reapErr }

// ReapUDP destroys, in each network namespace in netns (paths of nsfs files: /run/netns/<name>,
// /proc/<pid>/ns/net), the connected UDP sockets that the programs sent to an endpoint that no
// longer serves the frontend they asked for: an endpoint Apply removed, or any endpoint of a
// frontend Apply removed. Their applications' next send fails with EDESTADDRREQ (the socket is no
// longer connected) and their next receive with ECONNABORTED; a new socket is balanced afresh. Unconnected sockets need none of this (each sendto is
// balanced), nor do TCP connections (kube-proxy leaves them too: their endpoint's end resets
// them). A namespace given twice, or under two names, is visited once; one that no longer
// exists (or whose file no longer holds a namespace) is skipped. It returns what it destroyed,
// and the errors of the namespaces it could not visit; without the iterator, ReapUDPErr.
func (d *Datapath) ReapUDP(netns []string) ([]Reaped, error) {
	if d.reap == nil {
		return nil, d.reapErr
	}
	var (
		out  []Reaped
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
func (r *reaper) in(path string) ([]Reaped, error) {
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
		out []Reaped
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
		x := Reaped{
			Netns:    path,
			Endpoint: netip.AddrPortFrom(fromWire(rec.Peer.Addr.W, rec.Peer.Family), htons(rec.Peer.Port)),
			Frontend: netip.AddrPortFrom(fromWire(rec.Front.Addr.W, rec.Front.Family), htons(rec.Front.Port)),
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

// Namespaces returns the network namespaces a node's ReapUDP visits: the caller's own, then
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

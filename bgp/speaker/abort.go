// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/bgp"
)

// abortSessions shuts down this process's TCP connections to the peers (FIN, no BGP
// NOTIFICATION), as the kernel would if the process died, so that the peers start graceful
// restart instead of dropping the routes. GoBGP offers no way to close a session without a
// NOTIFICATION, so the sockets are found among the process's own descriptors: a stream
// socket whose remote end is a peer's address and port, or whose local port is listenPort
// (a session the peer opened). It returns how many it shut down.
func abortSessions(peers []bgp.Peer, listenPort int32) int {
	want := make(map[netip.Addr]uint16, len(peers))
	for _, p := range peers {
		want[p.Address] = p.WithDefaults().Port
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
			continue
		}
		remote, err := unix.Getpeername(fd)
		if err != nil {
			continue
		}
		raddr, rport, ok := sockaddr(remote)
		if !ok {
			continue
		}
		port, isPeer := want[raddr]
		if !isPeer {
			continue
		}
		local, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		_, lport, _ := sockaddr(local)
		if rport != port && (listenPort <= 0 || int32(lport) != listenPort) {
			continue
		}
		if unix.Shutdown(fd, unix.SHUT_RDWR) == nil {
			n++
		}
	}
	return n
}

func sockaddr(sa unix.Sockaddr) (netip.Addr, uint16, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr), uint16(a.Port), true
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port), true
	}
	return netip.Addr{}, 0, false
}

// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Generic (SKB) mode runs the program after the kernel has built an skb, and so after GRO and
// LRO: a coalesced TCP super-segment arrives longer than the MTU with its TCP checksum only
// partial (CHECKSUM_PARTIAL: the field holds the pseudo-header's sum, which the egress device or
// GSO completes). An XDP program cannot see an skb's checksum state; the datapath's incremental
// checksum updates (RFC 1624) assume a complete checksum, so they would corrupt such a segment,
// and the MTU check would answer it with an ICMP "too big" its sender never caused. The XDP
// datapath therefore attaches in generic mode only to an interface that coalesces nothing.

// ethtool commands and flags (linux/ethtool.h).
const (
	ethtoolGFlags = 0x00000025 // ETHTOOL_GFLAGS: get the ETH_FLAG_* flags
	ethtoolGGRO   = 0x0000002b // ETHTOOL_GGRO: get GRO on or off
	ethFlagLRO    = 1 << 15    // ETH_FLAG_LRO
)

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqPtr is struct ifreq holding a pointer (ifr_data).
type ifreqPtr struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// ethtoolGet runs the ethtool get command cmd on ifname (in the calling thread's network
// namespace) and returns its value.
func ethtoolGet(ifname string, cmd uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	v := &ethtoolValue{cmd: cmd}
	req := &ifreqPtr{data: uintptr(unsafe.Pointer(v))}
	copy(req.name[:unix.IFNAMSIZ-1], ifname)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req)))
	runtime.KeepAlive(v)
	runtime.KeepAlive(req)
	if errno != 0 {
		return 0, fmt.Errorf("ethtool command %#x on %s: %w", cmd, ifname, errno)
	}
	return v.data, nil
}

// rxCoalescing names what ifname coalesces received packets with before generic XDP sees them
// ("GRO", "LRO"), none when nothing. A driver that cannot say (EOPNOTSUPP) has none of it.
func rxCoalescing(ifname string) ([]string, error) {
	var on []string
	gro, err := ethtoolGet(ifname, ethtoolGGRO)
	switch {
	case err == nil && gro != 0:
		on = append(on, "GRO")
	case err != nil && !isNotSupported(err):
		return nil, err
	}
	flags, err := ethtoolGet(ifname, ethtoolGFlags)
	switch {
	case err == nil && flags&ethFlagLRO != 0:
		on = append(on, "LRO")
	case err != nil && !isNotSupported(err):
		return nil, err
	}
	return on, nil
}

func isNotSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP)
}

// genericModeSafe says why the XDP datapath may not attach to ifname in generic mode (nil: it
// may).
func genericModeSafe(ifname string) error {
	on, err := rxCoalescing(ifname)
	if err != nil {
		return fmt.Errorf("generic mode needs receive coalescing off, which could not be read: %w", err)
	}
	if len(on) > 0 {
		return fmt.Errorf("generic mode refused: %v is on, so generic XDP would see coalesced TCP segments longer "+
			"than the MTU with partial checksums, which the datapath would corrupt; turn it off "+
			"(ethtool -K %s gro off lro off rx-gro-hw off) or use a driver with native XDP", on, ifname)
	}
	return nil
}

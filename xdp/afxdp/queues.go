// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels (ETHTOOL_GCHANNELS).
type ethtoolChannels struct {
	cmd                                         uint32
	maxRX, maxTX, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with its ifr_data member.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// rxQueues returns the number of receive queues ifname uses (ethtool's channels: rx-only plus
// combined ones), in the calling thread's network namespace. A driver without channels
// (EOPNOTSUPP) has one.
func rxQueues(ifname string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("receive queues of %s: %w", ifname, err)
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	var req ifreqData
	copy(req.name[:unix.IFNAMSIZ-1], ifname)
	req.data = uintptr(unsafe.Pointer(&ch))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	if errno != 0 {
		if errors.Is(errno, unix.EOPNOTSUPP) {
			return 1, nil
		}
		return 0, fmt.Errorf("receive queues of %s: ETHTOOL_GCHANNELS: %w", ifname, errno)
	}
	return max(1, int(ch.rxCount)+int(ch.combinedCount)), nil
}

// SPDX-License-Identifier: Apache-2.0
package gen

import (
	"fmt"
	"net"
)

// ifindexOf resolves ifname in the calling thread's namespace.
func ifindexOf(ifname string) (int, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("generator interface %q: %w", ifname, err)
	}
	return iface.Index, nil
}

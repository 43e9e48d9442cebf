// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"context"
	"net"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// inNetNS runs fn inside the control plane's network namespace (Options.NetNS), or here when it
// has none. Sockets fn opens stay in that namespace.
func (cp *ControlPlane) inNetNS(fn func() error) error {
	if cp.netns == "" {
		return fn()
	}
	return (&netlab.NS{Name: cp.netns}).Do(fn)
}

// dialer returns a DialContext that connects from inside the control plane's network namespace.
func (cp *ControlPlane) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := cp.inNetNS(func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// NetNS returns the network namespace the control plane runs in ("" for this process's own).
func (cp *ControlPlane) NetNS() string { return cp.netns }

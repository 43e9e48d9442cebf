// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"errors"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// closeLostUDP closes, in the agent's network namespace and the Pods' pinned in NetnsDir, the
// connected UDP sockets whose endpoint no longer serves their frontend, logs them and returns
// how many it closed. Failures are logged: balancing goes on without it. A datapath that
// cannot close sockets at all says so once, when it is loaded (cmd/xlb), not here.
func (a *agent) closeLostUDP() int {
	closed, err := a.dp.CloseLostUDP(a.opts.NetnsDir)
	if errors.Is(err, datapath.ErrUnsupported) && len(closed) == 0 {
		return 0
	}
	if err != nil {
		a.log.Warn("closing connected UDP sockets of removed endpoints", "err", err)
	}
	n := 0
	for _, s := range closed {
		if s.Err != nil {
			a.log.Warn("could not close a connected UDP socket of a removed endpoint", "netns", s.Netns, "endpoint", s.Endpoint, "frontend", s.Frontend, "err", s.Err)
			continue
		}
		n++
		a.log.Info("closed a connected UDP socket: its endpoint left the frontend", "netns", s.Netns, "endpoint", s.Endpoint, "frontend", s.Frontend)
	}
	return n
}

// SPDX-License-Identifier: Apache-2.0
package main

// `xlb cleanup`: detach and unpin whatever xlb or its agent left pinned.

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/xlb-dev/xlb/xdp/dsr"
	xdpgw "github.com/xlb-dev/xlb/xdp/gateway"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

func newCleanupCmd() *cobra.Command {
	var pin string
	cmd := &cobra.Command{
		Use:   "cleanup [--pin-path DIR]",
		Short: "Detach every program and remove every map and link xlb pinned",
		Long: `Detach every program and remove every pin xlb run (or xlb agent) made in DIR: the
gateway's XDP datapath (default ` + xdpgw.DefaultPinPath + `), a node agent's socket load balancer
(` + socklb.DefaultPinPath + `) or its direct server return (` + dsr.DefaultPinPath + `).
Refused while an xlb run daemon holds DIR: stop it first.`,
		Example: `  xlb cleanup
  xlb cleanup --pin-path ` + socklb.DefaultPinPath,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return cleanupPins(pin) },
	}
	cmd.Flags().StringVar(&pin, "pin-path", xdpgw.DefaultPinPath, "the bpffs `directory` xlb pinned into")
	return cmd
}

// cleanupPins removes everything pinned under dir (links first, so forwarding stops cleanly):
// the gateway's XDP datapath, a node agent's socket load balancer or its direct server return,
// whichever dir holds.
func cleanupPins(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// DSR first: its services and stats pins have the socket load balancer's names.
	if dsr.HasPins(dir) {
		return dsr.RemovePinned(dir)
	}
	if socklb.HasPins(dir) {
		return socklb.RemovePinned(dir)
	}
	// Any conntrack size and Maglev capacity: adopt whatever is pinned.
	d, err := xdpgw.LoadPinned(dir)
	if err != nil {
		return err
	}
	return d.Remove()
}

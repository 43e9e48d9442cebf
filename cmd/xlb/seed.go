// SPDX-License-Identifier: Apache-2.0
package main

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// newSeedCmd is `xlb seed`: a random flow-hash seed to give every gateway of a site.
func newSeedCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "seed",
		Short: "Print a random flow-hash seed for the gateways of a site",
		Long: `Print a random flow-hash seed (1 to 4294967295, from the system's cryptographic random
source), for datapath.seed in every gateway's file, or for spec.seed of SiteSettings site in
Kubernetes mode. Every gateway of a site must run with the same seed, and it should be secret:
anyone who knows it can compute which backend and which handshake slot a flow lands on. In
Kubernetes mode the gateways write a random one into SiteSettings themselves when neither it
nor their files set one. Changing the seed of a running site remaps the flows without a conntrack
entry as a Maglev table change does; the gateways take it when they restart (one at a time).`,
		Example: `  xlb seed
  kubectl patch sitesettings site --type merge -p "{\"spec\":{\"seed\":$(xlb seed)}}"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := randomSeed()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), s)
			return nil
		},
	}
}

// randomSeed returns a random seed that is not a published one (datapath.PublishedSeed).
func randomSeed() (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("read random bytes: %w", err)
		}
		if s := binary.LittleEndian.Uint32(b[:]); !datapath.PublishedSeed(s) {
			return s, nil
		}
	}
}

// runningSeed returns the seed of the XDP datapath already forwarding from the pins cfg names
// (an earlier process's), if one does: the AF_XDP datapath keeps none across processes.
func runningSeed(cfg *config.Config) (uint32, bool) {
	if cfg.Datapath.Kind == config.DatapathAFXDP {
		return 0, false
	}
	s, err := gateway.PinnedSeed(cmp.Or(cfg.Datapath.PinPath, gateway.DefaultPinPath))
	return s, err == nil
}

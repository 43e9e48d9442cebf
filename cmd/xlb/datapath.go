// SPDX-License-Identifier: Apache-2.0
package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/xdp/afxdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// loadDatapath loads the datapath the configuration asks for (datapath.kind).
func loadDatapath(cfg *config.Config, log *slog.Logger) (datapath.Gateway, error) {
	c := cfg.Datapath
	if c.Kind == config.DatapathAFXDP {
		// An XDP datapath left pinned (a plain SIGTERM) is still attached and forwarding: the
		// steer program could not attach next to it, and two datapaths must not share a gateway.
		pins := cmp.Or(c.PinPath, gateway.DefaultPinPath)
		if _, err := os.Stat(pins); err == nil {
			return nil, fmt.Errorf("datapath kind afxdp: the XDP datapath's pins are in %s (it may still be "+
				"attached and forwarding); run `xlb cleanup --pin-path %s` first", pins, pins)
		}
		if c.MaglevSlots != 0 {
			log.Warn("datapath.maglevSlots does not apply to the AF_XDP datapath; ignored")
		}
		d, err := afxdp.Load(afxdp.Config{Engine: c.Settings, Logger: log})
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	d, err := gateway.Load(gateway.Options{Settings: c.Settings, PinPath: c.PinPath, MaglevSlots: c.MaglevSlots, Logger: log})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// SPDX-License-Identifier: Apache-2.0
package main

// `xlb run`: the gateway daemon.

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xlb-dev/xlb/lb/gateway"
)

func newRunCmd() *cobra.Command {
	var cfgPath string
	var cleanup bool
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the gateway daemon: the services of a YAML file, or a cluster's LoadBalancer Services",
		Long: `Run the appliance: the services of FILE, and with a kubernetes section in FILE also the
LoadBalancer Services of its class (Kubernetes mode).

SIGHUP reloads FILE (an invalid file is logged and the running configuration stays).
SIGTERM/SIGINT stop the daemon and, unless --cleanup-on-exit, leave forwarding in place: maps
and links stay pinned and the next daemon adopts them (with datapath.kind afxdp forwarding
stops with the daemon).`,
		Example: `  xlb run --config /etc/xlb/xlb.yaml
  xlb run --config deploy/xlb.example.yaml --cleanup-on-exit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgPath == "" {
				return usagef("--config is required")
			}
			// Catch SIGHUP first: its default action ends the process, and loading the
			// datapath takes a while. A SIGHUP that comes during start-up is handled (a
			// reload) once running.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return gateway.Run(ctx, gateway.Options{ConfigPath: cfgPath, LoadDatapath: loadDatapath,
				Version: buildInfo().Version, CleanupOnExit: cleanup, Reload: hup, Log: cmd.ErrOrStderr()})
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "the YAML configuration `file` (required)")
	cmd.Flags().BoolVar(&cleanup, "cleanup-on-exit", false, "on SIGTERM/SIGINT, detach and unpin everything instead of leaving forwarding in place")
	return cmd
}

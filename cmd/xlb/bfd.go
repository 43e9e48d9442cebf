// SPDX-License-Identifier: Apache-2.0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/spf13/cobra"

	"github.com/xlb-dev/xlb/bgp/bfd"
	"github.com/xlb-dev/xlb/lb/config"
	xdpgw "github.com/xlb-dev/xlb/xdp/gateway"
)

// newBFDCmd is `xlb bfd --config FILE` (run the BFD sessions of FILE's peers, apart from the
// daemon) and `xlb bfd status --config FILE` (print them).
func newBFDCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "bfd --config FILE",
		Short: "Run the BGP peers' BFD sessions in a process apart from the daemon",
		Long: `Run the BFD sessions of FILE's BGP peers (bgp.bfdProcess: true) in a process apart from the
daemon, supervised on its own: they stay up while the XDP datapath pinned at datapath.pinPath
is attached to FILE's interfaces and the daemon's health lease (if it wrote one) is current,
whether the daemon runs or not. SIGHUP rereads FILE's peers.`,
		Example: `  xlb bfd --config /etc/xlb/xlb.yaml
  xlb bfd status --config /etc/xlb/xlb.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, pin, err := bfdConfig(cfgPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			return runBFD(ctx, cfgPath, cfg, pin, hup, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "the gateway's YAML configuration `file` (required)")

	var statusCfg string
	status := &cobra.Command{
		Use:   "status --config FILE",
		Short: "Print the sessions of the running xlb bfd and the packets it dropped, as JSON",
		Long: `Print the sessions of the xlb bfd running for FILE's pin path, and the packets it dropped
(wrong TTL, not a peer, wrong discriminator), as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, pin, err := bfdConfig(statusCfg)
			if err != nil {
				return err
			}
			return bfdStatus(bfd.SocketPath(pin), cmd.OutOrStdout())
		},
	}
	status.Flags().StringVar(&statusCfg, "config", "", "the gateway's YAML configuration `file` (required)")
	cmd.AddCommand(status)
	return cmd
}

// bfdConfig loads the configuration at path and returns it with its datapath's pin path.
func bfdConfig(path string) (*config.Config, string, error) {
	if path == "" {
		return nil, "", usagef("--config is required")
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, "", err
	}
	pin := cfg.Datapath.PinPath
	if pin == "" {
		pin = xdpgw.DefaultPinPath
	}
	return cfg, pin, nil
}

// bfdPeers are the config's BGP peers with BFD on.
func bfdPeers(cfg *config.Config) []bfd.Peer {
	if cfg.BGP == nil {
		return nil
	}
	var out []bfd.Peer
	for _, p := range cfg.BGP.Peers {
		if p.BFD.Enabled {
			out = append(out, bfd.Peer{Address: p.Address, Local: p.LocalAddress, BFD: p.BFD})
		}
	}
	return out
}

// runBFD runs the sessions until ctx ends; SIGHUP rereads the file's peers.
func runBFD(ctx context.Context, path string, cfg *config.Config, pin string, hup <-chan os.Signal, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ifaces := make([]string, 0, len(cfg.Interfaces))
	for _, i := range cfg.Interfaces {
		ifaces = append(ifaces, i.Name)
	}
	lease := bfd.LeasePath(pin)
	srv := bfd.NewServer(bfd.Options{Log: log, Check: func() error { return forwarding(pin, ifaces, lease) }})
	if err := srv.SetPeers(ctx, bfdPeers(cfg)); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Run(ctx) }()
	go func() { errc <- bfd.Serve(ctx, bfd.SocketPath(pin), srv) }()
	log.Info("xlb bfd started", "peers", len(bfdPeers(cfg)), "pinPath", pin, "interfaces", ifaces,
		"lease", lease, "socket", bfd.SocketPath(pin))
	for {
		select {
		case err := <-errc:
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				<-errc
				return nil
			}
		case <-hup:
			next, err := config.Load(path)
			if err == nil {
				err = srv.SetPeers(ctx, bfdPeers(next))
			}
			if err != nil {
				log.Error("reload: bfd sessions unchanged", "error", err)
				continue
			}
			log.Info("reloaded", "peers", len(bfdPeers(next)))
		}
	}
}

// forwarding is `xlb bfd`'s judgement of the gateway's forwarding plane: the XDP program
// pinned at pin attached to every interface (its pinned link present, attached to that
// interface, which is up), and the daemon's health lease, if it ever wrote one, current and
// healthy. `xlb cleanup`, a detached program or a deleted interface fail the first; a daemon
// that declared its datapath unhealthy, or that has been dead longer than its lease, the
// second.
func forwarding(pin string, ifaces []string, lease string) error {
	for _, name := range ifaces {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("interface %s: %w", name, err)
		}
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagRunning == 0 {
			return fmt.Errorf("interface %s is down", name)
		}
		l, err := link.LoadPinnedLink(filepath.Join(pin, "links", name), nil)
		if err != nil {
			return fmt.Errorf("no XDP program pinned for %s: %w", name, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			return fmt.Errorf("XDP link of %s: %w", name, err)
		}
		if x := info.XDP(); x == nil || int(x.Ifindex) != ifc.Index {
			return fmt.Errorf("the XDP link pinned for %s is not attached to it", name)
		}
	}
	return bfd.CheckLease(lease)
}

// bfdStatus prints the sessions of the `xlb bfd` at socket, as JSON.
func bfdStatus(socket string, stdout io.Writer) error {
	c, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		return fmt.Errorf("is xlb bfd running? %w", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var r bfd.Report
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return fmt.Errorf("%s: %w", socket, err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return errors.Join(enc.Encode(r))
}

// SPDX-License-Identifier: Apache-2.0
package main

// `xlb agent`: the node agent's command line (its flags are agentFlags, its run runAgent).

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newAgentCmd() *cobra.Command {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent [--node NAME] [flags]",
		Short: "Run the node agent: cluster IPs balanced at the sockets, the node side of direct server return",
		Long: `Run the node agent (one per node, e.g. as a DaemonSet).

Connections from the node's processes and Pods to a Service's cluster IP go straight to one of
its endpoints (default NAME: $NODE_NAME; default cgroup: the cgroup v2 root; /metrics and
/healthz on --listen). Connected UDP sockets whose endpoint is removed are closed, in the
agent's network namespace and in the Pods' pinned in --netns-dir. SIGTERM/SIGINT stop it and,
unless --cleanup-on-exit, leave balancing in place (pinned in --pin-path, adopted by the next
agent; xlb cleanup --pin-path DIR removes it).

--dsr-interface runs the node side of direct server return on the node's uplinks: carriers
accepted for the node's endpoints of the LoadBalancer Services of --class, their replies given
the VIP (also on the interfaces toward the node's Pods, unless --dsr-hairpin=false), and the
Node annotated xlb.dev/dsr=v1 for the gateways. It is left serving at exit like the socket load
balancer; --cleanup-on-exit withdraws the annotation, then detaches it. Carried packets of flows
the node does not know, other than TCP SYNs, are recorded within the budgets a second (over
them delivered, their replies not rewritten).

With --config FILE (the gateways' YAML file) the agent runs in file mode: direct server return
only, for the backends of FILE on node NAME whose dsr is true; no apiserver, no socket load
balancer; SIGHUP reloads FILE (an invalid one is logged, the last pairs stay). See docs/agent.md.`,
		Example: `  xlb agent --node "$NODE_NAME" --cgroup /host/cgroup --dsr-interface eth0
  xlb agent --config /etc/xlb/xlb.yaml --node n1 --dsr-interface eth0,eth1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Flags().Visit(func(f *pflag.Flag) { o.set = append(o.set, f.Name) })
			if o.config != "" {
				// File mode reloads on SIGHUP: catch it before the datapath's load, as xlb
				// run does.
				hup := make(chan os.Signal, 1)
				signal.Notify(hup, syscall.SIGHUP)
				defer signal.Stop(hup)
				o.reload = hup
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runAgent(ctx, o, cmd.ErrOrStderr())
		},
	}
	fs := flag.NewFlagSet("xlb agent", flag.ContinueOnError)
	agentFlags(fs, &o)
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// SPDX-License-Identifier: Apache-2.0
package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/gateway"
)

// bgpCLI runs `xlb bgp` with args (after "bgp"); it returns the exit code.
func bgpCLI(args []string, stdout, stderr io.Writer) int {
	return execute(append([]string{"bgp"}, args...), stdout, stderr)
}

// newBGPCmd is `xlb bgp [--listen ADDR] [--json]`: it prints the daemon's BGP sessions and
// announced routes.
func newBGPCmd() *cobra.Command {
	var listen string
	var raw bool
	cmd := &cobra.Command{
		Use:   "bgp [--listen ADDR] [--json]",
		Short: "Show the running daemon's BGP sessions and announced routes",
		Long: `Show the running daemon's BGP sessions and announced routes, from its /bgp endpoint on
ADDR (its config's listen).`,
		Example: `  xlb bgp
  xlb bgp --listen 127.0.0.1:9610 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := cmd.OutOrStdout()
			body, err := gateway.FetchBGPStatus(listen)
			if err != nil {
				return err
			}
			if raw {
				_, _ = stdout.Write(body)
				return nil
			}
			var st gateway.BGPStatus
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("http://%s/bgp: %w", listen, err)
			}
			if !st.Enabled {
				fmt.Fprintf(stdout, "the daemon at %s runs no BGP speaker (its config has no bgp section)\n", listen)
				return nil
			}
			gateway.PrintBGPStatus(stdout, st)
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", config.DefaultListen, "the daemon's HTTP `address` (its config's listen)")
	cmd.Flags().BoolVar(&raw, "json", false, "print the daemon's JSON as it is")
	return cmd
}

// SPDX-License-Identifier: Apache-2.0
package main

// `xlb show`: what the datapath pinned under a directory is doing, read-only (xdp/inspect). This
// file parses the flags and prints the part's document as JSON or text.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/dsr"
	"github.com/xlb-dev/xlb/xdp/gateway"
	"github.com/xlb-dev/xlb/xdp/inspect"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// DefaultShowLimit is how many conntrack entries `xlb show flows` prints unless told otherwise.
const DefaultShowLimit = 1000

// showParts are the parts of `xlb show`, each with its own flags (besides --pin-path and --json).
var showParts = map[string][]string{"services": {"vip"}, "flows": {"vip", "limit"}, "reasons": nil,
	"flow": {"client", "to", "proto", "seed"}, "agent": nil, "dsr": {"limit"}}

// showCLI runs `xlb show` with args (after "show"), printing to stdout; it returns the exit code.
func showCLI(args []string, stdout, stderr io.Writer) int {
	return execute(append([]string{"show"}, args...), stdout, stderr)
}

// showOptions are the flags of `xlb show`.
type showOptions struct {
	pin, vip, client, to, proto, seed string
	asJSON                            bool
	limit                             int
}

func newShowCmd() *cobra.Command {
	var o showOptions
	cmd := &cobra.Command{
		Use:   "show [services|flows|reasons|flow|agent|dsr] [flags]",
		Short: "Show what the pinned XDP datapath is doing, from its maps",
		Long: `Show what the datapath pinned in --pin-path is doing, from its maps alone (read-only; no
daemon needed). The part may come before, between or after the flags:

  services  the services with their backends' Maglev shares and counters, and the backends in
            no table (the default); --vip keeps one VIP's. Port * is all ports (the client's
            port kept).
  flows     at most --limit flows (0: all; the most recently used first; expired ones are
            listed until the LRU reuses them): a TCP connection from its handshake's ACK, held
            in its handshake slot until a SYN of another tuple needs the slot, then in
            conntrack; a UDP flow from its second datagram. --vip keeps one VIP's.
  reasons   the verdict counters.
  flow      where one flow's packets go (--client, --to, --proto): its frontend, source
            ranges, the Maglev slot of a new connection (the seed read from the attached
            program unless --seed), its conntrack entry and its handshake-table entry. Run it
            on each gateway to see that they agree.
  agent     a node agent's cluster-IP frontends, their endpoints and its counters (default
            --pin-path ` + socklb.DefaultPinPath + `).
  dsr       a node agent's direct server return: the interfaces it is attached to, the
            {frontend, endpoint} pairs it accepts carriers for, its counters and at most
            --limit recorded flows (default --pin-path ` + dsr.DefaultPinPath + `).`,
		Example: `  xlb show
  xlb show flows --vip 198.18.100.1 --limit 20
  xlb show flow --client 198.18.0.10:40000 --to 198.18.100.1:80
  xlb show dsr --json`,
		ValidArgs: []string{"services", "flows", "reasons", "flow", "agent", "dsr"},
		RunE: func(cmd *cobra.Command, args []string) error {
			what := ""
			if len(args) > 0 {
				what = args[0]
			}
			if len(args) > 1 {
				return usagef("unexpected argument %q after %q", args[1], what)
			}
			return runShow(cmd, cmp.Or(what, "services"), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.pin, "pin-path", gateway.DefaultPinPath, "the bpffs `directory` the datapath is pinned in (agent: default "+socklb.DefaultPinPath+"; dsr: default "+dsr.DefaultPinPath+")")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.IntVar(&o.limit, "limit", DefaultShowLimit, "print at most `N` conntrack entries, or dsr flows (0: all)")
	f.StringVar(&o.vip, "vip", "", "only the services and flows of this VIP `address`")
	f.StringVar(&o.client, "client", "", "flow: the client's `address:port`")
	f.StringVar(&o.to, "to", "", "flow: the `address:port` the client sends to (a VIP's)")
	f.StringVar(&o.proto, "proto", "tcp", "flow: the `protocol`, tcp or udp")
	f.StringVar(&o.seed, "seed", "", "flow: the flow-hash `seed` (default: the attached program's)")
	return cmd
}

// runShow prints the part what of the datapath, as o says.
func runShow(cmd *cobra.Command, what string, o showOptions) error {
	stdout := cmd.OutOrStdout()
	// Each part and its own flags: flags of one part given to another are mistakes, not no-ops.
	own, ok := showParts[what]
	if !ok {
		return usagef("unknown part %q: services, flows, reasons, flow, agent or dsr", what)
	}
	var wrong []string
	pinSet := false
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch {
		case f.Name == "pin-path":
			pinSet = true
		case f.Name != "json" && f.Name != "help" && !slices.Contains(own, f.Name):
			wrong = append(wrong, "--"+f.Name)
		}
	})
	if len(wrong) > 0 {
		return usagef("%s: %s: not a flag of this part", what, strings.Join(wrong, ", "))
	}
	var q inspect.FlowQuery
	if what == "flow" {
		var err error
		if q, err = parseFlowQuery(o.client, o.to, o.proto, o.seed); err != nil {
			return usagef("flow: %w", err)
		}
	}
	if o.limit < 0 {
		return usagef("--limit %d: want 0 (all) or more", o.limit)
	}
	var only netip.Addr
	if o.vip != "" {
		a, err := netip.ParseAddr(o.vip)
		if err != nil {
			return usagef("--vip: %w", err)
		}
		only = a
	}
	var doc inspect.Document
	var err error
	switch what {
	case "agent":
		dir := socklb.DefaultPinPath
		if pinSet {
			dir = o.pin
		}
		doc, err = inspect.ReadAgent(dir)
	case "dsr":
		dir := dsr.DefaultPinPath
		if pinSet {
			dir = o.pin
		}
		doc, err = inspect.ReadDSR(dir, o.limit)
	default:
		p, perr := gateway.OpenPinned(o.pin)
		if perr != nil {
			return perr
		}
		defer p.Close()
		switch what {
		case "services":
			doc, err = inspect.ReadServices(p, only)
		case "flows":
			doc, err = inspect.ReadFlows(p, only, o.limit)
		case "reasons":
			doc, err = inspect.ReadReasons(p)
		case "flow":
			doc, err = inspect.ExplainFlow(p, q)
			if errors.Is(err, inspect.ErrSeedUnknown) {
				err = fmt.Errorf("%w: give the seed with --seed (datapath.seed)", err)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	return doc.WriteText(stdout)
}

// parseFlowQuery parses the flags of `xlb show flow`.
func parseFlowQuery(client, to, proto, seed string) (inspect.FlowQuery, error) {
	var q inspect.FlowQuery
	var err error
	if q.Client, err = netip.ParseAddrPort(client); err != nil {
		return q, fmt.Errorf("--client %q: want address:port: %w", client, err)
	}
	if q.To, err = netip.ParseAddrPort(to); err != nil {
		return q, fmt.Errorf("--to %q: want address:port: %w", to, err)
	}
	if q.Proto, err = datapath.ParseProtocol(proto); err != nil {
		return q, fmt.Errorf("--proto: %w", err)
	}
	if seed != "" {
		n, err := strconv.ParseUint(seed, 0, 32)
		if err != nil {
			return q, fmt.Errorf("--seed %q: want 0 to 4294967295", seed)
		}
		v := uint32(n)
		q.Seed = &v
	}
	if err := q.Validate(); err != nil {
		return q, fmt.Errorf("--client, --to: %w", err)
	}
	return q, nil
}

package main

// `xlb show`: what the datapath pinned under a directory is doing, read-only (xdp/inspect). This
// file parses the flags and prints the part's document as JSON or text.

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

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
	fs := flag.NewFlagSet("xlb show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pin := fs.String("pin-path", gateway.DefaultPinPath, "the bpffs `directory` the datapath is pinned in (agent: default "+socklb.DefaultPinPath+"; dsr: default "+dsr.DefaultPinPath+")")
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", DefaultShowLimit, "print at most `N` conntrack entries, or dsr flows (0: all)")
	vip := fs.String("vip", "", "only the services and flows of this VIP `address`")
	client := fs.String("client", "", "flow: the client's `address:port`")
	to := fs.String("to", "", "flow: the `address:port` the client sends to (a VIP's)")
	proto := fs.String("proto", "tcp", "flow: the `protocol`, tcp or udp")
	seed := fs.String("seed", "", "flow: the flow-hash `seed` (default: the attached program's)")
	// The part may come before, between or after the flags.
	what := ""
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		if what != "" {
			fmt.Fprintf(stderr, "xlb show: unexpected argument %q after %q\n", fs.Arg(0), what)
			return 2
		}
		what, args = fs.Arg(0), fs.Args()[1:]
	}
	what = cmp.Or(what, "services")
	// Each part and its own flags: flags of one part given to another are mistakes, not no-ops.
	own, ok := showParts[what]
	if !ok {
		fmt.Fprintf(stderr, "xlb show: unknown part %q: services, flows, reasons, flow, agent or dsr\n", what)
		return 2
	}
	var wrong []string
	pinSet := false
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "pin-path":
			pinSet = true
		case f.Name != "json" && !slices.Contains(own, f.Name):
			wrong = append(wrong, "--"+f.Name)
		}
	})
	if len(wrong) > 0 {
		fmt.Fprintf(stderr, "xlb show %s: %s: not a flag of this part\n", what, strings.Join(wrong, ", "))
		return 2
	}
	var q inspect.FlowQuery
	if what == "flow" {
		var err error
		if q, err = parseFlowQuery(*client, *to, *proto, *seed); err != nil {
			fmt.Fprintf(stderr, "xlb show flow: %v\n", err)
			return 2
		}
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "xlb show: --limit %d: want 0 (all) or more\n", *limit)
		return 2
	}
	var only netip.Addr
	if *vip != "" {
		a, err := netip.ParseAddr(*vip)
		if err != nil {
			fmt.Fprintf(stderr, "xlb show: --vip: %v\n", err)
			return 2
		}
		only = a
	}
	var doc inspect.Document
	var err error
	switch what {
	case "agent":
		dir := socklb.DefaultPinPath
		if pinSet {
			dir = *pin
		}
		doc, err = inspect.ReadAgent(dir)
	case "dsr":
		dir := dsr.DefaultPinPath
		if pinSet {
			dir = *pin
		}
		doc, err = inspect.ReadDSR(dir, *limit)
	default:
		p, perr := gateway.OpenPinned(*pin)
		if perr != nil {
			fmt.Fprintf(stderr, "xlb show: %v\n", perr)
			return 1
		}
		defer p.Close()
		switch what {
		case "services":
			doc, err = inspect.ReadServices(p, only)
		case "flows":
			doc, err = inspect.ReadFlows(p, only, *limit)
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
		fmt.Fprintf(stderr, "xlb show %s: %v\n", what, err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(doc)
	} else {
		err = doc.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "xlb show: %v\n", err)
		return 1
	}
	return 0
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

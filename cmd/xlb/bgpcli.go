package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/gateway"
)

// bgpCLI is `xlb bgp [--listen ADDR] [--json]`: it prints the daemon's BGP sessions and
// announced routes.
func bgpCLI(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb bgp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", config.DefaultListen, "the daemon's HTTP `address` (its config's listen)")
	raw := fs.Bool("json", false, "print the daemon's JSON as it is")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	body, err := gateway.FetchBGPStatus(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "xlb bgp: %v\n", err)
		return 1
	}
	if *raw {
		_, _ = stdout.Write(body)
		return 0
	}
	var st gateway.BGPStatus
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(stderr, "xlb bgp: http://%s/bgp: %v\n", *listen, err)
		return 1
	}
	if !st.Enabled {
		fmt.Fprintf(stdout, "the daemon at %s runs no BGP speaker (its config has no bgp section)\n", *listen)
		return 0
	}
	gateway.PrintBGPStatus(stdout, st)
	return 0
}

// SPDX-License-Identifier: Apache-2.0
package lab

// A gateway's hard failure, as the rest of the site sees it: its links go silent (every frame
// to and from it dropped where its veths arrive, at the router and on the cluster L2, so no
// carrier is lost and no neighbour learns anything) and its xlb stops (SIGSTOP: nothing is
// withdrawn, no TCP session is closed). Only BFD or the hold timer can tell the router.

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// vanishTable is the nftables table that silences a gateway's links (netdev family: before
// anything else on the interface, both ways).
func vanishTable(g *Gateway) string { return "xlb_vanish_" + g.Name }

// Vanish makes g fail hard: its links silent and its xlb stopped. Return undoes it.
func (g *Gateway) Vanish() error {
	s := g.site
	for _, ns := range []*netlab.NS{s.Router.NS, s.L2} {
		rules := fmt.Sprintf(`table netdev %s {
	chain in { type filter hook ingress device "%s" priority -500; policy drop; }
	chain out { type filter hook egress device "%s" priority -500; policy drop; }
}
`, vanishTable(g), g.Name, g.Name)
		cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("lab: silence %s's link in %s: %v: %s", g.Name, ns.Name, err, out)
		}
	}
	if err := g.signal(syscall.SIGSTOP, false); err != nil {
		return err
	}
	g.mu.Lock()
	g.vanished = true
	g.mu.Unlock()
	s.logf("%s: vanished (links silent at the router and the L2, xlb stopped)", g.Name)
	return nil
}

// Return brings g back after Vanish: its xlb continued, its links open again.
func (g *Gateway) Return() error {
	s := g.site
	var errs []string
	if err := g.signal(syscall.SIGCONT, false); err != nil {
		errs = append(errs, err.Error())
	}
	for _, ns := range []*netlab.NS{s.Router.NS, s.L2} {
		out, err := exec.Command("ip", "netns", "exec", ns.Name, "nft", "delete", "table", "netdev", vanishTable(g)).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Sprintf("%s: %v: %s", ns.Name, err, out))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("lab: %s back: %s", g.Name, strings.Join(errs, "; "))
	}
	g.mu.Lock()
	g.vanished = false
	g.mu.Unlock()
	s.logf("%s: back (links open, xlb continued)", g.Name)
	return nil
}

// DropBFD drops the BFD packets (UDP 3784) between the router and g, where g's upstream link
// arrives at the router, until the returned function runs: g's BFD sessions go down and stay
// down, and its BGP sessions run on their hold timers, as without BFD.
func (g *Gateway) DropBFD() (func() error, error) {
	s := g.site
	table := "xlb_nobfd_" + g.Name
	rules := fmt.Sprintf(`table netdev %s {
	chain in { type filter hook ingress device "%s" priority -450; udp dport 3784 drop; }
	chain out { type filter hook egress device "%s" priority -450; udp dport 3784 drop; }
}
`, table, g.Name, g.Name)
	cmd := exec.Command("ip", "netns", "exec", s.Router.NS.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("lab: drop %s's BFD: %v: %s", g.Name, err, out)
	}
	s.logf("%s: BFD packets dropped at the router", g.Name)
	return func() error {
		out, err := exec.Command("ip", "netns", "exec", s.Router.NS.Name, "nft", "delete", "table", "netdev", table).CombinedOutput()
		if err != nil {
			return fmt.Errorf("lab: let %s's BFD through again: %v: %s", g.Name, err, out)
		}
		return nil
	}, nil
}

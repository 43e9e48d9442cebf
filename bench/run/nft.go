// SPDX-License-Identifier: Apache-2.0
package run

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/bench/topo"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// nftTable is the table the NFTables datapath installs in the gateway namespace.
const nftTable = "xlb_bench"

// NFTables is what a kube-proxy (nftables or iptables mode) user has: kernel forwarding with an
// nftables DNAT rule VIP:port -> backend:port and conntrack. An XDP_PASS program on the
// gateway's ingress veth only lets the generator's frames in (a veth drops frames redirected
// into it unless its peer runs XDP); every packet then takes the kernel's path.
type NFTables struct {
	// ConntrackMax, when above the host's nf_conntrack_max, raises that limit for the row and
	// puts the old value back in Stop. It is a host-wide sysctl, read-only inside a namespace,
	// and the 1M-flow row needs room for 1M entries.
	ConntrackMax int
	// Forward, when set, also attaches the XDP_PASS program to the gateway's egress veth, so
	// that the sink's answers (the cps mix's SYN-ACKs, sent with XDP_TX) enter the gateway:
	// conntrack translates them back to the VIP.
	Forward bool

	ns         *netlab.NS
	prog       *ebpf.Program
	link       link.Link
	outLink    link.Link
	restoreMax string // nf_conntrack_max before Start raised it ("" = untouched)
}

// hostConntrackMax is the host's conntrack limit (the init namespace's: writes from other
// namespaces are refused).
const hostConntrackMax = "/proc/sys/net/netfilter/nf_conntrack_max"

// raiseConntrackMax raises the host's nf_conntrack_max to n if it is lower, remembering the old
// value for Stop.
func (n *NFTables) raiseConntrackMax() error {
	b, err := os.ReadFile(hostConntrackMax)
	if err != nil {
		return fmt.Errorf("read %s: %w", hostConntrackMax, err)
	}
	old := strings.TrimSpace(string(b))
	cur, err := strconv.Atoi(old)
	if err != nil {
		return fmt.Errorf("read %s: %q: %w", hostConntrackMax, old, err)
	}
	if cur >= n.ConntrackMax {
		return nil
	}
	if err := os.WriteFile(hostConntrackMax, []byte(strconv.Itoa(n.ConntrackMax)), 0); err != nil {
		return fmt.Errorf("raise %s from %d to %d: %w", hostConntrackMax, cur, n.ConntrackMax, err)
	}
	n.restoreMax = old
	return nil
}

// Name implements Datapath.
func (n *NFTables) Name() string { return "nftables" }

// Start implements Datapath.
func (n *NFTables) Start(_ context.Context, t *topo.Topology) (err error) {
	n.ns = t.Gateway
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("start nftables: %w", err), n.Stop())
		}
	}()
	if n.ConntrackMax > 0 {
		if err := n.raiseConntrackMax(); err != nil {
			return err
		}
	}
	// Conntrack picks up mid-stream ACKs (tcp_loose, the default) and must not judge their
	// sequence numbers: every generated ACK repeats the same ones.
	if err := t.Gateway.SetSysctl("net.netfilter.nf_conntrack_tcp_be_liberal", "1"); err != nil {
		return err
	}
	ruleset := fmt.Sprintf(`table ip %[1]s {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[2]s tcp dport %[3]d dnat to %[4]s:%[5]d
		ip daddr %[2]s udp dport %[3]d dnat to %[4]s:%[5]d
	}
}
`, nftTable, topo.VIP, VIPPort, topo.Backend, BackendPort)
	cmd := t.Gateway.Cmd("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f (table %s) in %s: %v: %s", nftTable, t.Gateway.Name, err, strings.TrimSpace(string(out)))
	}
	if n.prog, err = netlab.PassProgram(); err != nil {
		return err
	}
	if n.link, err = t.Gateway.AttachPass(n.prog, t.GwIn); err != nil {
		return err
	}
	if n.Forward {
		n.outLink, err = t.Gateway.AttachPass(n.prog, t.GwOut)
	}
	return err
}

// Replies implements replier.
func (n *NFTables) Replies() bool { return n.Forward }

// Drops implements Datapath: conntrack's drop counters and the IPv4 stack's discards in the
// gateway namespace.
func (n *NFTables) Drops() (map[string]uint64, error) {
	if n.ns == nil {
		return nil, nil
	}
	out := map[string]uint64{}
	ct, err := n.ns.Cmd("cat", "/proc/net/stat/nf_conntrack").Output()
	if err == nil { // absent until conntrack is loaded
		if err := addHexTable(out, "conntrack.", string(ct), "drop", "early_drop", "insert_failed", "invalid"); err != nil {
			return nil, fmt.Errorf("nftables drops: %w", err)
		}
	}
	snmp, err := n.ns.Cmd("cat", "/proc/net/snmp").Output()
	if err != nil {
		return nil, fmt.Errorf("nftables drops: read /proc/net/snmp in %s: %w", n.ns.Name, err)
	}
	if err := addSNMP(out, string(snmp), "InHdrErrors", "InAddrErrors", "InDiscards", "OutDiscards", "OutNoRoutes"); err != nil {
		return nil, fmt.Errorf("nftables drops: %w", err)
	}
	return out, nil
}

// Flows is the gateway namespace's conntrack entry count.
func (n *NFTables) Flows() (int, error) {
	if n.ns == nil {
		return 0, nil
	}
	out, err := n.ns.Cmd("cat", "/proc/sys/net/netfilter/nf_conntrack_count").Output()
	if err != nil {
		return 0, fmt.Errorf("nftables: read nf_conntrack_count in %s: %w", n.ns.Name, err)
	}
	c, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("nftables: nf_conntrack_count %q: %w", out, err)
	}
	return c, nil
}

// addHexTable sums the named columns of a /proc/net/stat table (a header line, then one line
// of hexadecimal numbers per CPU) into out under prefix+column.
func addHexTable(out map[string]uint64, prefix, table string, cols ...string) error {
	sc := bufio.NewScanner(strings.NewReader(table))
	if !sc.Scan() {
		return errors.New("empty stat table")
	}
	header := strings.Fields(sc.Text())
	for sc.Scan() {
		vals := strings.Fields(sc.Text())
		for i, h := range header {
			for _, c := range cols {
				if h == c && i < len(vals) {
					v, err := strconv.ParseUint(vals[i], 16, 64)
					if err != nil {
						return fmt.Errorf("stat column %s: %w", h, err)
					}
					out[prefix+c] += v
				}
			}
		}
	}
	return nil
}

// addSNMP copies the named Ip: counters of /proc/net/snmp into out as "ip.<name>".
func addSNMP(out map[string]uint64, snmp string, names ...string) error {
	var header []string
	for line := range strings.Lines(snmp) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Ip:" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i, h := range header {
			for _, name := range names {
				if h == name && i < len(f) {
					v, err := strconv.ParseUint(f[i], 10, 64)
					if err != nil {
						return fmt.Errorf("snmp Ip %s: %w", h, err)
					}
					out["ip."+name] = v
				}
			}
		}
		return nil
	}
	return errors.New("no Ip: lines in /proc/net/snmp")
}

// Stop implements Datapath.
func (n *NFTables) Stop() error {
	var errs []error
	if n.outLink != nil {
		errs = append(errs, n.outLink.Close())
		n.outLink = nil
	}
	if n.link != nil {
		errs = append(errs, n.link.Close())
		n.link = nil
	}
	if n.prog != nil {
		errs = append(errs, n.prog.Close())
		n.prog = nil
	}
	if n.ns != nil {
		// Fails harmlessly when Start failed before creating the table.
		_ = n.ns.Cmd("nft", "delete", "table", "ip", nftTable).Run()
		n.ns = nil
	}
	if n.restoreMax != "" {
		if err := os.WriteFile(hostConntrackMax, []byte(n.restoreMax), 0); err != nil {
			errs = append(errs, fmt.Errorf("restore %s to %s: %w", hostConntrackMax, n.restoreMax, err))
		}
		n.restoreMax = ""
	}
	return errors.Join(errs...)
}

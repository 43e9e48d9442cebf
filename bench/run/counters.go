// SPDX-License-Identifier: Apache-2.0
package run

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/xlb-dev/xlb/bench/topo"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// linkDrops reads the drop and error counters of the topology's four veth ends: the veth
// driver's XDP counters (ethtool -S: a full ring on the peer shows as tx_queue_N_xdp_xmit_errors
// of the sender) and the kernel's rx/tx dropped (ip -s link).
func linkDrops(t *topo.Topology) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, end := range []struct {
		role   string
		ns     *netlab.NS
		ifname string
	}{{"gen", t.Gen, t.GenIf}, {"gw-in", t.Gateway, t.GwIn}, {"gw-out", t.Gateway, t.GwOut}, {"sink", t.SinkNS, t.SinkIf}} {
		stats, err := end.ns.Cmd("ethtool", "-S", end.ifname).Output()
		if err != nil {
			return nil, fmt.Errorf("ethtool -S %s in %s: %w", end.ifname, end.ns.Name, err)
		}
		for line := range strings.Lines(string(stats)) {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !(strings.Contains(k, "drops") || strings.Contains(k, "errors")) {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ethtool -S %s: %s: %w", end.ifname, k, err)
			}
			out[end.role+"."+k] += n
		}
		js, err := end.ns.Cmd("ip", "-s", "-j", "link", "show", "dev", end.ifname).Output()
		if err != nil {
			return nil, fmt.Errorf("ip -s link show %s in %s: %w", end.ifname, end.ns.Name, err)
		}
		var links []struct {
			Stats64 struct {
				RX struct{ Dropped uint64 } `json:"rx"`
				TX struct{ Dropped uint64 } `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.Unmarshal(js, &links); err != nil || len(links) != 1 {
			return nil, fmt.Errorf("ip -s -j link show %s: %d links, %v", end.ifname, len(links), err)
		}
		out[end.role+".rx_dropped"] = links[0].Stats64.RX.Dropped
		out[end.role+".tx_dropped"] = links[0].Stats64.TX.Dropped
	}
	return out, nil
}

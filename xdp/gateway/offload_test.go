// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestGenericModeNeedsCoalescingOff: generic mode runs after GRO, whose coalesced segments carry
// partial checksums the datapath cannot rewrite, so the XDP datapath attaches in generic mode
// only to an interface with GRO and LRO off, and says what to turn off otherwise.
func TestGenericModeNeedsCoalescingOff(t *testing.T) {
	p := netlab.Prefix()
	ns := netlab.New(t, p+"a")
	peer := netlab.New(t, p+"b")
	netlab.Veth(t, ns, "gw0", "02:00:00:00:01:01", peer, "pe0", "02:00:00:00:01:02")
	d, err := Load(Options{NoPin: true, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096}})
	must(t, err)
	t.Cleanup(func() { d.Close() })

	if out, err := ns.Cmd("ethtool", "-K", "gw0", "gro", "on").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K gw0 gro on: %v: %s", err, out)
	}
	err = ns.Do(func() error { return d.Attach("gw0", datapath.AttachGeneric, datapath.RoleBoth) })
	if err == nil || !strings.Contains(err.Error(), "GRO") || !strings.Contains(err.Error(), "ethtool -K gw0 gro off") {
		t.Fatalf("generic mode with GRO on: %v, want a refusal naming GRO and the fix", err)
	}
	if ifs, _ := d.Interfaces(); len(ifs) != 0 {
		t.Fatalf("refused, yet attached to %v", ifs)
	}

	if out, err := ns.Cmd("ethtool", "-K", "gw0", "gro", "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K gw0 gro off: %v: %s", err, out)
	}
	must(t, ns.Do(func() error { return d.Attach("gw0", datapath.AttachGeneric, datapath.RoleBoth) }))
	must(t, ns.Do(func() error { return d.Detach("gw0") }))
}

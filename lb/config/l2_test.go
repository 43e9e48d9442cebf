// SPDX-License-Identifier: Apache-2.0
package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

const l2Base = `interfaces: [{name: up0, role: client}, {name: cl0, role: cluster}]
`

func TestL2(t *testing.T) {
	cfg, err := Parse("xlb.yaml", []byte(l2Base+`l2: {interface: up0, address: 198.18.20.11, peers: [198.18.20.12], prefixes: [198.18.100.0/24]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.L2
	if c.Port != DefaultL2Port || c.DeadAfter() != 300*time.Millisecond || c.Failback || c.MinHealthyBackends != 1 {
		t.Errorf("defaults: %+v", c)
	}
	if !c.Announces(netip.MustParseAddr("198.18.100.7")) || c.Announces(netip.MustParseAddr("198.18.101.1")) {
		t.Error("Announces does not follow prefixes")
	}
	for _, tc := range []struct{ l2, want string }{
		{`{address: 198.18.20.11}`, "l2.interface: missing"},
		{`{interface: eth9, address: 198.18.20.11}`, `"eth9" is not among the interfaces`},
		{`{interface: up0, address: 198.18.20.11, peers: ["2001:db8::1"]}`, "not of the family"},
		{`{interface: up0, address: 198.18.20.11, peers: [198.18.20.11]}`, "listed twice"},
		{`{interface: up0, address: 198.18.20.11, heartbeatInterval: 1ms}`, "want 10ms to 10s"},
		{`{interface: up0, address: 198.18.20.11, multiplier: 1}`, "multiplier"},
		{`{interface: up0, address: 198.18.20.11, prefixes: [198.18.100.1/24]}`, "host bits"},
		{`{interface: up0}`, "l2.address: missing"},
	} {
		_, err := Parse("xlb.yaml", []byte(l2Base+"l2: "+tc.l2+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("l2 %s: error %v, want one saying %q", tc.l2, err, tc.want)
		}
	}
}

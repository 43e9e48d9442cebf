// SPDX-License-Identifier: Apache-2.0
package config

import (
	"testing"
)

// poolsFile is a file in Kubernetes mode whose pools list has the given items from line 4.
func poolsFile(items string) string {
	return "interfaces: [{name: ext0, role: both}]\nkubernetes: {}\npools:\n" + items
}

// TestPoolErrors checks the exact message for each kind of mistake in pools.
func TestPoolErrors(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"pools a mapping", "interfaces: [{name: ext0, role: both}]\nkubernetes: {}\npools:\n  edge: {}\n", "xlb.yaml:4: pools: want a list, got a mapping"},
		{"pools empty", "interfaces: [{name: ext0, role: both}]\nkubernetes: {}\npools: []\n", "xlb.yaml:3: pools: empty (list at least one address pool)"},
		{"name missing", poolsFile("  - addresses: [198.18.100.0/24]\n"),
			"xlb.yaml:4: pools[0].name: missing (required: the pool annotation of a Service names it)"},
		{"name not a label", poolsFile("  - name: Edge_1\n    addresses: [198.18.100.0/24]\n"),
			`xlb.yaml:4: pools[0].name: pool name "Edge_1" is not a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)`},
		{"name too long", poolsFile("  - name: " + "a234567890123456789012345678901234567890123456789012345678901234" + "\n    addresses: [198.18.100.0/24]\n"),
			`xlb.yaml:4: pools[0].name: pool name "a234567890123456789012345678901234567890123456789012345678901234" is longer than 63 characters`},
		{"name twice", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n  - name: edge\n    addresses: [198.18.101.0/24]\n"),
			`xlb.yaml:6: pools[1].name: "edge" is already used by pools[0] (line 4)`},
		{"addresses missing", poolsFile("  - name: edge\n"),
			"xlb.yaml:4: pools[0].addresses: missing (list the pool's CIDRs, ranges or addresses)"},
		{"addresses empty", poolsFile("  - name: edge\n    addresses: []\n"),
			"xlb.yaml:5: pools[0].addresses: empty (list the pool's CIDRs, ranges or addresses)"},
		{"addresses a string", poolsFile("  - name: edge\n    addresses: 198.18.100.0/24\n"),
			`xlb.yaml:5: pools[0].addresses: want a list, got "198.18.100.0/24"`},
		{"address a number", poolsFile("  - name: edge\n    addresses: [1]\n"),
			"xlb.yaml:5: pools[0].addresses[0]: want a string, got 1 (quote it to make it a string)"},
		{"host bits", poolsFile("  - name: edge\n    addresses: [198.18.100.1/24]\n"),
			"xlb.yaml:5: pools[0].addresses[0]: 198.18.100.1/24 has host bits set (did you mean 198.18.100.0/24?)"},
		{"backwards range", poolsFile("  - name: edge\n    addresses:\n      - 198.18.100.20-198.18.100.10\n"),
			`xlb.yaml:6: pools[0].addresses[0]: range "198.18.100.20-198.18.100.10" ends before it starts (write the lower address first)`},
		{"mixed range", poolsFile("  - name: edge\n    addresses:\n      - 198.18.100.1-2001:db8::1\n"),
			`xlb.yaml:6: pools[0].addresses[0]: range "198.18.100.1-2001:db8::1" mixes IPv4 and IPv6`},
		{"not an address", poolsFile("  - name: edge\n    addresses: [edge]\n"),
			`xlb.yaml:5: pools[0].addresses[0]: "edge" is not an IP address (want a CIDR such as 198.18.100.0/24, a range such as 198.18.101.10-198.18.101.20, or one address)`},
		{"multicast", poolsFile("  - name: edge\n    addresses: [224.0.0.0/24]\n"),
			"xlb.yaml:5: pools[0].addresses[0]: 224.0.0.0/24 overlaps 224.0.0.0/4 (multicast), which cannot be a VIP"},
		{"overlap within a pool", poolsFile("  - name: edge\n    addresses:\n      - 198.18.100.0/24\n      - 198.18.100.10-198.18.100.20\n"),
			"xlb.yaml:7: pools[0].addresses[1]: 198.18.100.10-198.18.100.20 overlaps 198.18.100.0/24 of pools[0].addresses[0] (line 6): a VIP belongs to one pool"},
		{"overlap between pools", poolsFile("  - name: edge\n    addresses: [\"2001:db8:100::/64\"]\n  - name: more\n    addresses:\n      - \"2001:db8:100::5\"\n"),
			"xlb.yaml:8: pools[1].addresses[0]: 2001:db8:100::5 overlaps 2001:db8:100::/64 of pools[0].addresses[0] (line 5): a VIP belongs to one pool"},
		{"autoAssign a string", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    autoAssign: \"false\"\n"),
			`xlb.yaml:6: pools[0].autoAssign: want true or false, got "false"`},
		{"avoidBuggyIPs a number", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    avoidBuggyIPs: 0\n"),
			"xlb.yaml:6: pools[0].avoidBuggyIPs: want true or false, got 0"},
		{"namespaces a string", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    namespaces: prod\n"),
			`xlb.yaml:6: pools[0].namespaces: want a list, got "prod"`},
		{"bad namespace", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    namespaces: [Prod]\n"),
			`xlb.yaml:6: pools[0].namespaces[0]: "Prod" is not a namespace name (a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)`},
		{"namespace twice", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    namespaces:\n      - prod\n      - prod\n"),
			`xlb.yaml:8: pools[0].namespaces[1]: "prod" is already used by pools[0].namespaces[0] (line 7)`},
		{"selector a list", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    serviceSelector: [a]\n"),
			"xlb.yaml:6: pools[0].serviceSelector: want a mapping, got a list"},
		{"selector value a number", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    serviceSelector:\n      tier: 1\n"),
			"xlb.yaml:7: pools[0].serviceSelector.tier: want a string, got 1 (quote it to make it a string)"},
		{"selector bad key", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    serviceSelector:\n      \"-tier\": a\n"),
			`xlb.yaml:7: pools[0].serviceSelector.-tier: "-tier" is not a label name: the name "-tier" must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit`},
		{"selector bad prefix", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    serviceSelector:\n      XLB.dev/tier: a\n"),
			`xlb.yaml:7: pools[0].serviceSelector.XLB.dev/tier: "XLB.dev/tier" is not a label name: the prefix "XLB.dev" is not a DNS subdomain (lower-case, such as xlb.dev)`},
		{"selector bad value", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    serviceSelector:\n      tier: \"front end\"\n"),
			`xlb.yaml:7: pools[0].serviceSelector.tier: "front end" is not a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)`},
		{"unknown field", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    autoassign: false\n"),
			`xlb.yaml:6: pools[0].autoassign: unknown field (did you mean "autoAssign"?)`},
		{"unknown bgp field", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    bgp: {communitie: [\"1:2\"]}\n"),
			`xlb.yaml:6: pools[0].bgp.communitie: unknown field (did you mean "communities"?)`},
		{"bad community", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    bgp:\n      communities: [\"65000:70000\"]\n"),
			`xlb.yaml:7: pools[0].bgp.communities[0]: "65000:70000" is not a community (want ASN:value, each 0 to 65535, such as 65000:100)`},
		{"bad med", poolsFile("  - name: edge\n    addresses: [198.18.100.0/24]\n    bgp: {med: -1}\n"),
			"xlb.yaml:6: pools[0].bgp.med: -1 is negative (want 0 to 4294967295)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("xlb.yaml", []byte(c.file))
			if err == nil || err.Error() != c.want {
				t.Errorf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
}

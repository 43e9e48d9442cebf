// SPDX-License-Identifier: Apache-2.0
package config

import (
	"os"
	"strings"
	"testing"
)

// svc is a file whose one service has the given fields (4-space indented, from line 3).
// Lines: 1 interfaces, 2 services, 3 "- name: web", then the fields from line 4.
func svc(fields string) string {
	return "interfaces: [{name: ext0, role: both}]\nservices:\n  - name: web\n" + fields
}

// web is svc with a valid VIP and port (lines 4 and 5); more fields start on line 6.
func web(fields string) string {
	return svc("    vips: [198.18.100.1]\n    ports: [{name: http, port: 80}]\n" + fields)
}

// check is web with a health check; its fields start on line 7.
func check(fields string) string {
	return web("    healthCheck:\n" + fields)
}

// bgpTop is a valid bgp header (lines 3 and 4 of bgpFile).
const bgpTop = "  routerID: 198.18.0.1\n  asn: 65001\n"

// bgpFile is a file whose bgp section has the given fields from line 3, then peers: one valid
// peer unless peers gives the items.
func bgpFile(fields, peers string) string {
	if peers == "" {
		peers = "    - {address: 198.18.0.254, asn: 65000}\n"
	}
	return "interfaces: [{name: ext0, role: both}]\nbgp:\n" + fields + "  peers:\n" + peers
}

// TestErrors checks the exact message for each kind of mistake. Each file has exactly one,
// reported once (but for a mistake merged into two places, reported for each).
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name, file, want string
	}{
		// The file as a whole.
		{"empty file", "", "xlb.yaml: the file is empty (a config needs at least interfaces; see deploy/xlb.example.yaml)"},
		{"only comments", "# nothing yet\n\n", "xlb.yaml: the file is empty (a config needs at least interfaces; see deploy/xlb.example.yaml)"},
		{"null document", "~\n", "xlb.yaml: the file is empty (a config needs at least interfaces; see deploy/xlb.example.yaml)"},
		{"syntax: bad indentation", "interfaces:\n  - name: ext0\nlisten: a\n  b: c\n",
			"xlb.yaml:4: YAML syntax error: mapping values are not allowed in this context"},
		{"syntax: unclosed list", "interfaces: [{name: ext0, role: both}\n", "xlb.yaml:2: YAML syntax error: did not find expected ',' or ']'"},
		{"syntax: key without indentation", "log:\n  format: text\n level: info\n", "xlb.yaml:3: YAML syntax error: did not find expected key"},
		{"syntax: tab indentation", "interfaces:\n\t- name: ext0\n", "xlb.yaml:2: YAML syntax error: found character that cannot start any token"},
		{"control character", "interfaces: [{name: ext0, role: both}]\nlisten: \"a\x01\"\n", "xlb.yaml:2: YAML syntax error: control characters are not allowed"},
		{"two documents", "interfaces: [{name: ext0, role: both}]\n---\ninterfaces: [{name: ext1}]\n",
			"xlb.yaml:2: a second YAML document (after ---); a config file holds one"},
		{"root is a list", "- interfaces\n", "xlb.yaml:1: want a mapping, got a list"},
		{"root is a string", "interfaces\n", `xlb.yaml:1: want a mapping, got "interfaces"`},
		{"unknown top-level field, close", "interfaces: [{name: ext0, role: both}]\nservice: []\n",
			`xlb.yaml:2: service: unknown field (did you mean "services"?)`},
		{"unknown top-level field, far", "interfaces: [{name: ext0, role: both}]\nbackends: []\n",
			"xlb.yaml:2: backends: unknown field (known fields: interfaces, datapath, listen, log, services, bgp, l2, pools, kubernetes)"},
		{"field set twice", "interfaces: [{name: ext0, role: both}]\nlisten: 127.0.0.1:1\nlisten: 127.0.0.1:2\n",
			"xlb.yaml:3: listen: set twice (first on line 2)"},
		{"field name not a string", "interfaces: [{name: ext0, role: both}]\n[a]: 1\n", "xlb.yaml:2: field name a list is not a string"},

		// interfaces
		{"interfaces missing", "listen: 127.0.0.1:9610\n", "xlb.yaml:1: interfaces: missing (list at least one interface to attach to)"},
		{"interfaces null", "interfaces:\n", "xlb.yaml:1: interfaces: missing (list at least one interface to attach to)"},
		{"interfaces empty", "interfaces: []\n", "xlb.yaml:1: interfaces: empty (list at least one interface to attach to)"},
		{"interfaces a string", "interfaces: ext0\n", `xlb.yaml:1: interfaces: want a list, got "ext0"`},
		{"interface a string", "interfaces: [ext0]\n", `xlb.yaml:1: interfaces[0]: want a mapping, got "ext0"`},
		{"interface name missing", "interfaces:\n  - mode: native\n    role: both\n", "xlb.yaml:2: interfaces[0].name: missing (required)"},
		{"interface name a number", "interfaces:\n  - name: 0\n    role: both\n", "xlb.yaml:2: interfaces[0].name: want a string, got 0 (quote it to make it a string)"},
		{"interface name too long", "interfaces: [{name: ext0-uplink-to-core, role: both}]\n",
			`xlb.yaml:1: interfaces[0].name: "ext0-uplink-to-core" is longer than 15 bytes, the longest interface name`},
		{"interface name with slash", "interfaces: [{name: a/b, role: both}]\n",
			`xlb.yaml:1: interfaces[0].name: "a/b" is not a valid interface name (no '/', ':' or white space)`},
		{"interface twice", "interfaces:\n  - {name: ext0, role: client}\n  - {name: ext1, role: cluster}\n  - {name: ext0, role: client}\n",
			`xlb.yaml:4: interfaces[2].name: "ext0" is already used by interfaces[0] (line 2)`},
		{"bad attach mode", "interfaces:\n  - name: ext0\n    mode: fast\n    role: both\n",
			`xlb.yaml:3: interfaces[0].mode: unknown mode "fast" (want auto, native or generic)`},
		{"attach mode wrong case", "interfaces: [{name: ext0, mode: Native, role: both}]\n",
			`xlb.yaml:1: interfaces[0].mode: unknown mode "Native" (want auto, native or generic)`},
		{"unknown interface field", "interfaces:\n  - name: ext0\n    mtu: 1500\n    role: both\n",
			"xlb.yaml:3: interfaces[0].mtu: unknown field (known fields: name, mode, role)"},
		{"interface without a role", "interfaces:\n  - name: ext0\n",
			`xlb.yaml:2: interfaces[0].role: missing (required: the side this interface faces: client (upstream routers), cluster (nodes and Pods) or both (a one-armed gateway; see docs/datapath.md, "Security model"))`},
		{"interface with an unknown role", "interfaces: [{name: ext0, role: inside}]\n",
			`xlb.yaml:1: interfaces[0].role: unknown role "inside" (want client, cluster or both)`},
		{"cluster prefix malformed", "interfaces: [{name: ext0, role: both}]\ndatapath: {clusterPrefixes: [198.18.0.0/33]}\n",
			`xlb.yaml:2: datapath.clusterPrefixes[0]: "198.18.0.0/33" is not a prefix (want an address and a length, such as 198.18.0.0/15 or 2001:db8::/32)`},

		// datapath
		{"datapath a list", "interfaces: [{name: ext0, role: both}]\ndatapath: [seed]\n", "xlb.yaml:2: datapath: want a mapping, got a list"},
		{"unknown datapath field", "interfaces: [{name: ext0, role: both}]\ndatapath:\n  conntrack_size: 1\n",
			`xlb.yaml:3: datapath.conntrack_size: unknown field (did you mean "conntrackSize"?)`},
		{"size as a string", "interfaces: [{name: ext0, role: both}]\ndatapath:\n  conntrackSize: \"1048576\"\n",
			`xlb.yaml:3: datapath.conntrackSize: want an integer, got "1048576"`},
		{"table size not a prime", "interfaces: [{name: ext0, role: both}]\ndatapath: {maglevTableSize: 16384}\n",
			`xlb.yaml:2: datapath.maglevTableSize: 16384 is not a usable Maglev table size: a prime from 2 to 1048573, such as 16381 (table size 16384 is not a prime)`},
		{"table size too big", "interfaces: [{name: ext0, role: both}]\ndatapath: {maglevTableSize: 2000003}\n",
			`xlb.yaml:2: datapath.maglevTableSize: 2000003 is not a usable Maglev table size: a prime from 2 to 1048573, such as 16381 (table size 2000003 out of range 2..1048573)`},
		{"size with a suffix", "interfaces: [{name: ext0, role: both}]\ndatapath: {conntrackSize: 1M}\n",
			`xlb.yaml:2: datapath.conntrackSize: want an integer, got "1M"`},
		{"negative size", "interfaces: [{name: ext0, role: both}]\ndatapath: {conntrackSize: -5}\n",
			"xlb.yaml:2: datapath.conntrackSize: -5 is negative (want 0 to 4294967295)"},
		{"size too large", "interfaces: [{name: ext0, role: both}]\ndatapath: {maglevSlots: 4294967296}\n",
			"xlb.yaml:2: datapath.maglevSlots: 4294967296 is out of range (0 to 4294967295)"},
		{"size beyond int64", "interfaces: [{name: ext0, role: both}]\ndatapath: {maglevSlots: 99999999999999999999}\n",
			"xlb.yaml:2: datapath.maglevSlots: 99999999999999999999 is out of range (0 to 4294967295)"},
		{"seed a float", "interfaces: [{name: ext0, role: both}]\ndatapath: {seed: 1.5}\n", "xlb.yaml:2: datapath.seed: want an integer, got 1.5"},
		{"seed a bool", "interfaces: [{name: ext0, role: both}]\ndatapath: {seed: true}\n", "xlb.yaml:2: datapath.seed: want an integer, got true"},
		{"duration without unit", "interfaces: [{name: ext0, role: both}]\ndatapath: {udpTimeout: 60}\n",
			"xlb.yaml:2: datapath.udpTimeout: want a duration with a unit, such as 60s, got 60"},
		{"bad duration", "interfaces: [{name: ext0, role: both}]\ndatapath: {tcpEstablishedTimeout: 1hour}\n",
			`xlb.yaml:2: datapath.tcpEstablishedTimeout: "1hour" is not a duration (want a number and a unit, such as 500ms, 2s or 1h30m)`},
		{"duration a list", "interfaces: [{name: ext0, role: both}]\ndatapath: {udpTimeout: [1s]}\n",
			"xlb.yaml:2: datapath.udpTimeout: want a duration such as 2s or 1h30m, got a list"},
		{"negative timeout", "interfaces: [{name: ext0, role: both}]\ndatapath: {tcpEstablishedTimeout: -1h}\n",
			"xlb.yaml:2: datapath.tcpEstablishedTimeout: -1h0m0s is negative"},
		{"timeout below a second", "interfaces: [{name: ext0, role: both}]\ndatapath: {tcpClosingTimeout: 500ms}\n",
			"xlb.yaml:2: datapath.tcpClosingTimeout: 500ms is below the 1s minimum (conntrack timestamps are refreshed once a second)"},
		{"flow rate below -1", "interfaces: [{name: ext0, role: both}]\ndatapath: {newFlowRate: -2}\n",
			"xlb.yaml:2: datapath.newFlowRate: -2 is out of range (-1 to 9223372036854775807)"},
		{"negative next hop TTL", "interfaces: [{name: ext0, role: both}]\ndatapath: {nextHopCacheTTL: -1s}\n",
			"xlb.yaml:2: datapath.nextHopCacheTTL: -1s is negative (write off to disable the cache)"},
		{"negative backend warm-up", "interfaces: [{name: ext0, role: both}]\ndatapath: {backendWarmup: -1s}\n",
			"xlb.yaml:2: datapath.backendWarmup: -1s is negative (write off for no warm-up)"},
		{"unknown forwarding", "interfaces: [{name: ext0, role: both}]\ndatapath: {forwarding: tunnel}\n",
			"xlb.yaml:2: datapath.forwarding: unknown forwarding \"tunnel\" (want returnPath or dsr)"},
		{"fallback without dsr", "interfaces: [{name: ext0, role: both}]\ndatapath: {dsrFallback: returnPath}\n",
			"xlb.yaml:2: datapath.dsrFallback: only applies with forwarding: dsr"},
		{"unknown fallback", "interfaces: [{name: ext0, role: both}]\ndatapath: {forwarding: dsr, dsrFallback: drop}\n",
			"xlb.yaml:2: datapath.dsrFallback: unknown dsrFallback \"drop\" (want exclude or returnPath)"},
		{"long backend warm-up", "interfaces: [{name: ext0, role: both}]\ndatapath: {backendWarmup: 2m}\n",
			"xlb.yaml:2: datapath.backendWarmup: 2m0s is over the 1m maximum (a scale-up would wait that long)"},
		{"relative pin path", "interfaces: [{name: ext0, role: both}]\ndatapath: {pinPath: bpf/xlb}\n",
			`xlb.yaml:2: datapath.pinPath: "bpf/xlb" is not an absolute path`},

		// listen, log
		{"listen without port", "interfaces: [{name: ext0, role: both}]\nlisten: 9610\n",
			"xlb.yaml:2: listen: want a string, got 9610 (quote it to make it a string)"},
		{"listen not host:port", "interfaces: [{name: ext0, role: both}]\nlisten: localhost\n",
			`xlb.yaml:2: listen: "localhost" is not host:port (want e.g. 127.0.0.1:9610, [::1]:9610 or :9610)`},
		{"listen port a name", "interfaces: [{name: ext0, role: both}]\nlisten: 127.0.0.1:http\n",
			`xlb.yaml:2: listen: "127.0.0.1:http": port "http" is not a number from 1 to 65535`},
		{"listen bad host", "interfaces: [{name: ext0, role: both}]\nlisten: \"no such host:80\"\n",
			`xlb.yaml:2: listen: "no such host:80": "no such host" is neither an IP address nor a host name`},
		{"bad log level", "interfaces: [{name: ext0, role: both}]\nlog:\n  level: verbose\n",
			`xlb.yaml:3: log.level: unknown level "verbose" (want debug, info, warn or error)`},
		{"bad log format", "interfaces: [{name: ext0, role: both}]\nlog: {format: xml}\n",
			`xlb.yaml:2: log.format: unknown format "xml" (want text or json)`},
		{"unknown log field", "interfaces: [{name: ext0, role: both}]\nlog: {file: /var/log/xlb}\n",
			"xlb.yaml:2: log.file: unknown field (known fields: format, level)"},

		// services
		{"services a mapping", "interfaces: [{name: ext0, role: both}]\nservices:\n  web: {}\n", "xlb.yaml:3: services: want a list, got a mapping"},
		{"service name missing", "interfaces: [{name: ext0, role: both}]\nservices:\n  - vips: [198.18.100.1]\n    ports: [{port: 80}]\n",
			"xlb.yaml:3: services[0].name: missing (required)"},
		{"service name empty", "interfaces: [{name: ext0, role: both}]\nservices:\n  - name: \"\"\n    vips: [198.18.100.1]\n    ports: [{port: 80}]\n",
			"xlb.yaml:3: services[0].name: empty"},
		{"service name a number", "interfaces: [{name: ext0, role: both}]\nservices:\n  - name: 42\n    vips: [198.18.100.1]\n    ports: [{port: 80}]\n",
			"xlb.yaml:3: services[0].name: want a string, got 42 (quote it to make it a string)"},
		{"duplicate service name", web("  - name: dns\n    vips: [198.18.100.2]\n    ports: [{port: 53}]\n" +
			"  - name: web\n    vips: [198.18.100.3]\n    ports: [{port: 80}]\n"),
			`xlb.yaml:9: services[2].name: "web" is already used by services[0] (line 3)`},
		{"unknown service field", web("    backend: []\n"), `xlb.yaml:6: services[0].backend: unknown field (did you mean "backends"?)`},
		{"vips missing", svc("    ports: [{port: 80}]\n"), "xlb.yaml:3: services[0].vips: missing (a service needs at least one VIP)"},
		{"vips empty", svc("    vips: []\n    ports: [{port: 80}]\n"), "xlb.yaml:4: services[0].vips: empty (a service needs at least one VIP)"},
		{"vips a string", svc("    vips: 198.18.100.1\n    ports: [{port: 80}]\n"), `xlb.yaml:4: services[0].vips: want a list, got "198.18.100.1"`},
		{"bad VIP", svc("    vips: [198.18.100.1, 198.18.100.300]\n    ports: [{port: 80}]\n"),
			`xlb.yaml:4: services[0].vips[1]: "198.18.100.300" is not an IP address`},
		{"VIP with a prefix length", svc("    vips: [198.18.100.1/32]\n    ports: [{port: 80}]\n"),
			`xlb.yaml:4: services[0].vips[0]: "198.18.100.1/32" is not an IP address`},
		{"multicast VIP", svc("    vips: [224.0.0.1]\n    ports: [{port: 80}]\n"),
			"xlb.yaml:4: services[0].vips[0]: 224.0.0.1 is a multicast address, not a usable unicast address"},
		{"unspecified VIP", svc("    vips: [\"::\"]\n    ports: [{port: 80}]\n"),
			"xlb.yaml:4: services[0].vips[0]: :: is the unspecified address, not a usable unicast address"},
		{"VIP with a zone", svc("    vips: [\"fe80::1%ext0\"]\n    ports: [{port: 80}]\n"),
			"xlb.yaml:4: services[0].vips[0]: fe80::1%ext0 has a zone (%ext0); zoned addresses cannot be balanced"},
		{"VIP twice (once IPv4-mapped)", svc("    vips:\n      - 198.18.100.1\n      - \"::ffff:198.18.100.1\"\n    ports: [{port: 80}]\n"),
			"xlb.yaml:6: services[0].vips[1]: 198.18.100.1 is already used by services[0].vips[0] (line 5)"},

		// ports
		{"ports missing", svc("    vips: [198.18.100.1]\n"), "xlb.yaml:3: services[0].ports: missing (a service needs at least one port)"},
		{"ports empty", svc("    vips: [198.18.100.1]\n    ports: []\n"), "xlb.yaml:5: services[0].ports: empty (a service needs at least one port)"},
		{"port missing", svc("    vips: [198.18.100.1]\n    ports:\n      - name: http\n"),
			"xlb.yaml:6: services[0].ports[0].port: missing (required; 0 serves every port)"},
		{"port a string", svc("    vips: [198.18.100.1]\n    ports: [{port: \"80\"}]\n"),
			`xlb.yaml:5: services[0].ports[0].port: want an integer, got "80"`},
		{"port a service name", svc("    vips: [198.18.100.1]\n    ports: [{port: http}]\n"),
			`xlb.yaml:5: services[0].ports[0].port: want an integer, got "http"`},
		{"port with a leading zero", svc("    vips: [198.18.100.1]\n    ports: [{port: 080}]\n"),
			"xlb.yaml:5: services[0].ports[0].port: 080 has a leading zero (write it without; for octal, write 0o)"},
		{"port too large", svc("    vips: [198.18.100.1]\n    ports: [{port: 70000}]\n"),
			"xlb.yaml:5: services[0].ports[0].port: 70000 is out of range (0 to 65535)"},
		{"negative port", svc("    vips: [198.18.100.1]\n    ports: [{port: -80}]\n"),
			"xlb.yaml:5: services[0].ports[0].port: -80 is negative (want 0 to 65535)"},
		{"unknown protocol", svc("    vips: [198.18.100.1]\n    ports:\n      - name: a\n        port: 80\n      - name: b\n        port: 81\n        protocol: SCTPX\n"),
			`xlb.yaml:10: services[0].ports[1].protocol: unknown protocol "SCTPX" (want TCP or UDP)`},
		{"SCTP", svc("    vips: [198.18.100.1]\n    ports: [{port: 80, protocol: SCTP}]\n"),
			"xlb.yaml:5: services[0].ports[0].protocol: protocol SCTP is not supported (xlb balances TCP and UDP)"},
		{"protocol a number", svc("    vips: [198.18.100.1]\n    ports: [{port: 80, protocol: 6}]\n"),
			"xlb.yaml:5: services[0].ports[0].protocol: want a string, got 6 (quote it to make it a string)"},
		{"duplicate port", svc("    vips: [198.18.100.1]\n    ports:\n      - {name: a, port: 80}\n      - {name: b, port: 80, protocol: TCP}\n"),
			"xlb.yaml:7: services[0].ports[1].port: 80/TCP is already used by services[0].ports[0] (line 6)"},
		{"duplicate port name", svc("    vips: [198.18.100.1]\n    ports:\n      - {name: a, port: 80}\n      - {name: a, port: 443}\n"),
			`xlb.yaml:7: services[0].ports[1].name: "a" is already used by services[0].ports[0] (line 6)`},
		{"two unnamed ports", svc("    vips: [198.18.100.1]\n    ports:\n      - {port: 80}\n      - {port: 443}\n"),
			"xlb.yaml:7: services[0].ports[1].name: missing, and services[0].ports[0] (line 6) has no name either: " +
				"the ports of a service with several need distinct names"},
		{"all-ports port with targetPort", svc("    vips: [198.18.100.1]\n    ports: [{port: 0, targetPort: 8080}]\n"),
			"xlb.yaml:5: services[0].ports[0].targetPort: an all-ports port (port 0) cannot have a targetPort: " +
				"backends receive the client's destination port"},
		{"unknown port field", svc("    vips: [198.18.100.1]\n    ports: [{port: 80, nodePort: 30080}]\n"),
			"xlb.yaml:5: services[0].ports[0].nodePort: unknown field (known fields: name, port, protocol, targetPort)"},

		// backends
		{"backends a mapping", web("    backends: {address: 198.18.1.10}\n"), "xlb.yaml:6: services[0].backends: want a list, got a mapping"},
		{"backend address missing", web("    backends:\n      - weight: 1\n"), "xlb.yaml:7: services[0].backends[0].address: missing (required)"},
		{"bad backend address", web("    backends: [{address: backend-1}]\n"),
			`xlb.yaml:6: services[0].backends[0].address: "backend-1" is not an IP address`},
		{"backend twice", web("    backends:\n      - address: 198.18.1.10\n      - address: 198.18.1.10\n"),
			"xlb.yaml:8: services[0].backends[1].address: 198.18.1.10 is already used by services[0].backends[0].address (line 7)"},
		{"backend of a family without VIP", web("    backends: [{address: \"2001:db8::10\"}]\n"),
			"xlb.yaml:6: services[0].backends[0].address: 2001:db8::10 is IPv6, but the service has no IPv6 VIP to use it"},
		{"dsr not a boolean", web("    backends: [{address: 198.18.1.10, dsr: yes}]\n"),
			"xlb.yaml:6: services[0].backends[0].dsr: want true or false, got \"yes\""},
		{"negative weight", web("    backends: [{address: 198.18.1.10, weight: -1}]\n"),
			"xlb.yaml:6: services[0].backends[0].weight: -1 is negative (want 0 to 4294967295)"},
		{"weight a word", web("    backends: [{address: 198.18.1.10, weight: heavy}]\n"),
			`xlb.yaml:6: services[0].backends[0].weight: want an integer, got "heavy"`},
		{"weight a float", web("    backends: [{address: 198.18.1.10, weight: 0.5}]\n"),
			"xlb.yaml:6: services[0].backends[0].weight: want an integer, got 0.5"},
		{"state unhealthy", web("    backends: [{address: 198.18.1.10, state: unhealthy}]\n"),
			"xlb.yaml:6: services[0].backends[0].state: unhealthy is set by health checks, not by the config (want active or draining)"},
		{"unknown state", web("    backends: [{address: 198.18.1.10, state: up}]\n"),
			`xlb.yaml:6: services[0].backends[0].state: unknown state "up" (want active or draining)`},
		{"targetPorts for an unknown port", web("    backends:\n      - address: 198.18.1.10\n        targetPorts: {https: 8443}\n"),
			`xlb.yaml:8: services[0].backends[0].targetPorts.https: the service has no port named "https" (its ports: "http")`},
		{"targetPorts a list", web("    backends:\n      - address: 198.18.1.10\n        targetPorts: [8443]\n"),
			"xlb.yaml:8: services[0].backends[0].targetPorts: want a mapping, got a list"},
		{"targetPort zero", web("    backends:\n      - address: 198.18.1.10\n        targetPorts: {http: 0}\n"),
			"xlb.yaml:8: services[0].backends[0].targetPorts.http: 0 is out of range (1 to 65535)"},
		{"targetPorts for an all-ports port", svc("    vips: [198.18.100.1]\n    ports: [{name: all, port: 0}]\n" +
			"    backends: [{address: 198.18.1.10, targetPorts: {all: 22}}]\n"),
			`xlb.yaml:6: services[0].backends[0].targetPorts.all: port "all" serves every port (port 0): its backends receive the client's destination port`},
		{"unknown backend field", web("    backends: [{adress: 198.18.1.10}]\n"),
			`xlb.yaml:6: services[0].backends[0].adress: unknown field (did you mean "address"?)`},

		// affinity, source ranges, traffic policy
		{"bad session affinity", web("    sessionAffinity: clientip\n"),
			`xlb.yaml:6: services[0].sessionAffinity: unknown sessionAffinity "clientip" (want None or ClientIP)`},
		{"affinity timeout without ClientIP", web("    sessionAffinityTimeout: 1h\n"),
			"xlb.yaml:6: services[0].sessionAffinityTimeout: only applies with sessionAffinity: ClientIP"},
		{"affinity timeout with None", web("    sessionAffinity: None\n    sessionAffinityTimeout: 1h\n"),
			"xlb.yaml:7: services[0].sessionAffinityTimeout: only applies with sessionAffinity: ClientIP"},
		{"affinity timeout too long", web("    sessionAffinity: ClientIP\n    sessionAffinityTimeout: 48h\n"),
			"xlb.yaml:7: services[0].sessionAffinityTimeout: 48h0m0s is longer than the 24h0m0s maximum"},
		{"affinity timeout zero", web("    sessionAffinity: ClientIP\n    sessionAffinityTimeout: 0s\n"),
			"xlb.yaml:7: services[0].sessionAffinityTimeout: 0s is not above zero"},
		{"source range without length", web("    sourceRanges: [198.18.0.0]\n"),
			`xlb.yaml:6: services[0].sourceRanges[0]: "198.18.0.0" is not a prefix (want an address and a length, such as 198.18.0.0/15 or 2001:db8::/32)`},
		{"source range with host bits", web("    sourceRanges:\n      - 198.18.1.10/15\n"),
			"xlb.yaml:7: services[0].sourceRanges[0]: 198.18.1.10/15 has host bits set (did you mean 198.18.0.0/15?)"},
		{"source range twice", web("    sourceRanges: [10.0.0.0/8, 10.0.0.0/8]\n"),
			"xlb.yaml:6: services[0].sourceRanges[1]: 10.0.0.0/8 is already used by services[0].sourceRanges[0] (line 6)"},
		{"no source range of a VIP's family", svc("    vips: [198.18.100.1, \"2001:db8::1\"]\n    ports: [{port: 80}]\n    sourceRanges: [198.18.0.0/15]\n"),
			"xlb.yaml:6: services[0].sourceRanges: no IPv6 range for VIP 2001:db8::1: it would admit every client (add one, such as ::/0)"},
		{"bad traffic policy", web("    externalTrafficPolicy: local\n"),
			`xlb.yaml:6: services[0].externalTrafficPolicy: unknown externalTrafficPolicy "local" (want Cluster or Local)`},

		// healthCheck
		{"health check a string", web("    healthCheck: tcp\n"), `xlb.yaml:6: services[0].healthCheck: want a mapping, got "tcp"`},
		{"health check type missing", check("      port: 8080\n"), "xlb.yaml:7: services[0].healthCheck.type: missing (want tcp, http, https or udp)"},
		{"health check type misspelled", check("      typ: tcp\n"),
			`xlb.yaml:7: services[0].healthCheck.typ: unknown field (did you mean "type"?)`},
		{"bad health check type", check("      type: icmp\n"),
			`xlb.yaml:7: services[0].healthCheck.type: unknown type "icmp" (want tcp, http, https or udp)`},
		{"unknown health check field", check("      type: tcp\n      retries: 3\n"),
			"xlb.yaml:8: services[0].healthCheck.retries: unknown field (known fields: type, port, path, expectStatus, payload, expect, interval, timeout, rise, fall)"},
		{"path on a tcp check", check("      type: tcp\n      path: /healthz\n"),
			"xlb.yaml:8: services[0].healthCheck.path: only applies to http and https checks (this one is tcp)"},
		{"path without slash", check("      type: http\n      path: healthz\n"),
			`xlb.yaml:8: services[0].healthCheck.path: "healthz" does not start with /`},
		{"bad expected status", check("      type: https\n      expectStatus: 700\n"),
			"xlb.yaml:8: services[0].healthCheck.expectStatus: 700 is out of range (100 to 599)"},
		{"payload on an http check", check("      type: http\n      payload: ping\n"),
			"xlb.yaml:8: services[0].healthCheck.payload: only applies to udp checks (this one is http)"},
		{"expect on a tcp check", check("      type: tcp\n      expect: pong\n"),
			"xlb.yaml:8: services[0].healthCheck.expect: only applies to udp checks (this one is tcp)"},
		{"check port too large", check("      type: tcp\n      port: 65536\n"),
			"xlb.yaml:8: services[0].healthCheck.port: 65536 is out of range (0 to 65535)"},
		{"check interval without unit", check("      type: tcp\n      interval: 2\n"),
			"xlb.yaml:8: services[0].healthCheck.interval: want a duration with a unit, such as 2s, got 2"},
		{"check interval too short", check("      type: tcp\n      interval: 5ms\n      timeout: 1ms\n"),
			"xlb.yaml:8: services[0].healthCheck.interval: 5ms is below the minimum of 10ms"},
		{"check timeout not below interval", check("      type: tcp\n      interval: 1s\n      timeout: 1s\n"),
			"xlb.yaml:9: services[0].healthCheck.timeout: 1s is not shorter than the interval (1s)"},
		{"check timeout not below default interval", check("      type: tcp\n      timeout: 2s\n"),
			"xlb.yaml:8: services[0].healthCheck.timeout: 2s is not shorter than the interval (2s, the default)"},
		{"check interval below default timeout", check("      type: tcp\n      interval: 500ms\n"),
			"xlb.yaml:8: services[0].healthCheck.interval: 500ms is not longer than the timeout (1s, the default)"},
		{"check interval negative", check("      type: tcp\n      interval: -2s\n"),
			"xlb.yaml:8: services[0].healthCheck.interval: -2s is not above zero"},
		{"rise zero", check("      type: tcp\n      rise: 0\n"),
			"xlb.yaml:8: services[0].healthCheck.rise: 0 is out of range (1 to 2147483647)"},
		{"fall a string", check("      type: tcp\n      fall: three\n"),
			`xlb.yaml:8: services[0].healthCheck.fall: want an integer, got "three"`},
		{"check port needed for an all-ports service", svc("    vips: [198.18.100.1]\n    ports: [{port: 0}]\n    healthCheck: {type: tcp}\n"),
			"xlb.yaml:6: services[0].healthCheck.port: needed: the service's first port serves every port (port 0), so there is no target port to probe"},
		{"bad check port for an all-ports service", svc("    vips: [198.18.100.1]\n    ports: [{port: 0}]\n    healthCheck: {type: tcp, port: ssh}\n"),
			`xlb.yaml:6: services[0].healthCheck.port: want an integer, got "ssh"`},
		{"bad base64 payload", check("      type: udp\n      payload: !!binary not*base64\n"),
			"xlb.yaml:8: services[0].healthCheck.payload: !!binary value is not valid base64"},

		// services[].bgp
		{"service bgp bad community", "interfaces: [{name: ext0, role: both}]\nservices:\n  - name: web\n    vips: [198.18.100.1]\n    ports: [{port: 80}]\n    bgp: {communities: [\"65000:70000\"]}\n",
			`xlb.yaml:6: services[0].bgp.communities[0]: "65000:70000" is not a community (want ASN:value, each 0 to 65535, such as 65000:100)`},
		{"service bgp unknown key", "interfaces: [{name: ext0, role: both}]\nservices:\n  - name: web\n    vips: [198.18.100.1]\n    ports: [{port: 80}]\n    bgp: {community: [\"65000:1\"]}\n",
			"xlb.yaml:6: services[0].bgp.community: unknown field (known fields: communities, largeCommunities, localPref, med)"},
		{"service bgp not a mapping", "interfaces: [{name: ext0, role: both}]\nservices:\n  - name: web\n    vips: [198.18.100.1]\n    ports: [{port: 80}]\n    bgp: [65000:1]\n",
			"xlb.yaml:6: services[0].bgp: want a mapping, got a list"},
		// bgp
		{"bgp without peers", "interfaces: [{name: ext0, role: both}]\nbgp:\n  routerID: 198.18.0.1\n  asn: 65001\n",
			"xlb.yaml:3: bgp.peers: missing (list at least one BGP neighbour; in Kubernetes mode, BGPPeer objects may list them instead)"},
		{"bgp router ID IPv6", bgpFile("  routerID: \"2001:db8::1\"\n  asn: 65001\n", ""),
			"xlb.yaml:3: bgp.routerID: 2001:db8::1 is not an IPv4 address (a BGP identifier is one, even for IPv6 sessions)"},
		{"bgp router ID zero", bgpFile("  routerID: 0.0.0.0\n  asn: 65001\n", ""),
			"xlb.yaml:3: bgp.routerID: 0.0.0.0 is not a usable BGP identifier"},
		{"bgp ASN zero", bgpFile("  routerID: 198.18.0.1\n  asn: 0\n", ""),
			"xlb.yaml:4: bgp.asn: 0 is out of range (1 to 4294967295)"},
		{"bgp ASN too large", bgpFile("  routerID: 198.18.0.1\n  asn: 4294967296\n", ""),
			"xlb.yaml:4: bgp.asn: 4294967296 is out of range (1 to 4294967295)"},
		{"bgp ASN as dotted", bgpFile("  routerID: 198.18.0.1\n  asn: 1.10\n", ""),
			"xlb.yaml:4: bgp.asn: want an integer, got 1.10"},
		{"bgp graceful restart too long", bgpFile(bgpTop+"  gracefulRestart: 2h\n", ""),
			"xlb.yaml:5: bgp.gracefulRestart: 2h0m0s is out of range (0s to 1h8m15s, or 0 for the default)"},
		{"bgp graceful restart fractional", bgpFile(bgpTop+"  gracefulRestart: 1500ms\n", ""),
			"xlb.yaml:5: bgp.gracefulRestart: 1.5s is not a whole number of seconds"},
		{"bgp min healthy zero", bgpFile(bgpTop+"  minHealthyBackends: 0\n", ""),
			"xlb.yaml:5: bgp.minHealthyBackends: 0 is out of range (1 to 2147483647)"},
		{"bgp withdrawOnExit a string", bgpFile(bgpTop+"  withdrawOnExit: \"yes\"\n", ""),
			`xlb.yaml:5: bgp.withdrawOnExit: want true or false, got "yes"`},
		{"bgp bad community", bgpFile(bgpTop+"  communities: [\"65000:70000\"]\n", ""),
			`xlb.yaml:5: bgp.communities[0]: "65000:70000" is not a community (want ASN:value, each 0 to 65535, such as 65000:100)`},
		{"bgp bad large community", bgpFile(bgpTop+"  largeCommunities: [\"65000:1\"]\n", ""),
			`xlb.yaml:5: bgp.largeCommunities[0]: "65000:1" is not a large community (want global:local1:local2, each 0 to 4294967295, such as 65000:1:2)`},
		{"bgp peer bad address", bgpFile(bgpTop, "    - {address: 198.18.0.300, asn: 65000}\n"),
			`xlb.yaml:6: bgp.peers[0].address: "198.18.0.300" is not an IP address`},
		{"bgp peer multicast address", bgpFile(bgpTop, "    - {address: 224.0.0.5, asn: 65000}\n"),
			"xlb.yaml:6: bgp.peers[0].address: 224.0.0.5 is a multicast address, not a usable unicast address"},
		{"bgp peer without ASN", bgpFile(bgpTop, "    - address: 198.18.0.254\n"),
			"xlb.yaml:6: bgp.peers[0].asn: missing (the neighbour's AS number)"},
		{"bgp peer twice", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000}\n    - {address: 198.18.0.254, asn: 65002}\n"),
			"xlb.yaml:7: bgp.peers[1].address: 198.18.0.254 is already used by bgp.peers[0] (line 6)"},
		{"bgp peer unreadable password file", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, passwordFile: /nonexistent/xlb-bgp.pw}\n"),
			"xlb.yaml:6: bgp.peers[0].passwordFile: cannot read /nonexistent/xlb-bgp.pw: no such file or directory"},
		{"bgp peer hold time too short", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, holdTime: 2s}\n"),
			"xlb.yaml:6: bgp.peers[0].holdTime: 2s is out of range (3s to 18h12m15s, or 0 for the default)"},
		{"bgp peer hold time not above the default keepalive", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, holdTime: 3s}\n"),
			"xlb.yaml:6: bgp.peers[0].holdTime: 3s is not longer than the keepalive time (3s, the default)"},
		{"bgp peer keepalive not below hold", bgpFile(bgpTop, "    - address: 198.18.0.254\n      asn: 65000\n      keepaliveTime: 10s\n"),
			"xlb.yaml:8: bgp.peers[0].keepaliveTime: 10s is not shorter than the hold time (9s, the default)"},
		{"bgp peer hold time without unit", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, holdTime: 9}\n"),
			"xlb.yaml:6: bgp.peers[0].holdTime: want a duration with a unit, such as 9s, got 9"},
		{"bgp passive peer without listen port", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, passive: true}\n"),
			"xlb.yaml:6: bgp.peers[0].passive: needs bgp.listenPort (a passive peer connects to the speaker)"},
		{"bgp peer local address of the other family", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, localAddress: \"2001:db8::1\"}\n"),
			"xlb.yaml:6: bgp.peers[0].localAddress: 2001:db8::1 is not of the family of the peer's address 198.18.0.254"},
		{"bgp peer multihop TTL too large", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, multihopTTL: 256}\n"),
			"xlb.yaml:6: bgp.peers[0].multihopTTL: 256 is out of range (0 to 255)"},
		{"bgp BFD interval too short", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, bfd: {receiveInterval: 10ms}}\n"),
			"xlb.yaml:6: bgp.peers[0].bfd.receiveInterval: 10ms: want whole milliseconds from 50ms to 1m0s"},
		{"bgp BFD multiplier zero", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, bfd: {multiplier: 0}}\n"),
			"xlb.yaml:6: bgp.peers[0].bfd.multiplier: 0 is out of range (1 to 255)"},
		{"bgp BFD unknown field", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, bfd: {interval: 1s}}\n"),
			"xlb.yaml:6: bgp.peers[0].bfd.interval: unknown field (known fields: enabled, transmitInterval, receiveInterval, multiplier, holdDown)"},
		{"bgp BFD not a bool", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, bfd: yes-please}\n"),
			"xlb.yaml:6: bgp.peers[0].bfd: want true or false, got \"yes-please\""},
		{"bgp BFD multihop", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, multihopTTL: 2, bfd: true}\n"),
			"xlb.yaml:6: bgp.peers[0].bfd: single-hop BFD only, but multihopTTL is 2"},
		{"bgp unknown peer field", bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, remoteAS: 65000}\n"),
			"xlb.yaml:6: bgp.peers[0].remoteAS: unknown field (known fields: address, asn, port, passwordFile, multihopTTL, holdTime, keepaliveTime, connectRetry, passive, localAddress, bfd)"},

		// YAML structure
		{"merge cycle", "interfaces:\n  - &x\n    name: ext0\n    <<: *x\n", "xlb.yaml:4: interfaces[0].<<: merges a mapping into itself"},
		{"merge of an unknown field", "interfaces:\n  - &x {name: ext0, speed: 10G, role: both}\n  - <<: *x\n    name: ext1\n",
			"xlb.yaml:2: interfaces[0].speed: unknown field (known fields: name, mode, role)\n" +
				"xlb.yaml:2: interfaces[1].speed: unknown field (known fields: name, mode, role)"},
		{"merge of a scalar", "interfaces:\n  - <<: ext0\n", "xlb.yaml:2: interfaces[0].<<: want a mapping (or a list of mappings) to merge, got \"ext0\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("xlb.yaml", []byte(c.file))
			if err == nil {
				t.Fatalf("parsed to %+v, want error\n%s", cfg, c.want)
			}
			if cfg != nil {
				t.Errorf("returned a config with the error")
			}
			if got := err.Error(); got != c.want {
				t.Errorf("error\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// TestValidFiles checks files that look odd but are right.
func TestValidFiles(t *testing.T) {
	for _, c := range []struct{ name, file string }{
		{"null fields are absent", "interfaces: [{name: ext0, mode: , role: both}]\ndatapath:\nlog:\nservices:\n"},
		{"zero datapath values are defaults", "interfaces: [{name: ext0, role: both}]\ndatapath: {conntrackSize: 0, udpTimeout: 0s}\n"},
		{"one unnamed port", web("")},
		{"weight zero", web("    backends: [{address: 198.18.1.10, weight: 0}]\n")},
		{"listen on every address", "interfaces: [{name: ext0, role: both}]\nlisten: \":9610\"\n"},
		{"listen on a name", "interfaces: [{name: ext0, role: both}]\nlisten: localhost:9610\n"},
		{"merged list of mappings", "interfaces:\n  - &a {name: ext0, mode: generic, role: both}\n  - <<: [*a]\n    name: ext1\n"},
		{"UDP and TCP on one port", svc("    vips: [198.18.100.1]\n    ports: [{name: a, port: 53}, {name: b, port: 53, protocol: UDP}]\n")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Parse("xlb.yaml", []byte(c.file)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestErrorsAreOneLine checks that no message spans lines (each error is one line of the
// joined text).
func TestErrorsAreOneLine(t *testing.T) {
	_, err := Parse("xlb.yaml", []byte(web("    backends: [{address: 198.18.1.10, state: up}, {address: x}]\n")))
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two errors as %q", err)
	}
}

// TestBGPPasswordFile checks the password file's content and relative paths.
func TestBGPPasswordFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	empty := write("empty", "\n")
	long := write("long", strings.Repeat("x", 81))
	good := write("good", "secret\n")
	peer := func(pw string) string {
		return bgpFile(bgpTop, "    - {address: 198.18.0.254, asn: 65000, passwordFile: "+pw+"}\n")
	}
	for _, c := range []struct{ file, want string }{
		{peer(empty), "xlb.yaml:6: bgp.peers[0].passwordFile: " + empty + " is empty (want the TCP MD5 password)"},
		{peer(long), "xlb.yaml:6: bgp.peers[0].passwordFile: " + long + " holds 81 bytes; a TCP MD5 password has at most 80"},
	} {
		if _, err := Parse("xlb.yaml", []byte(c.file)); err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %s", err, c.want)
		}
	}
	cfg, err := Parse(dir+"/xlb.yaml", []byte(peer("good")))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.BGP.Peers[0].PasswordFile; got != good {
		t.Errorf("relative passwordFile stored as %q, want %q", got, good)
	}
	if b := cfg.BGP; b.MinHealthyBackends != 1 || !b.WithdrawOnExit || b.LocalPref != nil || b.MED != nil {
		t.Errorf("bgp defaults: %+v", b)
	}
}

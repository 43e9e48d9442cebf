// SPDX-License-Identifier: Apache-2.0
package config

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Defaults applied by Parse to absent fields. The datapath's defaults are not repeated here:
// a zero Datapath field means "the datapath's default" (see Datapath).
const (
	// DefaultListen is the address of the HTTP server when listen is absent: loopback only, so
	// metrics are not exposed to the network unless the file says so.
	DefaultListen = "127.0.0.1:9610"
	// DefaultWeight is a backend's weight when weight is absent.
	DefaultWeight = 1
	// DefaultAffinityTimeout is sessionAffinityTimeout when sessionAffinity is ClientIP and no
	// timeout is given (Kubernetes' default, 10800 s).
	DefaultAffinityTimeout = 3 * time.Hour
	// MaxAffinityTimeout is the largest sessionAffinityTimeout (Kubernetes' limit, 86400 s).
	MaxAffinityTimeout = 24 * time.Hour
	// DefaultCheckInterval and DefaultCheckTimeout are a health check's interval and timeout
	// when absent.
	DefaultCheckInterval = 2 * time.Second
	DefaultCheckTimeout  = time.Second
	// DefaultRise and DefaultFall are a health check's rise and fall when absent.
	DefaultRise = 2
	DefaultFall = 3
	// DefaultCheckPath and DefaultExpectStatus are an http or https check's path and expected
	// status when absent.
	DefaultCheckPath    = "/"
	DefaultExpectStatus = 200
)

// Config is a parsed config file: every field checked, defaults applied.
type Config struct {
	// Interfaces (key interfaces; required, at least one) are the network interfaces the
	// datapath attaches to, in file order, each named once.
	Interfaces []Interface
	// Datapath (key datapath; optional) holds the datapath's load options.
	Datapath Datapath
	// Listen (key listen) is the host:port of the HTTP server that serves /metrics, /healthz and
	// /readyz. The host may be an IP address, a name, or empty for every address. Default
	// DefaultListen.
	Listen string
	// Log (key log) configures the daemon's log.
	Log Log
	// Services (key services; may be empty) are the balanced services in file order, defaults
	// applied. Each passed lb.Service.Validate; conflicts between services (two services claiming
	// one VIP and port) are left to lb.Plan.
	Services []lb.Service
	// HealthChecks: service name → the health check of that service's backends (key
	// services[].healthCheck). A service without a healthCheck has no entry: its backends are
	// taken as healthy. Never nil.
	HealthChecks map[string]HealthCheck
	// BGP (key bgp; optional) configures the embedded BGP speaker that announces the VIPs to the
	// upstream routers; nil when the file has no bgp section (the VIPs are then routed to the
	// gateway some other way, and the daemon speaks no BGP).
	BGP *BGP
	// L2 (key l2; optional) configures L2 mode: the VIPs (all, or those of its prefixes) are
	// announced by answering ARP and NDP on the client-facing interface, one gateway of the
	// segment owning each; nil when the file has no l2 section.
	L2 *L2
	// Pools (key pools; Kubernetes mode only, and deprecated there: AddressPool objects are the
	// place for pools, and `xlb convert` writes them from this section) are the address pools
	// the Kubernetes controller hands VIPs out of, in file order: the order they are tried,
	// before the AddressPool objects' pools. See Pool; IPAMPools converts them for the
	// allocator.
	Pools []Pool
	// Kubernetes (key kubernetes; optional) turns on Kubernetes mode (see Kubernetes); nil when
	// the file has no kubernetes section (a null "kubernetes:" is absent too: write
	// "kubernetes: {}" for every default). The services of the file are balanced next to the
	// Kubernetes Services; their names must not contain '/' and their VIPs must not be in a
	// pool.
	Kubernetes *Kubernetes
}

// Defaults of the bgp section.
const (
	// DefaultMinHealthyBackends is bgp.minHealthyBackends when absent.
	DefaultMinHealthyBackends = 1
	// DefaultWithdrawOnExit is bgp.withdrawOnExit when absent: a clean stop withdraws the
	// routes, so the routers move the traffic away before the process is gone.
	DefaultWithdrawOnExit = true
	// MaxGracefulRestart is the largest bgp.gracefulRestart (the capability's 12-bit field).
	MaxGracefulRestart = 4095 * time.Second
)

// BGP configures the embedded BGP speaker (key bgp). Its peers and large communities are the
// pure bgp package's types, which the speaker takes as they are; the daemon builds the
// speaker's bgp.Config from the rest (this package does not import the speaker, bgp/speaker).
// Every VIP address with at least MinHealthyBackends backends taking new flows on at least one
// of its frontends is announced as a /32 or /128 host route, next hop self, with the attributes
// below.
type BGP struct {
	// RouterID (key routerID; required) is the BGP identifier: an IPv4 address, not 0.0.0.0,
	// unique among the speakers (usually the gateway's upstream address).
	RouterID netip.Addr
	// ASN (key asn; required) is the local AS number, 1 to 4294967295.
	ASN uint32
	// ListenPort (key listenPort) is the TCP port the speaker accepts sessions on, 1 to 65535;
	// 0 (the default) means it does not listen and only dials out. A passive peer needs it.
	ListenPort uint16
	// GracefulRestart (key gracefulRestart) is the restart time advertised with the graceful
	// restart capability: how long the routers keep this gateway's routes when its sessions drop
	// without a NOTIFICATION (a crash, or a stop with withdrawOnExit false). Whole seconds up to
	// MaxGracefulRestart; 0 (the default) turns graceful restart off.
	GracefulRestart time.Duration
	// MinHealthyBackends (key minHealthyBackends) is how many backends taking new flows a VIP
	// needs, on at least one of its frontends, to be announced; at least 1, default
	// DefaultMinHealthyBackends.
	MinHealthyBackends int
	// WithdrawOnExit (key withdrawOnExit) says what a clean stop (SIGTERM, SIGINT) does with the
	// routes: true (the default, DefaultWithdrawOnExit) withdraws them before the process exits;
	// false leaves them at the routers for gracefulRestart, for an in-place restart or upgrade
	// (the pinned datapath keeps forwarding meanwhile). `xlb run --cleanup-on-exit` always
	// withdraws.
	WithdrawOnExit bool
	// Communities (key communities) are RFC 1997 communities added to every route, written
	// "ASN:value" (each 0 to 65535) and stored as ASN<<16 | value.
	Communities []uint32
	// LargeCommunities (key largeCommunities) are RFC 8092 large communities added to every
	// route, written "global:local1:local2" (each 0 to 4294967295).
	LargeCommunities []bgp.LargeCommunity
	// LocalPref (key localPref) is the LOCAL_PREF of every route, 0 to 4294967295, sent to iBGP
	// peers only; nil (absent) sends none.
	LocalPref *uint32
	// MED (key med) is the MULTI_EXIT_DISC of every route, 0 to 4294967295; nil (absent) sends
	// none.
	MED *uint32
	// Peers (key peers; required, at least one, outside Kubernetes mode, where BGPPeer objects
	// may list them instead) are the BGP neighbours, each address once, as the speaker takes
	// them. The keys of an item:
	//   - Address (key address; required) is the neighbour's unicast IPv4 or IPv6 address; its
	//     family is the session's, and the session carries the VIPs of that family only.
	//   - ASN (key asn; required) is the neighbour's AS number, 1 to 4294967295: bgp.asn for
	//     iBGP.
	//   - Port (key port) is the neighbour's TCP port, 1 to 65535; default 179.
	//   - PasswordFile (key passwordFile) is the file holding the TCP MD5 password (trailing
	//     newlines ignored, 1 to 80 bytes); a relative path is taken from the config file's
	//     directory (and stored joined to it). It is read when the config is parsed (an
	//     unreadable or empty file is an error) and again by the speaker at start and at each
	//     reload; absent means no MD5.
	//   - MultihopTTL (key multihopTTL) allows an eBGP neighbour that many hops away, 1 to 255;
	//     absent or 0 means directly connected.
	//   - HoldTime (key holdTime) is the hold time proposed in OPEN: whole seconds, at least 3s;
	//     default 9s (without BFD this bounds the detection of a silent failure).
	//   - KeepaliveTime (key keepaliveTime) is the keepalive interval: whole seconds, less than
	//     the hold time; default 3s.
	//   - ConnectRetry (key connectRetry) is the wait between connection attempts: whole
	//     seconds; default 1s.
	//   - Passive (key passive) makes the speaker wait for the neighbour to connect; it needs
	//     bgp.listenPort. Default false.
	//   - LocalAddress (key localAddress) is the session's source address, and so the next hop
	//     announced to the neighbour: of the address's family. Absent: the kernel picks it.
	//   - BFD (key bfd) runs single-hop BFD with the neighbour (which must run it too): true for
	//     the defaults, or an object of transmitInterval and receiveInterval (whole
	//     milliseconds, 50ms to 60s; default 300ms), multiplier (1 to 255; default 3) and enabled
	//     (default true). A dead neighbour is detected in receiveInterval × multiplier and the
	//     session reset at once. holdDown (whole seconds, 1s to 1h; default 60s) dampens a
	//     flapping session: after 3 downs within a minute BFD is suspended for holdDown (doubled
	//     at each suspension that follows soon after, at most 16 ×), the session running on its
	//     hold timer. Not with multihopTTL above 1. Absent or false: no BFD.
	//
	// A default is left zero in the bgp.Peer (bgp.Peer.WithDefaults fills it in).
	Peers []bgp.Peer
}

// Interface is an interface the datapath attaches to (an item of interfaces).
type Interface struct {
	// Name (key name; required) is the interface's name: 1 to 15 bytes without '/', ':' or
	// white space (the kernel's rules).
	Name string
	// Mode (key mode) is how the program attaches: auto (the default), native or generic.
	// The XDP datapath attaches in generic mode (asked for, or auto's fallback) only to an
	// interface with GRO and LRO off (docs/datapath.md, "Things to know when deploying").
	Mode datapath.AttachMode
	// Role (key role; required) is the side of the gateway the interface faces: client (the
	// upstream routers: packets to VIPs are balanced, nothing is reverse-NATed), cluster (the
	// nodes and Pods: backends' replies are reverse-NATed, and packets to VIPs only from the
	// site's own prefixes are balanced) or both (a one-armed gateway: a packet whose source is
	// in the cluster's prefixes is the cluster's). docs/datapath.md, "Security model".
	Role datapath.Role
}

// Datapath holds the datapath's load options (key datapath). A zero field means the datapath's
// default.
type Datapath struct {
	// Kind (key kind) is which datapath forwards: DatapathXDP (the default) or DatapathAFXDP.
	// It takes effect at a restart.
	Kind DatapathKind
	// PinPath (key pinPath) is the bpffs directory where maps and links are pinned: an absolute
	// path, or empty for the datapath's default (/sys/fs/bpf/xlb). A daemon started with the
	// pin path of an earlier one adopts its maps and links, and forwarding carries on.
	PinPath string
	// Settings are the flow settings both datapaths take (datapath.Settings), one key each:
	//   - ConntrackSize (key conntrackSize) is the number of flows conntrack holds, 0 to
	//     4294967295; 0 means the default (1048576). Changing it needs the pinned maps removed.
	//   - HandshakeSize (key handshakeSize) is the number of TCP handshakes in flight (SYN seen,
	//     no conntrack entry yet) the datapath remembers, so that a handshake's ACK goes to its
	//     SYN's backend even when the Maglev table changed in between; 0 to 4294967295, 0 means
	//     the default (65536). It also holds the first datagram of each UDP flow, whose second
	//     datagram goes there and enters conntrack, and the connection a completed handshake
	//     became, until a SYN of another tuple needs its slot and moves it into conntrack (a
	//     short connection that closes first never enters conntrack). A SYN flood churns this
	//     table, never conntrack; so does a flood of one-datagram UDP flows. Its slots also
	//     hold the filter that spares a SYN the conntrack lookup, a quarter full at about
	//     4.6 × handshakeSize live TCP flows: raise it on a gateway that holds more.
	//   - Seed (key seed) seeds the flow hash, 0 to 4294967295. Every gateway of a site must use
	//     the same seed, or a flow that ECMP moves to another gateway lands on another backend.
	//   - TCPEstablishedTimeout (key tcpEstablishedTimeout, default 1h), TCPClosingTimeout (key
	//     tcpClosingTimeout, after FIN or RST; default 10s) and UDPTimeout (key udpTimeout,
	//     default 60s) are conntrack idle timeouts, written as Go durations ("90s", "1h30m"). 0
	//     means the default; any other value must be at least datapath.MinTimeout (1s).
	//   - NewFlowRate (key newFlowRate) is the flood budget: conntrack inserts of new flows per
	//     second over all CPUs (and, separately, handshake inserts; TCP flows whose handshake
	//     the gateway did not see get an eighth of it): above it new flows are still balanced
	//     but not remembered. 0 means the default (250000); -1 means no cap (any negative value
	//     reads so); no other negative is accepted.
	//   - NextHopCacheTTL (key nextHopCacheTTL) is how long the datapath trusts a cached next hop
	//     (egress interface, MACs, MTU) before asking the kernel's FIB again, a Go duration. 0
	//     means the default (500ms); the string "off" disables the cache and is stored as a
	//     negative duration.
	datapath.Settings
	// MaglevSlots (key maglevSlots) is the capacity of the array that holds every VIP's Maglev
	// table (a VIP uses as many slots as its table size), 0 to 4294967295; 0 means the default
	// (16777216). Changing it needs the pinned maps removed.
	MaglevSlots uint32
	// MaglevTableSize (key maglevTableSize) is the Maglev table size of the services that do
	// not set their own: a prime from 2 to 1048573, or 0 for lb.DefaultTableSize (16381, enough
	// for 163 backends at 100 slots each). Every gateway of a site must use the same sizes.
	MaglevTableSize int
	// BackendWarmup (key backendWarmup) is how long a backend that newly appears in a service
	// that already has backends in service waits before it takes new flows, a Go duration up to
	// 1m. 0 means DefaultBackendWarmup; the string "off" means no wait and is stored as a
	// negative duration. Meanwhile every gateway writes the backend's reverse NAT entry: had one
	// gateway started sending it flows while another, on the replies' path, did not know it yet,
	// the replies would leave un-NATed. A new service's first backends, and backends that were
	// already listed (not ready, unhealthy) and come back, do not wait. A reload applies it.
	BackendWarmup time.Duration
	// Forwarding is how packets reach backends and replies reach clients (docs/dsr.md):
	//   - Mode (key forwarding): datapath.ReturnPath ("returnPath", the default: replies must
	//     come back through a gateway) or datapath.DSR ("dsr": direct server return through
	//     the node agents; the backends' replies leave by their nodes).
	//   - Fallback (key dsrFallback, only with forwarding: dsr): what becomes of a backend
	//     whose node cannot serve DSR (services[].backends[].dsr: false here; in Kubernetes
	//     mode, a node whose agent does not publish the capability): "exclude" (the default:
	//     no new flows) or "returnPath" (served through the gateways).
	// A reload applies it.
	Forwarding lb.Forwarding
	// ClusterPrefixes (key clusterPrefixes) are the site's own prefixes: the Pods', the
	// nodes', the cluster IPs'. Every backend address counts too, without being listed (and,
	// in Kubernetes mode, every node's addresses and Pod CIDRs). A packet to a VIP from one of
	// them is an in-cluster client's: balanced when it arrives on a cluster-facing interface,
	// dropped as forged on a client-facing one; on a one-armed interface (role both) such a
	// source is the cluster side. A reload applies it.
	ClusterPrefixes []netip.Prefix
}

// DatapathKind is which datapath forwards (key datapath.kind).
type DatapathKind string

// The datapaths.
const (
	// DatapathXDP ("xdp") is the XDP program (package xdp/gateway): pinned, so forwarding survives a
	// restart of the daemon.
	DatapathXDP DatapathKind = "xdp"
	// DatapathAFXDP ("afxdp") is the AF_XDP datapath (package xdp/afxdp): the same balancing in
	// the daemon's process, through AF_XDP sockets. Nothing is pinned: forwarding and conntrack
	// stop with the process, and pinPath and maglevSlots do not apply.
	DatapathAFXDP DatapathKind = "afxdp"
)

// DefaultBackendWarmup is datapath.backendWarmup when absent: well above the time every gateway
// takes to see an EndpointSlice change (milliseconds), short enough that a scale-up is felt at
// once.
const DefaultBackendWarmup = 500 * time.Millisecond

// Log configures the daemon's log (key log).
type Log struct {
	// Format (key format) is the line format; default LogText.
	Format LogFormat
	// Level (key level) is the least severe level logged: "debug", "info" (the default),
	// "warn" or "error".
	Level slog.Level
}

// LogFormat is the log's line format (key log.format).
type LogFormat string

// The log formats.
const (
	// LogText ("text") writes key=value lines (slog.TextHandler).
	LogText LogFormat = "text"
	// LogJSON ("json") writes one JSON object a line (slog.JSONHandler).
	LogJSON LogFormat = "json"
)

// HealthCheck is how a service's backends are probed (key services[].healthCheck).
type HealthCheck struct {
	// Type (key type; required) is the kind of probe.
	Type CheckType
	// Port (key port) is the port probed on every backend, 1 to 65535; 0 (or absent) means the
	// backend's target port for the service's first port, which must then not be an all-ports
	// port (port 0).
	Port uint16
	// Path (key path; http and https only) is the path requested, starting with '/'; default
	// DefaultCheckPath.
	Path string
	// ExpectStatus (key expectStatus; http and https only) is the HTTP status a healthy backend
	// answers, 100 to 599; default DefaultExpectStatus.
	ExpectStatus int
	// Payload (key payload; udp only) is the datagram sent: the string's UTF-8 bytes, or any
	// bytes when written as base64 with the !!binary tag. Default empty.
	Payload []byte
	// Expect (key expect; udp only), if not empty, must occur in the reply; empty means any
	// reply passes. Written like Payload.
	Expect []byte
	// Interval (key interval) is the time between probes, a Go duration above zero; default
	// DefaultCheckInterval.
	Interval time.Duration
	// Timeout (key timeout) is how long a probe may take, a Go duration above zero and below
	// Interval; default DefaultCheckTimeout.
	Timeout time.Duration
	// Rise (key rise) is the number of consecutive successes that make a failing backend
	// healthy, at least 1; default DefaultRise.
	Rise int
	// Fall (key fall) is the number of consecutive failures that make a healthy backend
	// unhealthy, at least 1; default DefaultFall.
	Fall int
}

// CheckType is the kind of health probe (key services[].healthCheck.type).
type CheckType string

// The health check types.
const (
	// CheckTCP ("tcp") connects; a completed handshake passes.
	CheckTCP CheckType = "tcp"
	// CheckHTTP ("http") sends GET Path and expects ExpectStatus.
	CheckHTTP CheckType = "http"
	// CheckHTTPS ("https") is CheckHTTP over TLS.
	CheckHTTPS CheckType = "https"
	// CheckUDP ("udp") sends Payload and expects a reply containing Expect.
	CheckUDP CheckType = "udp"
)

// isHTTP reports whether t sends an HTTP request.
func (t CheckType) isHTTP() bool { return t == CheckHTTP || t == CheckHTTPS }

// PlanOptions returns the settings lb.Plan needs from the file.
func (c *Config) PlanOptions() lb.PlanOptions {
	return lb.PlanOptions{Seed: c.Datapath.Seed, TableSize: c.Datapath.MaglevTableSize, Forwarding: c.Datapath.Forwarding}
}

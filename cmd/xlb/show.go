package main

// `xlb show`: what the XDP datapath pinned under a directory is doing, read from its maps alone
// (xdp.OpenPinned, read-only): its services with their Maglev shares and counters, its conntrack
// entries, its verdict counters. It needs no daemon, so it answers also while none runs and
// the pinned program forwards on its own, which is when an operator most needs it. The maps
// are read one after the other: beside a daemon that is writing them, the view is not atomic.

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// DefaultShowLimit is how many conntrack entries `xlb show flows` prints unless told otherwise.
const DefaultShowLimit = 1000

// servicesDoc is `xlb show services`.
type servicesDoc struct {
	Services []showService `json:"services"`
	// Unmapped are the backends in no Maglev table: draining or down, keeping only their
	// established flows. Not listed with --vip.
	Unmapped []showBackend `json:"unmappedBackends"`
}

// flowsDoc is `xlb show flows`.
type flowsDoc struct {
	Flows []showFlow `json:"flows"`
	// Total counts the entries that match --vip, also those beyond --limit.
	Total int `json:"total"`
}

// reasonsDoc is `xlb show reasons`: the counters that are not zero, by name.
type reasonsDoc struct {
	Reasons map[string]uint64 `json:"reasons"`
}

// showService is one frontend.
type showService struct {
	Frontend     string   `json:"frontend"` // "VIP:port/PROTO", port "*" for all ports
	ID           uint32   `json:"id"`
	Affinity     string   `json:"affinity,omitempty"`
	SourceRanges []string `json:"sourceRanges,omitempty"`
	// TableSize is the Maglev table's M; 0 when the frontend has no table.
	TableSize int `json:"tableSize"`
	// EmptySlots are the table's slots with no backend: their new flows are dropped. All of
	// them when no backend takes new flows.
	EmptySlots int           `json:"emptySlots"`
	Packets    uint64        `json:"packets"`
	Bytes      uint64        `json:"bytes"`
	NewFlows   uint64        `json:"newFlows"`
	Backends   []showBackend `json:"backends"`
}

// showBackend is one backend, with its share of a table when it is in one.
type showBackend struct {
	ID       uint32 `json:"id"`
	Endpoint string `json:"endpoint"` // "addr:port", port "*" when the client's is kept
	Down     bool   `json:"down,omitempty"`
	Slots    int    `json:"slots,omitempty"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	NewFlows uint64 `json:"newFlows"`
}

// showFlow is one conntrack entry.
type showFlow struct {
	Proto   string `json:"proto"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	Reverse bool   `json:"reverse,omitempty"`
	// Backend is the chosen backend's endpoint (forward entries), "" if it is gone.
	Backend   string  `json:"backend,omitempty"`
	BackendID uint32  `json:"backendID,omitempty"`
	VIPID     uint32  `json:"vipID"`
	Closing   bool    `json:"closing,omitempty"`
	IdleSec   float64 `json:"idleSeconds"`
}

// showCLI runs `xlb show` with args (after "show"), printing to stdout; it returns the exit code.
func showCLI(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pin := fs.String("pin-path", xdp.DefaultPinPath, "the bpffs `directory` the datapath is pinned in (agent: default "+socklb.DefaultPinPath+")")
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", DefaultShowLimit, "print at most `N` conntrack entries (0: all)")
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
	own, ok := map[string][]string{"services": {"vip"}, "flows": {"vip", "limit"}, "reasons": nil,
		"flow": {"client", "to", "proto", "seed"}, "agent": nil}[what]
	if !ok {
		fmt.Fprintf(stderr, "xlb show: unknown part %q: services, flows, reasons, flow or agent\n", what)
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
	var q flowQuery
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
		only = a.Unmap()
	}
	// doc is the part's document: printed as JSON, or as tables by printShow.
	var doc any
	var err error
	if what == "agent" {
		dir := socklb.DefaultPinPath
		if pinSet {
			dir = *pin
		}
		doc, err = readAgent(dir)
	} else {
		p, perr := xdp.OpenPinned(*pin)
		if perr != nil {
			fmt.Fprintf(stderr, "xlb show: %v\n", perr)
			return 1
		}
		defer p.Close()
		switch what {
		case "services":
			doc, err = showServices(p, only)
		case "flows":
			doc, err = showFlows(p, only, *limit)
		case "reasons":
			doc, err = showReasons(p)
		case "flow":
			doc, err = explainFlow(p, q)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "xlb show %s: %v\n", what, err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			fmt.Fprintf(stderr, "xlb show: %v\n", err)
			return 1
		}
		return 0
	}
	printShow(stdout, doc)
	return 0
}

// endpointString is addr:port, with IPv6 addresses in brackets, and port 0 (all ports, or the
// client's port kept) as "*".
func endpointString(a netip.Addr, port uint16) string {
	if port == 0 {
		if a.Is6() {
			return "[" + a.String() + "]:*"
		}
		return a.String() + ":*"
	}
	return netip.AddrPortFrom(a, port).String()
}

// frontendString is a frontend as endpointString writes it, with its protocol.
func frontendString(f datapath.Frontend) string {
	return endpointString(f.Addr, f.Port) + "/" + f.Proto.String()
}

// showServices returns every frontend (of VIP only, when valid), its table's backends by
// share, and the backends no table holds.
func showServices(p *xdp.Pinned, only netip.Addr) (servicesDoc, error) {
	var doc servicesDoc
	vips, err := p.VIPs()
	if err != nil {
		return doc, err
	}
	tables, err := p.MaglevTables()
	if err != nil {
		return doc, err
	}
	backends, err := p.Backends()
	if err != nil {
		return doc, err
	}
	mapped := map[datapath.BackendID]bool{}
	for _, tb := range tables {
		for _, id := range tb {
			mapped[id] = true
		}
	}
	backendOf := func(id datapath.BackendID, slots int) (showBackend, error) {
		tr, err := p.BackendTraffic(id)
		if err != nil {
			return showBackend{}, err
		}
		sb := showBackend{ID: uint32(id), Slots: slots, Packets: tr.Packets, Bytes: tr.Bytes, NewFlows: tr.NewFlows}
		if b, ok := backends[id]; ok {
			sb.Endpoint, sb.Down = endpointString(b.Addr, b.Port), b.Down
		} else {
			sb.Endpoint = "(deleted)"
		}
		return sb, nil
	}
	for f, cfg := range vips {
		if only.IsValid() && f.Addr.Unmap() != only {
			continue
		}
		tr, err := p.VIPTraffic(cfg.ID)
		if err != nil {
			return doc, err
		}
		s := showService{Frontend: frontendString(f), ID: uint32(cfg.ID), TableSize: len(tables[cfg.ID]),
			Packets: tr.Packets, Bytes: tr.Bytes, NewFlows: tr.NewFlows, Backends: []showBackend{}}
		if cfg.Affinity == datapath.AffinityClientIP {
			s.Affinity = "ClientIP"
		}
		for _, r := range cfg.SourceRanges {
			s.SourceRanges = append(s.SourceRanges, r.String())
		}
		slots := map[datapath.BackendID]int{}
		for _, id := range tables[cfg.ID] {
			if id != 0 {
				slots[id]++
			} else {
				s.EmptySlots++
			}
		}
		for id, n := range slots {
			sb, err := backendOf(id, n)
			if err != nil {
				return doc, err
			}
			s.Backends = append(s.Backends, sb)
		}
		slices.SortFunc(s.Backends, func(a, b showBackend) int { return cmp.Compare(a.ID, b.ID) })
		doc.Services = append(doc.Services, s)
	}
	slices.SortFunc(doc.Services, func(a, b showService) int { return cmp.Compare(a.ID, b.ID) })
	if only.IsValid() {
		return doc, nil
	}
	for id := range backends {
		if mapped[id] {
			continue
		}
		sb, err := backendOf(id, 0)
		if err != nil {
			return doc, err
		}
		doc.Unmapped = append(doc.Unmapped, sb)
	}
	slices.SortFunc(doc.Unmapped, func(a, b showBackend) int { return cmp.Compare(a.ID, b.ID) })
	return doc, nil
}

// showFlows returns up to limit conntrack entries (0: all) of VIP only (when valid),
// the most recently used first.
func showFlows(p *xdp.Pinned, only netip.Addr, limit int) (flowsDoc, error) {
	var doc flowsDoc
	flows, err := p.Flows()
	if err != nil {
		return doc, err
	}
	backends, err := p.Backends()
	if err != nil {
		return doc, err
	}
	if only.IsValid() {
		vips, err := p.VIPs()
		if err != nil {
			return doc, err
		}
		ids := map[datapath.VIPID]bool{}
		for f, cfg := range vips {
			if f.Addr.Unmap() == only {
				ids[cfg.ID] = true
			}
		}
		flows = slices.DeleteFunc(flows, func(f datapath.Flow) bool { return !ids[f.VIP] })
	}
	slices.SortFunc(flows, func(a, b datapath.Flow) int {
		return cmp.Or(cmp.Compare(a.Idle, b.Idle), a.Src.Compare(b.Src), a.Dst.Compare(b.Dst))
	})
	doc.Total = len(flows)
	if limit > 0 && len(flows) > limit {
		flows = flows[:limit]
	}
	doc.Flows = []showFlow{}
	for _, f := range flows {
		sf := showFlow{Proto: f.Proto.String(), Src: f.Src.String(), Dst: f.Dst.String(), Reverse: f.Reverse,
			VIPID: uint32(f.VIP), Closing: f.Closing, IdleSec: f.Idle.Seconds()}
		if !f.Reverse {
			sf.BackendID = uint32(f.Backend)
			if b, ok := backends[f.Backend]; ok {
				port := b.Port
				if port == 0 {
					port = f.Dst.Port() // an all-ports VIP keeps the client's port
				}
				sf.Backend = endpointString(b.Addr, port)
			}
		}
		doc.Flows = append(doc.Flows, sf)
	}
	return doc, nil
}

// showReasons returns the verdict counters that are not zero.
func showReasons(p *xdp.Pinned) (reasonsDoc, error) {
	var doc reasonsDoc
	rs, err := p.ReasonCounts()
	if err != nil {
		return doc, err
	}
	doc.Reasons = map[string]uint64{}
	for r, n := range rs {
		if n != 0 {
			doc.Reasons[r.String()] = n
		}
	}
	return doc, nil
}

// printShow prints a part's document as tables.
func printShow(w io.Writer, doc any) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch doc := doc.(type) {
	case servicesDoc:
		if len(doc.Services) == 0 {
			fmt.Fprintln(tw, "no services")
		}
		for _, s := range doc.Services {
			var extra []string
			if s.Affinity != "" {
				extra = append(extra, "affinity "+s.Affinity)
			}
			if len(s.SourceRanges) > 0 {
				extra = append(extra, "source ranges "+strings.Join(s.SourceRanges, ","))
			}
			switch {
			case s.TableSize == 0 || s.EmptySlots == s.TableSize:
				extra = append(extra, "NO BACKEND: new flows dropped")
			case s.EmptySlots > 0:
				extra = append(extra, fmt.Sprintf("%d empty slots: their new flows dropped", s.EmptySlots))
			}
			fmt.Fprintf(tw, "%s\tid %d\tM %d\tpackets %d\tbytes %d\tnew flows %d\t%s\n", s.Frontend, s.ID, s.TableSize,
				s.Packets, s.Bytes, s.NewFlows, strings.Join(extra, "; "))
			for _, b := range s.Backends {
				state := ""
				if b.Down {
					state = "down"
				}
				fmt.Fprintf(tw, "  %s\tid %d\tslots %d (%.1f%%)\tpackets %d\tbytes %d\tnew flows %d\t%s\n", b.Endpoint, b.ID,
					b.Slots, 100*float64(b.Slots)/float64(s.TableSize), b.Packets, b.Bytes, b.NewFlows, state)
			}
		}
		if len(doc.Unmapped) > 0 {
			fmt.Fprintln(tw, "backends in no table (draining or down: established flows only)")
			for _, b := range doc.Unmapped {
				state := "draining"
				if b.Down {
					state = "down"
				}
				fmt.Fprintf(tw, "  %s\tid %d\t%s\tpackets %d\tbytes %d\tnew flows %d\t\n", b.Endpoint, b.ID, state,
					b.Packets, b.Bytes, b.NewFlows)
			}
		}
	case flowsDoc:
		fmt.Fprintln(tw, "PROTO\tCLIENT\tVIP\tBACKEND\tIDLE\tSTATE")
		for _, f := range doc.Flows {
			state := ""
			if f.Closing {
				state = "closing"
			}
			be := f.Backend
			if f.Reverse {
				// A reverse entry is keyed backend -> client: show it from the client's side.
				fmt.Fprintf(tw, "%s\t%s\tvip id %d\t%s\t%v\treverse %s\n", f.Proto, f.Dst, f.VIPID, f.Src,
					idleString(f.IdleSec), state)
				continue
			}
			if be == "" {
				be = fmt.Sprintf("(backend %d deleted)", f.BackendID)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", f.Proto, f.Src, f.Dst, be, idleString(f.IdleSec), state)
		}
		if n := doc.Total - len(doc.Flows); n > 0 {
			fmt.Fprintf(tw, "... and %d more (--limit)\n", n)
		}
		fmt.Fprintf(tw, "%d entries\n", doc.Total)
	case explainDoc:
		e := doc
		fmt.Fprintf(tw, "flow\t%s -> %s/%s\n", e.Client, e.To, e.Proto)
		for _, st := range e.Steps {
			fmt.Fprintf(tw, "%s\t%s\n", st.Step, st.Says)
		}
		fmt.Fprintf(tw, "=>\t%s\n", e.Verdict)
	case agentDoc:
		printAgent(tw, doc)
	case reasonsDoc:
		names := make([]string, 0, len(doc.Reasons))
		for r := range doc.Reasons {
			names = append(names, r)
		}
		slices.Sort(names)
		for _, r := range names {
			fmt.Fprintf(tw, "%s\t%d\n", r, doc.Reasons[r])
		}
	}
}

// idleString rounds an idle time for reading.
func idleString(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second)).Round(time.Millisecond)
}

// flowQuery is what `xlb show flow` is asked about.
type flowQuery struct {
	client, to netip.AddrPort
	proto      datapath.Protocol
	seed       *uint32 // nil: the attached program's
}

// parseFlowQuery checks the flow flags.
func parseFlowQuery(client, to, proto, seed string) (flowQuery, error) {
	var q flowQuery
	var err error
	if q.client, err = netip.ParseAddrPort(client); err != nil {
		return q, fmt.Errorf("--client %q: want address:port: %w", client, err)
	}
	if q.to, err = netip.ParseAddrPort(to); err != nil {
		return q, fmt.Errorf("--to %q: want address:port: %w", to, err)
	}
	if q.client.Addr().Zone() != "" || q.to.Addr().Zone() != "" {
		return q, fmt.Errorf("--client %s, --to %s: no zones: the datapath sees none", q.client, q.to)
	}
	q.to = netip.AddrPortFrom(q.to.Addr().Unmap(), q.to.Port())
	if q.to.Addr().Is4() {
		q.client = netip.AddrPortFrom(q.client.Addr().Unmap(), q.client.Port())
	}
	switch {
	case q.client.Addr().Is4In6():
		return q, fmt.Errorf("--client %s: an IPv4-mapped source of an IPv6 flow is not supported", q.client)
	case q.client.Addr().Is4() != q.to.Addr().Is4():
		return q, fmt.Errorf("--client %s and --to %s: one IPv4, one IPv6", q.client, q.to)
	}
	switch strings.ToLower(proto) {
	case "tcp":
		q.proto = datapath.TCP
	case "udp":
		q.proto = datapath.UDP
	default:
		return q, fmt.Errorf("--proto %q: want tcp or udp", proto)
	}
	if seed != "" {
		n, err := strconv.ParseUint(seed, 0, 32)
		if err != nil {
			return q, fmt.Errorf("--seed %q: want 0 to 4294967295", seed)
		}
		v := uint32(n)
		q.seed = &v
	}
	return q, nil
}

// Conntrack states of `xlb show flow`'s JSON.
const (
	ctNone      = "none"         // no entry
	ctUsed      = "used"         // the flow's other packets follow it
	ctUnchecked = "unchecked"    // followed unless expired: the timeouts are unknown
	ctExpired   = "expired"      // idle past its timeout: the flow is balanced again
	ctOtherVIP  = "other-vip"    // made for a frontend this packet is not for: not used
	ctGone      = "backend-gone" // its backend is deleted or down: the flow is balanced again
)

// explainDoc is `xlb show flow`: how the datapath treats a packet of one flow, step by step.
type explainDoc struct {
	Client string `json:"client"`
	To     string `json:"to"`
	Proto  string `json:"proto"`
	// Frontend is the frontend a new flow is balanced by ("" when none: not balanced).
	Frontend string `json:"frontend,omitempty"`
	VIPID    uint32 `json:"vipID,omitempty"`
	// M is the size of the frontend's Maglev table (0: none); Seed, Hash and Slot are the pick's
	// (absent when there is no pick).
	M    int     `json:"m"`
	Seed *uint32 `json:"seed,omitempty"`
	Hash *uint32 `json:"hash,omitempty"`
	Slot *int    `json:"slot,omitempty"`
	// NewFlow is the backend endpoint a new flow (a TCP SYN) goes to; "" when none takes it.
	NewFlow string `json:"newFlow,omitempty"`
	// Conntrack is the state of the flow's entry (none, used, unchecked, expired, other-vip,
	// backend-gone); Established the backend endpoint its other packets go to by it, "" when
	// they are balanced as a new flow.
	Conntrack   string `json:"conntrack"`
	Established string `json:"established,omitempty"`
	// Steps say what each lookup found.
	Steps []explainStep `json:"steps"`
	// Verdict sums it up.
	Verdict string `json:"verdict"`
}

// explainStep is one lookup of `xlb show flow`.
type explainStep struct {
	Step string `json:"step"`
	Says string `json:"says"`
}

// explainFlow follows lb_forward (xdp/bpf/xlb.c) for q's flow through the pinned maps: the
// conntrack entry (used while its frontend, as ct_vip checks it, its backend and its timeout
// allow; then the source ranges of its VIP), and for a new flow the frontend (exact port, then
// all ports), its source ranges and its Maglev pick. Not read: the per-CPU caches, which only
// repeat conntrack and the maps within their short lifetimes, and the handshake table, by which
// the ACK (and a retransmitted SYN) of a TCP handshake in flight follows its SYN's backend even
// across a table change.
func explainFlow(p *xdp.Pinned, q flowQuery) (explainDoc, error) {
	e := explainDoc{Client: q.client.String(), To: q.to.String(), Proto: q.proto.String(), Conntrack: ctNone,
		Steps: []explainStep{}}
	step := func(name, format string, args ...any) {
		e.Steps = append(e.Steps, explainStep{name, fmt.Sprintf(format, args...)})
	}
	vips, err := p.VIPs()
	if err != nil {
		return e, err
	}
	tables, err := p.MaglevTables()
	if err != nil {
		return e, err
	}
	backends, err := p.Backends()
	if err != nil {
		return e, err
	}
	byID := make(map[datapath.VIPID]datapath.Frontend, len(vips))
	for f, c := range vips {
		byID[c.ID] = f
	}
	endpoint := func(id datapath.BackendID) string {
		b, ok := backends[id]
		if !ok || b.Down {
			return ""
		}
		port := b.Port
		if port == 0 {
			port = q.to.Port() // all ports: the client's destination port is kept
		}
		return endpointString(b.Addr, port)
	}
	allowed := func(id datapath.VIPID) (bool, string) {
		rs := vips[byID[id]].SourceRanges
		if len(rs) == 0 {
			return true, ""
		}
		var names []string
		for _, r := range rs {
			names = append(names, r.String())
		}
		in := slices.ContainsFunc(rs, func(r netip.Prefix) bool { return r.Contains(q.client.Addr()) })
		return in, strings.Join(names, ", ")
	}
	// The timeouts, and the seed unless given, come from the attached program.
	st, serr := p.Settings()
	seed := st.Seed
	switch {
	case q.seed != nil:
		seed = *q.seed
	case serr != nil:
		return e, fmt.Errorf("%w: give the seed with --seed (datapath.seed)", serr)
	}

	// Conntrack (a TCP SYN never uses it).
	estVerdict := "" // what the entry does to the flow's other packets; "" when not used
	fl, found, err := p.Flow(q.client, q.to, q.proto)
	if err != nil {
		return e, err
	}
	if found {
		fe, known := byID[fl.VIP]
		be := endpoint(fl.Backend)
		timeout := st.UDPTimeout
		closing := ""
		if q.proto == datapath.TCP {
			timeout = st.TCPEstablishedTimeout
			if fl.Closing {
				timeout, closing = st.TCPClosingTimeout, ", closing"
			}
		}
		idle := fmt.Sprintf("idle %v", fl.Idle.Round(time.Millisecond))
		switch {
		case !known || fe.Proto != q.proto || fe.Addr != q.to.Addr() || (fe.Port != 0 && fe.Port != q.to.Port()):
			e.Conntrack = ctOtherVIP
			step("conntrack", "an entry of VIP id %d, not a frontend of this packet's: not used", fl.VIP)
		case be == "":
			e.Conntrack = ctGone
			step("conntrack", "backend %d, deleted or down: the flow is balanced again", fl.Backend)
		case serr != nil:
			e.Conntrack, e.Established = ctUnchecked, be
			step("conntrack", "backend %d %s, %s%s; expiry not checked (%v)", fl.Backend, be, idle, closing, serr)
		case fl.Idle > timeout:
			e.Conntrack = ctExpired
			step("conntrack", "backend %d %s, %s of %v%s: expired, the flow is balanced again", fl.Backend, be, idle, timeout, closing)
		default:
			e.Conntrack, e.Established = ctUsed, be
			step("conntrack", "backend %d %s (VIP %s), %s of %v%s", fl.Backend, be, frontendString(fe), idle, timeout, closing)
		}
		if e.Established != "" {
			estVerdict = "to " + e.Established
			if ok, rs := allowed(fl.VIP); !ok {
				step("source ranges", "%s is in none of %s (VIP id %d): its packets are dropped (drop_src_range)", q.client.Addr(), rs, fl.VIP)
				estVerdict, e.Established = "dropped (drop_src_range)", ""
			}
		}
	} else {
		step("conntrack", "no entry")
	}

	// A new flow: the frontend, its source ranges and Maglev.
	f := datapath.Frontend{Addr: q.to.Addr(), Port: q.to.Port(), Proto: q.proto}
	cfg, ok := vips[f]
	if !ok {
		f.Port = 0
		cfg, ok = vips[f]
	}
	newFlow := ""
	switch {
	case !ok:
		step("frontend", "none for %s/%s", q.to, q.proto)
		newFlow = "not balanced: passed to the host"
	default:
		table := tables[cfg.ID]
		e.Frontend, e.VIPID, e.M = frontendString(f), uint32(cfg.ID), len(table)
		aff := ""
		if cfg.Affinity == datapath.AffinityClientIP {
			aff = ", affinity ClientIP (the client's address alone is hashed)"
		}
		step("frontend", "%s id %d, M %d%s", e.Frontend, cfg.ID, len(table), aff)
		if ok, rs := allowed(cfg.ID); !ok {
			step("source ranges", "%s is in none of %s: dropped (drop_src_range)", q.client.Addr(), rs)
			newFlow = "dropped (drop_src_range)"
			break
		} else if rs != "" {
			step("source ranges", "%s is allowed (%s)", q.client.Addr(), rs)
		}
		if len(table) == 0 {
			step("maglev", "no table: dropped (drop_no_backend)")
			newFlow = "dropped (drop_no_backend)"
			break
		}
		hash := datapath.FlowHash(seed, q.client.Addr(), q.client.Port(), q.to.Port(), q.proto,
			cfg.Affinity == datapath.AffinityClientIP)
		slot := int(hash % uint32(len(table)))
		e.Seed, e.Hash, e.Slot = &seed, &hash, &slot
		id := table[slot]
		switch e.NewFlow = endpoint(id); {
		case id == 0:
			step("maglev", "seed %d, hash %#08x, slot %d of %d: empty, dropped (drop_no_backend)", seed, hash, slot, len(table))
			newFlow = "dropped (drop_no_backend)"
		case e.NewFlow == "":
			step("maglev", "seed %d, hash %#08x, slot %d of %d: backend %d, deleted or down: dropped (drop_no_backend)",
				seed, hash, slot, len(table), id)
			newFlow = "dropped (drop_no_backend)"
		default:
			step("maglev", "seed %d, hash %#08x, slot %d of %d: backend %d %s", seed, hash, slot, len(table), id, e.NewFlow)
			newFlow = "to " + e.NewFlow
		}
	}

	switch {
	case estVerdict != "" && q.proto == datapath.TCP:
		e.Verdict = fmt.Sprintf("established packets %s; a new connection (SYN): %s", estVerdict, newFlow)
	case estVerdict != "":
		e.Verdict = "datagrams " + estVerdict
	case q.proto == datapath.TCP:
		e.Verdict = "a new connection (SYN), or a packet of an unknown one: " + newFlow +
			" (the ACK of a handshake in flight follows its SYN's backend)"
	default:
		e.Verdict = "a new flow: " + newFlow
	}
	return e, nil
}

// agentDoc is `xlb show agent --json`.
type agentDoc struct {
	Frontends []agentFrontend `json:"frontends"`
	Counters  agentCounters   `json:"counters"`
	// Attached counts the programs whose links are pinned, of Hooks (fewer: part of the
	// balancing is detached).
	Attached int `json:"attached"`
	Hooks    int `json:"hooks"`
}

// agentCounters are datapath.SocketCounters.
type agentCounters struct {
	Connects      uint64 `json:"connects"`
	Refused       uint64 `json:"refused"`
	Datagrams     uint64 `json:"datagrams"`
	DatagramsKept uint64 `json:"datagramsKept"`
	Revnat        uint64 `json:"revnat"`
	AffinityKept  uint64 `json:"affinityKept"`
	NoSlot        uint64 `json:"noSlot"`
}

// agentFrontend is one cluster-IP frontend of a node agent.
type agentFrontend struct {
	Frontend  string   `json:"frontend"`
	Endpoints []string `json:"endpoints"`
	// AffinitySeconds is the sessionAffinity: ClientIP timeout (0: none).
	AffinitySeconds int64 `json:"affinitySeconds,omitempty"`
	// MissingSlots counts slots that were missing or another frontend's: the read raced an
	// agent's update (read again), or the maps were changed outside the agent.
	MissingSlots int `json:"missingSlots,omitempty"`
}

// readAgent reads the frontends and counters of the node agent pinned in dir.
func readAgent(dir string) (agentDoc, error) {
	pa, err := socklb.ReadPinned(dir)
	if err != nil {
		return agentDoc{}, err
	}
	c := pa.Counters
	doc := agentDoc{Frontends: []agentFrontend{}, Counters: agentCounters{Connects: c.Connects, Refused: c.Refused,
		Datagrams: c.Datagrams, DatagramsKept: c.DatagramsKept, Revnat: c.Revnat, AffinityKept: c.AffinityKept, NoSlot: c.NoSlot},
		Attached: pa.Attached, Hooks: pa.Hooks}
	for _, f := range pa.Frontends {
		af := agentFrontend{Frontend: f.Frontend.String(), Endpoints: []string{}, AffinitySeconds: int64(f.AffinityTimeout / time.Second),
			MissingSlots: f.Missing}
		for _, e := range f.Endpoints {
			af.Endpoints = append(af.Endpoints, e.String())
		}
		doc.Frontends = append(doc.Frontends, af)
	}
	return doc, nil
}

// printAgent prints a node agent's document as a table.
func printAgent(tw io.Writer, doc agentDoc) {
	c := doc.Counters
	if doc.Attached < doc.Hooks {
		fmt.Fprintf(tw, "DETACHED: %d of %d programs have no pinned link: part of the balancing is off (xlb cleanup stopped half-way?)\n",
			doc.Hooks-doc.Attached, doc.Hooks)
	}
	if len(doc.Frontends) == 0 {
		fmt.Fprintln(tw, "no frontends")
	}
	for _, f := range doc.Frontends {
		var notes []string
		switch n := len(f.Endpoints); {
		case n == 0 && f.MissingSlots == 0:
			notes = append(notes, "no endpoint: connections refused")
		case n == 1:
			notes = append(notes, "1 endpoint")
		default:
			notes = append(notes, fmt.Sprintf("%d endpoints", n))
		}
		if f.AffinitySeconds > 0 {
			notes = append(notes, fmt.Sprintf("affinity ClientIP %v", time.Duration(f.AffinitySeconds)*time.Second))
		}
		if f.MissingSlots > 0 {
			notes = append(notes, fmt.Sprintf("%d SLOTS MISSING: their connections are refused (the read raced an update? run again)", f.MissingSlots))
		}
		fmt.Fprintf(tw, "%s\t%s\n", f.Frontend, strings.Join(notes, "; "))
		for _, e := range f.Endpoints {
			fmt.Fprintf(tw, "  %s\t\n", e)
		}
	}
	fmt.Fprintf(tw, "counters: connects %d, refused %d, datagrams %d (kept %d), replies and getpeername %d, affinity kept %d, no slot %d\n",
		c.Connects, c.Refused, c.Datagrams, c.DatagramsKept, c.Revnat, c.AffinityKept, c.NoSlot)
}

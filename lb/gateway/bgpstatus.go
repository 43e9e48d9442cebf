// SPDX-License-Identifier: Apache-2.0
package gateway

// /bgp: the BGP speaker's sessions and announced routes as JSON, served next to /metrics, and
// what `xlb bgp` does with it (FetchBGPStatus, PrintBGPStatus).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xlb-dev/xlb/bgp/speaker"
)

// bgpTimeout bounds FetchBGPStatus's request to the daemon.
const bgpTimeout = 5 * time.Second

// BGPStatus is the document /bgp serves.
type BGPStatus struct {
	// Enabled is false when the daemon runs no BGP speaker (no bgp section); the other fields
	// are then empty.
	Enabled  bool   `json:"enabled"`
	RouterID string `json:"routerID,omitempty"`
	ASN      uint32 `json:"asn,omitempty"`
	// Peers are the configured neighbours, sorted by address.
	Peers []BGPPeerStatus `json:"peers"`
	// Routes are the announced host routes, sorted by prefix.
	Routes []BGPRouteStatus `json:"routes"`
}

// BGPPeerStatus is one session in /bgp (bgp.PeerStatus).
type BGPPeerStatus struct {
	Address string `json:"address"`
	ASN     uint32 `json:"asn"`
	// State is the FSM state: idle, connect, active, opensent, openconfirm, established.
	State string `json:"state"`
	// UptimeSeconds is how long the session has been established (0 when down).
	UptimeSeconds int64 `json:"uptimeSeconds"`
	// Since is when the session was established (RFC 3339; empty when down).
	Since     string `json:"since,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// PrefixesSent are the routes advertised to the peer; PrefixesReceived and
	// PrefixesAccepted what it sent us (a gateway imports nothing: usually 0).
	PrefixesSent     uint64 `json:"prefixesSent"`
	PrefixesReceived uint64 `json:"prefixesReceived"`
	PrefixesAccepted uint64 `json:"prefixesAccepted"`
	UpdatesSent      uint64 `json:"updatesSent"`
	// BFD is the BFD session's state (down, init, up, admin_down; empty: no BFD),
	// BFDTransitions its transitions into and out of up, BFDSince when it last changed.
	BFD            string `json:"bfd,omitempty"`
	BFDTransitions uint64 `json:"bfdTransitions,omitempty"`
	BFDSince       string `json:"bfdSince,omitempty"`
}

// BGPRouteStatus is one announced route in /bgp with its path attributes.
type BGPRouteStatus struct {
	Prefix           string   `json:"prefix"`
	Communities      []string `json:"communities,omitempty"`      // "ASN:value"
	LargeCommunities []string `json:"largeCommunities,omitempty"` // "global:local1:local2"
	LocalPref        *uint32  `json:"localPref,omitempty"`
	MED              *uint32  `json:"med,omitempty"`
}

// bgpStatusOf reads the speaker's state (s nil: no speaker).
func bgpStatusOf(s *speaker.Speaker) BGPStatus {
	st := BGPStatus{Peers: []BGPPeerStatus{}, Routes: []BGPRouteStatus{}}
	if s == nil {
		return st
	}
	st.Enabled, st.RouterID, st.ASN = true, s.RouterID().String(), s.ASN()
	for _, p := range s.Peers() {
		ps := BGPPeerStatus{Address: p.Address.String(), ASN: p.ASN, State: p.State,
			UptimeSeconds: int64(p.Uptime / time.Second), LastError: p.LastError,
			PrefixesSent: p.Advertised, PrefixesReceived: p.Received, PrefixesAccepted: p.Accepted,
			UpdatesSent: p.UpdatesSent}
		if !p.Since.IsZero() {
			ps.Since = p.Since.UTC().Format(time.RFC3339)
		}
		ps.BFD, ps.BFDTransitions = p.BFD, p.BFDTransitions
		if !p.BFDSince.IsZero() {
			ps.BFDSince = p.BFDSince.UTC().Format(time.RFC3339Nano)
		}
		st.Peers = append(st.Peers, ps)
	}
	for _, r := range s.Routes() {
		rs := BGPRouteStatus{Prefix: r.Prefix.String(), LocalPref: r.LocalPref, MED: r.MED}
		for _, c := range r.Communities {
			rs.Communities = append(rs.Communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
		}
		for _, c := range r.LargeCommunities {
			rs.LargeCommunities = append(rs.LargeCommunities, c.String())
		}
		st.Routes = append(st.Routes, rs)
	}
	return st
}

// serveBGP serves /bgp: the speaker's sessions and routes as JSON.
func (g *Gateway) serveBGP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(bgpStatusOf(g.speaker)); err != nil {
		g.log.Debug("serve /bgp", "error", err)
	}
}

// FetchBGPStatus gets http://listen/bgp from a running gateway: its JSON as it is.
func FetchBGPStatus(listen string) ([]byte, error) {
	url := "http://" + listen + "/bgp"
	ctx, cancel := context.WithTimeout(context.Background(), bgpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (is xlb running, with listen: %s, in this network namespace?)", url, err, listen)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if len(body) == 0 {
		return nil, errors.New(url + ": empty answer")
	}
	return body, nil
}

// PrintBGPStatus prints st as two tables: the sessions, then the announced routes.
func PrintBGPStatus(w io.Writer, st BGPStatus) {
	fmt.Fprintf(w, "BGP speaker: router ID %s, AS %d\n\n", st.RouterID, st.ASN)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tASN\tSTATE\tUPTIME\tBFD\tSENT\tRECEIVED\tLAST ERROR")
	for _, p := range st.Peers {
		up := "-"
		if p.State == "established" {
			up = (time.Duration(p.UptimeSeconds) * time.Second).String()
		}
		lastErr := p.LastError
		if lastErr == "" {
			lastErr = "-"
		}
		bfd := "-"
		if p.BFD != "" {
			bfd = fmt.Sprintf("%s (%d)", p.BFD, p.BFDTransitions)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\n", p.Address, p.ASN, p.State, up, bfd,
			p.PrefixesSent, p.PrefixesReceived, lastErr)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d announced prefix(es)\n", len(st.Routes))
	if len(st.Routes) == 0 {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PREFIX\tCOMMUNITIES\tLARGE COMMUNITIES\tLOCAL_PREF\tMED")
	opt := func(v *uint32) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatUint(uint64(*v), 10)
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "-"
		}
		return strings.Join(l, " ")
	}
	for _, r := range st.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Prefix, list(r.Communities), list(r.LargeCommunities),
			opt(r.LocalPref), opt(r.MED))
	}
	_ = tw.Flush()
}

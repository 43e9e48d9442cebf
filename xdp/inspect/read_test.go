// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/xdp/gateway"
)

// TestReadParts: services, flows and reasons of a pinned datapath whose program remembered
// flows: the text and JSON forms, the VIP filter, the order and the limit of flows, all-ports
// frontends and an ambiguous endpoint's reverse entry.
func TestReadParts(t *testing.T) {
	l := newLab(t)
	svc, err := ReadServices(l.p, netip.Addr{})
	l.must(t, err)
	out := text(t, svc)
	for _, re := range []string{
		`(?m)^198\.18\.100\.1:80/TCP +id 1 +M 13 +packets 4 .*affinity ClientIP; source ranges 198\.18\.0\.0/24$`,
		`(?m)^  198\.18\.1\.10:8080 +id 1 +slots 9 \(69\.2%\)`,
		`(?m)^  198\.18\.1\.11:8080 +id 2 +slots 4 \(30\.8%\)`,
		`(?m)^\[2001:db8:100::1\]:53/UDP +id 2 +M 0 .*NO BACKEND: new flows dropped$`,
		`(?m)^198\.18\.100\.2:\*/TCP +id 3 +M 13 +packets 1 .*2 empty slots: their new flows dropped$`,
		`(?m)^  198\.18\.1\.13:\* +id 3 +slots 11 \(84\.6%\) +packets 1 `,
		`(?m)^198\.18\.100\.3:80/TCP +id 6 +M 13 +packets 20 +bytes [0-9]+ +new flows 0 +$`,
		`(?m)^backends in no table`,
		`(?m)^  198\.18\.1\.12:8080 +id 7 +draining`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("services: no line matching %s in\n%s", re, out)
		}
	}
	t.Logf("xlb show:\n%s", out)
	svc, err = ReadServices(l.p, v6)
	l.must(t, err)
	js, err := json.Marshal(svc)
	l.must(t, err)
	if !strings.Contains(string(js), `"frontend":"[2001:db8:100::1]:53/UDP"`) || strings.Contains(string(js), "198.18.100.1") ||
		!strings.Contains(string(js), `"unmappedBackends":null`) {
		t.Errorf("services of 2001:db8:100::1 as JSON: %s", js)
	}

	// Flows: the most recent first, forward entries with their backend (the all-ports VIP's
	// with the client's port), the ambiguous endpoint's reverse entry, the limit and the VIP.
	flows, err := ReadFlows(l.p, netip.Addr{}, 3)
	l.must(t, err)
	out = text(t, flows)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !regexp.MustCompile(`^TCP +198\.18\.0\.10:3000 +198\.18\.100\.2:443 +198\.18\.1\.13:443 `).MatchString(lines[1]) ||
		lines[4] != "... and 24 more (--limit)" || lines[5] != "27 entries" {
		t.Errorf("flows, limit 3:\n%s", out)
	}
	flows, err = ReadFlows(l.p, v4, 0)
	l.must(t, err)
	var fwd, rev []string
	for _, f := range flows.Flows {
		if f.Reverse {
			rev = append(rev, fmt.Sprintf("%s>%s vip %d", f.Src, f.Dst, f.VIPID))
			continue
		}
		fwd = append(fwd, fmt.Sprintf("%s>%s=%s", f.Src, f.Dst, f.Backend))
	}
	slices.Sort(fwd)
	if flows.Total != 6 || len(fwd) != 5 || !strings.HasSuffix(fwd[0], ">198.18.100.1:80=198.18.1.10:8080") &&
		!strings.HasSuffix(fwd[0], ">198.18.100.1:80=198.18.1.11:8080") ||
		fwd[4] != "198.18.0.10:2000>198.18.100.1:81=198.18.1.14:9000" ||
		!slices.Equal(rev, []string{"198.18.1.14:9000>198.18.0.10:2000 vip 4"}) {
		t.Errorf("flows of 198.18.100.1: total %d, forward %v, reverse %v", flows.Total, fwd, rev)
	}
	if out := text(t, flows); !regexp.MustCompile(`(?m)^TCP +198\.18\.0\.10:2000 +vip id 4 +198\.18\.1\.14:9000 +[0-9.]+m?s +reverse *$`).MatchString(out) {
		t.Errorf("flows of 198.18.100.1, the reverse entry from the client's side:\n%s", out)
	}
	if _, err := ReadFlows(l.p, netip.Addr{}, -1); err == nil {
		t.Error("flows, limit -1: no error")
	}

	reasons, err := ReadReasons(l.p)
	l.must(t, err)
	if reasons.Reasons[gateway.ReasonNATForward.String()] != 26 || !regexp.MustCompile(`(?m)^nat_forward +26$`).MatchString(text(t, reasons)) {
		t.Errorf("reasons: %v\n%s", reasons.Reasons, text(t, reasons))
	}
}

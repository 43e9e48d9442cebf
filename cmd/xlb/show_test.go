// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/xdp/inspect"
)

// checkShow runs `xlb show` against a daemon's pins while the pinned program forwards with no
// daemon: web's frontend with the live backends sharing its table, the down one in no table,
// and conntrack entries of the load, each to a live backend. (What each part says of a datapath
// is proven in xdp/inspect; this is the command on a real daemon's pins.)
func checkShow(t *testing.T, pinPath string, live []netip.Addr, down netip.Addr) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := showCLI(append([]string{"--pin-path", pinPath}, args...), &out, &errb); rc != 0 {
			t.Fatalf("xlb show %v: exit %d: %s", args, rc, errb.String())
		}
		return out.String()
	}
	var doc inspect.Services
	if err := json.Unmarshal([]byte(run("--json")), &doc); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s:%d/TCP", labVIP, labVIPPort)
	if len(doc.Services) != 1 || doc.Services[0].Frontend != want {
		t.Fatalf("xlb show with no daemon: services %+v, want %s", doc.Services, want)
	}
	s := doc.Services[0]
	var got []string
	slots := 0
	for _, b := range s.Backends {
		got = append(got, b.Endpoint)
		slots += b.Slots
		if b.Slots == 0 || b.Down {
			t.Errorf("backend %+v of web: want slots and not down", b)
		}
	}
	var wantEPs []string
	for _, a := range live {
		wantEPs = append(wantEPs, netip.AddrPortFrom(a, labBackendPort).String())
	}
	if !slices.Equal(got, wantEPs) || slots != s.TableSize || s.EmptySlots != 0 || s.Packets == 0 {
		t.Errorf("web in xlb show: %+v, want backends %v sharing its %d slots and packets counted", s, wantEPs, s.TableSize)
	}
	if len(doc.Unmapped) != 1 || doc.Unmapped[0].Endpoint != netip.AddrPortFrom(down, labBackendPort).String() || !doc.Unmapped[0].Down {
		t.Errorf("backends in no table: %+v, want %s down", doc.Unmapped, down)
	}
	text := run()
	if !strings.Contains(text, want) || !strings.Contains(text, "backends in no table") {
		t.Errorf("xlb show prints:\n%s", text)
	}

	var flows inspect.Flows
	if err := json.Unmarshal([]byte(run("--json", "--limit", "10", "flows")), &flows); err != nil {
		t.Fatal(err)
	}
	if flows.Total == 0 || len(flows.Flows) == 0 || len(flows.Flows) > 10 {
		t.Fatalf("xlb show flows: %d of %d entries, want some, at most 10", len(flows.Flows), flows.Total)
	}
	// Each of the most recent flows (the load's, balanced since .12 went down) explained: its
	// entry's backend, and the Maglev pick of a new connection, computed with the seed read from
	// the attached program, are the backend the program chose.
	for _, f := range flows.Flows {
		if f.Dst != fmt.Sprintf("%s:%d", labVIP, labVIPPort) || !slices.Contains(wantEPs, f.Backend) || f.Proto != "TCP" {
			t.Errorf("flow %+v: want to %s:%d, balanced to one of %v", f, labVIP, labVIPPort, wantEPs)
		}
		var e inspect.Explanation
		if err := json.Unmarshal([]byte(run("flow", "--json", "--client", f.Src, "--to", f.Dst)), &e); err != nil {
			t.Fatal(err)
		}
		if e.Established != f.Backend || e.NewFlow != f.Backend {
			t.Errorf("xlb show flow of %s (to %s): %+v", f.Src, f.Backend, e)
		}
	}
	if text := run("reasons"); !regexp.MustCompile(`(?m)^nat_forward +[1-9]`).MatchString(text) {
		t.Errorf("xlb show reasons:\n%s", text)
	}
	t.Logf("xlb show with no daemon running:\n%s", run())
}

// TestShowFlags: the part may come before, between or after the flags; flags of another part,
// bad values and a directory with no datapath are refused with exit 2 or 1 and a message
// naming the flag or the cause. Needs no datapath (nor root): every case fails before reading
// one.
func TestShowFlags(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		rc   int
		msg  string
	}{
		{[]string{"routes"}, 2, `unknown part "routes"`},
		{[]string{"flows", "reasons"}, 2, `unexpected argument "reasons" after "flows"`},
		{[]string{"--limit", "-1", "flows"}, 2, "--limit -1"},
		{[]string{"--vip", "not-an-ip"}, 2, "--vip"},
		{[]string{"flow", "--client", "198.18.0.10", "--to", "198.18.100.1:80"}, 2, "--client"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1"}, 2, "--to"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "[2001:db8::1]:80"}, 2, "one IPv4, one IPv6"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--proto", "sctp"}, 2, "--proto"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--seed", "-2"}, 2, "--seed"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--seed", "0x100000000"}, 2, "--seed"},
		{[]string{"flow", "--client", "[fe80::1%x0]:1", "--to", "[fe80::2]:80"}, 2, "no zones"},
		{[]string{"flow", "--client", "[::ffff:198.18.0.1]:1", "--to", "[2001:db8::1]:80"}, 2, "IPv4-mapped"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--limit", "3"}, 2, "--limit: not a flag of this part"},
		{[]string{"reasons", "--vip", "198.18.100.1"}, 2, "--vip: not a flag of this part"},
		{[]string{"flows", "--seed", "1"}, 2, "--seed: not a flag of this part"},
		{[]string{"--json", "agent", "--limit", "1"}, 2, "--limit: not a flag of this part"},
		{[]string{"--pin-path", filepath.Join(dir, "nothing")}, 1, "no such file"},
		{[]string{"flows", "--pin-path", empty, "--limit", "3"}, 1, "is not pinned"},
		{[]string{"--pin-path", empty, "flow", "--client", "[::ffff:198.18.0.1]:1", "--to", "[::ffff:198.18.100.1]:80"}, 1, "is not pinned"},
	} {
		var out, errb bytes.Buffer
		rc := showCLI(append([]string{"--pin-path", empty}, c.args...), &out, &errb)
		if rc != c.rc || !strings.Contains(errb.String(), c.msg) || out.Len() != 0 {
			t.Errorf("xlb show %v: exit %d, %q, printed %q; want exit %d and %q", c.args, rc, errb.String(), out.String(), c.rc, c.msg)
		}
	}
}

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

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp"
)

// checkShow runs `xlb show` against a daemon's pins while the pinned program forwards with no
// daemon: web's frontend with the live backends sharing its table, the down one in no table,
// and conntrack entries of the load, each to a live backend.
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
	var doc showDoc
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
	if !slices.Equal(got, wantEPs) || slots != s.TableSize || s.Packets == 0 {
		t.Errorf("web in xlb show: %+v, want backends %v sharing its %d slots and packets counted", s, wantEPs, s.TableSize)
	}
	if len(doc.Unmapped) != 1 || doc.Unmapped[0].Endpoint != netip.AddrPortFrom(down, labBackendPort).String() || !doc.Unmapped[0].Down {
		t.Errorf("backends in no table: %+v, want %s down", doc.Unmapped, down)
	}
	text := run()
	if !strings.Contains(text, want) || !strings.Contains(text, "backends in no table") {
		t.Errorf("xlb show prints:\n%s", text)
	}

	doc = showDoc{}
	if err := json.Unmarshal([]byte(run("--json", "--limit", "5", "flows")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.FlowsTotal == 0 || len(doc.Flows) == 0 || len(doc.Flows) > 5 {
		t.Fatalf("xlb show flows: %d of %d entries, want some, at most 5", len(doc.Flows), doc.FlowsTotal)
	}
	for _, f := range doc.Flows {
		if f.Dst != fmt.Sprintf("%s:%d", labVIP, labVIPPort) || !slices.Contains(wantEPs, f.Backend) || f.Proto != "TCP" {
			t.Errorf("flow %+v: want to %s:%d, balanced to one of %v", f, labVIP, labVIPPort, wantEPs)
		}
	}
	if text := run("reasons"); !regexp.MustCompile(`(?m)^nat_forward +[1-9]`).MatchString(text) {
		t.Errorf("xlb show reasons:\n%s", text)
	}
	t.Logf("xlb show with no daemon running:\n%s", run())
}

// TestShow: `xlb show` on a pinned datapath: the text and JSON forms, the filters, and clear
// errors for bad arguments and for a directory with no datapath.
func TestShow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (BPF)")
	}
	dir := filepath.Join("/sys/fs/bpf", netlab.Prefix())
	opts := xdp.Options{PinPath: dir, ConntrackSize: 4096, MaglevSlots: 1 << 16}
	d, err := xdp.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
		os.RemoveAll(dir)
	})
	v4, v6 := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("2001:db8:100::1")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.UpsertVIP(xdp.Frontend{Addr: v4, Port: 80, Proto: xdp.TCP}, xdp.VIPConfig{ID: 1, Affinity: xdp.AffinityClientIP,
		SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}}))
	must(d.UpsertVIP(xdp.Frontend{Addr: v6, Port: 53, Proto: xdp.UDP}, xdp.VIPConfig{ID: 2}))
	must(d.UpsertBackend(1, xdp.Backend{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080}))
	must(d.UpsertBackend(2, xdp.Backend{Addr: netip.MustParseAddr("198.18.1.11"), Port: 8080}))
	must(d.UpsertBackend(3, xdp.Backend{Addr: netip.MustParseAddr("198.18.1.12"), Port: 8080})) // draining: in no table
	table := make([]xdp.BackendID, 13)
	for i := range table {
		table[i] = xdp.BackendID(1 + i%3%2) // 1, 2, 1, 1, 2, 1, ...: 9 and 4 slots
	}
	must(d.SetMaglevTable(1, table))

	show := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		rc := showCLI(append([]string{"--pin-path", dir}, args...), &out, &errb)
		return rc, out.String(), errb.String()
	}
	rc, out, errs := show()
	if rc != 0 {
		t.Fatalf("xlb show: exit %d: %s", rc, errs)
	}
	for _, re := range []string{
		`(?m)^198\.18\.100\.1:80/TCP +id 1 +M 13 +packets 0 .*affinity ClientIP; source ranges 198\.18\.0\.0/24$`,
		`(?m)^  198\.18\.1\.10:8080 +id 1 +slots 9 \(69\.2%\)`,
		`(?m)^  198\.18\.1\.11:8080 +id 2 +slots 4 \(30\.8%\)`,
		`(?m)^\[2001:db8:100::1\]:53/UDP +id 2 +M 0 .*NO BACKEND: new flows dropped$`,
		`(?m)^backends in no table`,
		`(?m)^  198\.18\.1\.12:8080 +id 3 +draining`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("xlb show: no line matching %s in\n%s", re, out)
		}
	}
	if rc, out, _ := show("--vip", "2001:db8:100::1", "--json"); rc != 0 || !strings.Contains(out, `"frontend": "[2001:db8:100::1]:53/UDP"`) ||
		strings.Contains(out, "198.18.100.1") || strings.Contains(out, "unmappedBackends") {
		t.Errorf("xlb show --vip 2001:db8:100::1 --json: exit %d:\n%s", rc, out)
	}
	if rc, out, _ := show("flows"); rc != 0 || !strings.Contains(out, "0 entries") {
		t.Errorf("xlb show flows with no flow: exit %d:\n%s", rc, out)
	}
	empty := filepath.Join(dir, "empty")
	must(os.Mkdir(empty, 0o700))
	for _, c := range []struct {
		args []string
		rc   int
		msg  string
	}{
		{[]string{"routes"}, 2, `unknown part "routes"`},
		{[]string{"--limit", "-1", "flows"}, 2, "--limit -1"},
		{[]string{"--vip", "not-an-ip"}, 2, "--vip"},
		{[]string{"--pin-path", filepath.Join(dir, "nothing")}, 1, "no such file"},
		{[]string{"--pin-path", empty}, 1, "is not pinned"},
	} {
		rc, _, errs := show(c.args...)
		if rc != c.rc || !strings.Contains(errs, c.msg) {
			t.Errorf("xlb show %v: exit %d, %q; want exit %d and %q", c.args, rc, errs, c.rc, c.msg)
		}
	}
}

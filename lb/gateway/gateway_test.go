// SPDX-License-Identifier: Apache-2.0
package gateway_test

// The appliance loop's tests: gateway.Run with a configuration file, on a gateway datapath held
// in memory (the pure-Go balancer the AF_XDP engine runs), so that they need no root and no
// kernel. The kernel datapaths' own behaviour is tested in their packages; the binary on a real
// datapath in cmd/xlb's end-to-end tests.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/conformance"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/gateway"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// memDatapath is a gateway datapath in memory: forward.Balancer's tables, with the interfaces
// attached and the writes counted.
type memDatapath struct {
	*forward.Balancer
	mu              sync.Mutex
	ifaces          []string
	writes          int
	closed, removed bool
}

func newMem(t *testing.T) *memDatapath {
	b, err := forward.New(datapath.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	return &memDatapath{Balancer: b}
}

func (m *memDatapath) wrote() {
	m.mu.Lock()
	m.writes++
	m.mu.Unlock()
}

// Writes returns how many writes the datapath took.
func (m *memDatapath) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

func (m *memDatapath) UpsertVIP(f datapath.Frontend, c datapath.VIPConfig) error {
	m.wrote()
	return m.Balancer.UpsertVIP(f, c)
}

func (m *memDatapath) DeleteVIP(f datapath.Frontend) error {
	m.wrote()
	return m.Balancer.DeleteVIP(f)
}

func (m *memDatapath) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	m.wrote()
	return m.Balancer.UpsertBackend(id, b)
}

func (m *memDatapath) DeleteBackend(id datapath.BackendID) error {
	m.wrote()
	return m.Balancer.DeleteBackend(id)
}

func (m *memDatapath) SetMaglevTable(id datapath.VIPID, t []datapath.BackendID) error {
	m.wrote()
	return m.Balancer.SetMaglevTable(id, t)
}

func (m *memDatapath) SetReverse(ep datapath.Endpoint, r datapath.ReverseNAT) error {
	m.wrote()
	return m.Balancer.SetReverse(ep, r)
}

func (m *memDatapath) DeleteReverse(ep datapath.Endpoint) error {
	m.wrote()
	return m.Balancer.DeleteReverse(ep)
}

func (m *memDatapath) Attach(ifname string, _ datapath.AttachMode, _ datapath.Role) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.ifaces, ifname) {
		m.ifaces = append(m.ifaces, ifname)
	}
	return nil
}

func (m *memDatapath) Detach(ifname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ifaces = slices.DeleteFunc(m.ifaces, func(s string) bool { return s == ifname })
	return nil
}

func (m *memDatapath) Interfaces() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(slices.Values(m.ifaces)), nil
}

func (m *memDatapath) Reasons() (map[string]uint64, error) { return map[string]uint64{}, nil }
func (m *memDatapath) Persistent() bool                    { return true }

func (m *memDatapath) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

func (m *memDatapath) Remove() error {
	m.mu.Lock()
	m.removed = true
	m.mu.Unlock()
	return nil
}

var _ datapath.Gateway = (*memDatapath)(nil)

// syncBuffer is a log the gateway writes and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is a running gateway.Run.
type daemon struct {
	t      *testing.T
	dp     *memDatapath
	path   string
	addr   string
	reload chan os.Signal
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

const header = `interfaces: [{name: ext0, role: client}, {name: int0, role: cluster}]
datapath: {seed: 7, maglevTableSize: 251, backendWarmup: %s}
`

// web is a service of the configuration, over backends.
func web(backends ...string) string {
	s := `  - name: web
    vips: [198.18.100.1, "2001:db8:100::1"]
    ports: [{name: http, port: 80, targetPort: 8080}]
    backends:
`
	for _, b := range backends {
		s += "      - address: " + strconv.Quote(b) + "\n"
	}
	return s
}

// writeConfig writes a configuration file: the header with warm-up w, and services.
func writeConfig(t *testing.T, path, warm string, services ...string) {
	t.Helper()
	cfg := fmt.Sprintf(header, warm) + "services:\n" + strings.Join(services, "")
	if len(services) == 0 {
		cfg += "  []\n"
	}
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs gateway.Run on dp with the configuration in path until the test ends, and waits
// until it is ready.
func start(t *testing.T, dp *memDatapath, path string, cleanup bool) *daemon {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{t: t, dp: dp, path: path, addr: ln.Addr().String(), reload: make(chan os.Signal, 1),
		log: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		d.done <- gateway.Run(ctx, gateway.Options{ConfigPath: path, CleanupOnExit: cleanup, Reload: d.reload,
			Log: d.log, Listener: ln,
			LoadDatapath: func(*config.Config, *slog.Logger) (datapath.Gateway, error) { return dp, nil }})
	}()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("gateway log:\n%s", d.log)
		}
	})
	d.eventually("ready", 10*time.Second, func() error {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("gateway.Run returned before it was ready: %v", err)
		default:
		}
		code, body, err := d.get("/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})
	return d
}

// stop ends Run and waits for it.
func (d *daemon) stop() error {
	d.cancel()
	select {
	case err := <-d.done:
		d.done <- err // for the next stop
		return err
	case <-time.After(10 * time.Second):
		d.t.Fatal("gateway.Run did not return within 10 s of its context's end")
		return nil
	}
}

func (d *daemon) get(path string) (int, string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + d.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric returns the value of the sample name{labels} on /metrics (labels as written there,
// sorted by name), and false when there is none.
func (d *daemon) metric(name, labels string) (float64, bool) {
	_, body, err := d.get("/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	want := name
	if labels != "" {
		want += "{" + labels + "}"
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// eventually calls check until it returns nil, failing the test with its last error after within.
func (d *daemon) eventually(what string, within time.Duration, check func() error) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: not after %v: %v", what, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serves checks that the datapath holds exactly the plan of the file's services.
func (d *daemon) serves(path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	want, errs := lb.Plan(cfg.Services, cfg.PlanOptions())
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return holds(d.dp, want)
}

// holds reports whether dp holds exactly d (conformance.Check, as an error).
func holds(dp datapath.Services, d *lb.Desired) (err error) {
	ft := &fatalT{}
	func() {
		defer func() {
			if r := recover(); r != nil && r != ft {
				panic(r)
			}
		}()
		conformance.Check(ft, dp, d)
	}()
	if ft.msg != "" {
		return errors.New(ft.msg)
	}
	return nil
}

// fatalT is a testing.TB whose Fatalf records the message and stops the check.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(f)
}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

// TestServesTheConfiguration: the file's services are planned and applied exactly, the
// interfaces attached, readiness and the metrics say so, and a stop leaves the datapath in
// place (closed, not removed).
func TestServesTheConfiguration(t *testing.T) {
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "off", web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"))
	d := start(t, dp, path, false)
	if err := d.serves(path); err != nil {
		t.Fatal(err)
	}
	if got, _ := dp.Interfaces(); !slices.Equal(got, []string{"ext0", "int0"}) {
		t.Errorf("attached to %v, want ext0 and int0", got)
	}
	if v, ok := d.metric("xlb_frontend_serving_backends", `frontend="198.18.100.1:80/TCP",service="web"`); !ok || v != 2 {
		t.Errorf("xlb_frontend_serving_backends of the IPv4 frontend: %v (%v), want 2", v, ok)
	}
	if v, _ := d.metric("xlb_reconciles_total", `result="ok"`); v < 1 {
		t.Errorf("xlb_reconciles_total{ok} = %v", v)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if !dp.closed || dp.removed {
		t.Errorf("after a stop: closed %v, removed %v; want the datapath closed and left in place", dp.closed, dp.removed)
	}
}

// TestForwardingDSR: with forwarding: dsr the backends are written DSR and get no reverse NAT
// entry, except one marked dsr: false, which is excluded (no table slot) and keeps its entry;
// a reload back to returnPath takes effect without a restart.
func TestForwardingDSR(t *testing.T) {
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	svc := web("198.18.1.10", "198.18.1.11") + "      - {address: \"198.18.1.12\", dsr: false}\n"
	write := func(fw string) {
		cfg := strings.Replace(fmt.Sprintf(header, "off"), "backendWarmup: off", "backendWarmup: off"+fw, 1)
		if err := os.WriteFile(path, []byte(cfg+"services:\n"+svc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(", forwarding: dsr")
	d := start(t, dp, path, false)
	if err := d.serves(path); err != nil {
		t.Fatal(err)
	}
	check := func(dsr bool, reverse int) {
		t.Helper()
		bes, _ := dp.Backends()
		for _, b := range bes {
			want := dsr && b.Addr != netip.MustParseAddr("198.18.1.12")
			if b.DSR != want {
				t.Errorf("backend %s: DSR %v, want %v", b.Addr, b.DSR, want)
			}
		}
		if rev, _ := dp.Reverses(); len(rev) != reverse {
			t.Errorf("%d reverse entries, want %d: %v", len(rev), reverse, rev)
		}
	}
	check(true, 1)
	if v, _ := d.metric("xlb_frontend_serving_backends", `frontend="198.18.100.1:80/TCP",service="web"`); v != 2 {
		t.Errorf("serving backends %v, want 2 (the dsr: false one excluded)", v)
	}
	if !strings.Contains(d.log.String(), "direct server return cannot serve") {
		t.Errorf("no warning about the excluded backend in the log:\n%s", d.log)
	}
	write("")
	d.reload <- os.Interrupt
	d.eventually("the reload applied", 5*time.Second, func() error { return d.serves(path) })
	check(false, 3)
}

// TestCleanupOnExit: with CleanupOnExit a stop removes the datapath.
func TestCleanupOnExit(t *testing.T) {
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "off", web("198.18.1.10"))
	d := start(t, dp, path, true)
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if !dp.removed {
		t.Error("CleanupOnExit did not remove the datapath")
	}
}

// TestReloadAppliesADiff: a reload with one more backend writes only what changed (the backend,
// its reverse entry and the tables of the frontend that gained it); a file that does not parse
// is rejected and the previous configuration keeps serving, untouched; an interface dropped
// from the file is detached.
func TestReloadAppliesADiff(t *testing.T) {
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	api := `  - name: api
    vips: [198.18.100.2]
    ports: [{port: 443}]
    backends: [{address: 198.18.1.20}]
`
	writeConfig(t, path, "off", web("198.18.1.10", "2001:db8:1::10"), api)
	d := start(t, dp, path, false)
	before := dp.Writes()
	writeConfig(t, path, "off", web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"), api)
	d.reload <- os.Interrupt
	d.eventually("the reload applied", 5*time.Second, func() error { return d.serves(path) })
	// One backend, one reverse entry, the IPv4 frontend's table: three writes; nothing of api
	// or of the IPv6 frontend.
	if n := dp.Writes() - before; n != 3 {
		t.Errorf("the reload wrote %d times, want 3 (the new backend, its reverse entry, one table)", n)
	}
	if v, _ := d.metric("xlb_config_reloads_total", `result="applied"`); v != 1 {
		t.Errorf("xlb_config_reloads_total{applied} = %v, want 1", v)
	}

	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before = dp.Writes()
	if err := os.WriteFile(path, []byte("services: [{name: web, vips: [not-an-address]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.reload <- os.Interrupt
	d.eventually("the bad reload rejected", 5*time.Second, func() error {
		if v, _ := d.metric("xlb_config_reloads_total", `result="rejected"`); v != 1 {
			return fmt.Errorf("xlb_config_reloads_total{rejected} = %v", v)
		}
		return nil
	})
	if !strings.Contains(d.log.String(), "config reload rejected") {
		t.Error("the rejected reload was not logged")
	}
	if n := dp.Writes() - before; n != 0 {
		t.Errorf("a rejected reload wrote %d times", n)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.serves(path); err != nil {
		t.Errorf("after a rejected reload: %v", err)
	}

	// int0 leaves the file: detached at the reload.
	if err := os.WriteFile(path, bytes.Replace(good, []byte("{name: ext0, role: client}, {name: int0, role: cluster}"), []byte("{name: ext0, role: client}"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	d.reload <- os.Interrupt
	d.eventually("int0 detached", 5*time.Second, func() error {
		if got, _ := dp.Interfaces(); !slices.Equal(got, []string{"ext0"}) {
			return fmt.Errorf("attached to %v", got)
		}
		return nil
	})
}

// tableHas reports whether frontend f's Maglev table in dp names backend address a.
func tableHas(dp *memDatapath, f datapath.Frontend, a netip.Addr) bool {
	vips, _ := dp.VIPs()
	tables, _ := dp.MaglevTables()
	bes, _ := dp.Backends()
	for _, id := range tables[vips[f].ID] {
		if bes[id].Addr == a {
			return true
		}
	}
	return false
}

// TestWarmupHoldsNewBackends: a backend new to a serving service first gets its reverse NAT
// entry but no new flows (every gateway must know it before any sends it flows), and joins the
// tables once backendWarmup has passed.
func TestWarmupHoldsNewBackends(t *testing.T) {
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "400ms", web("198.18.1.10"))
	d := start(t, dp, path, false)
	f := datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}
	newcomer := netip.MustParseAddr("198.18.1.11")
	writeConfig(t, path, "400ms", web("198.18.1.10", "198.18.1.11"))
	reloaded := time.Now()
	d.reload <- os.Interrupt
	d.eventually("the newcomer's reverse entry", 5*time.Second, func() error {
		if !dp.HasReverse(datapath.Endpoint{Addr: newcomer, Port: 8080, Proto: datapath.TCP}) {
			return errors.New("no reverse entry")
		}
		return nil
	})
	if tableHas(dp, f, newcomer) && time.Since(reloaded) < 400*time.Millisecond {
		t.Fatalf("the newcomer took new flows %v after the reload, before its 400ms warm-up", time.Since(reloaded))
	}
	d.eventually("the newcomer in the table", 5*time.Second, func() error {
		if !tableHas(dp, f, newcomer) {
			return errors.New("not in the table")
		}
		return nil
	})
	if held := time.Since(reloaded); held < 400*time.Millisecond {
		t.Errorf("the newcomer joined the table %v after the reload, before its warm-up", held)
	}
}

// TestHealthChecks: a backend failing its health check takes no new flows and is reported
// unhealthy; once it passes, it joins the table. The backends are on loopback, probed for real.
func TestHealthChecks(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := up.Addr().(*net.TCPAddr).Port
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	svc := fmt.Sprintf(`  - name: web
    vips: [198.18.100.1]
    ports: [{port: 80, targetPort: %d}]
    backends: [{address: 127.0.0.1}, {address: 127.0.0.2}]
    healthCheck: {type: tcp, interval: 100ms, timeout: 50ms, rise: 1, fall: 1}
`, port)
	writeConfig(t, path, "off", svc)
	d := start(t, dp, path, false)
	f := datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}
	if !tableHas(dp, f, netip.MustParseAddr("127.0.0.1")) || tableHas(dp, f, netip.MustParseAddr("127.0.0.2")) {
		t.Fatal("once ready, the table should name the backend that passes its check and not the one that fails")
	}
	if v, _ := d.metric("xlb_backend_healthy", `backend="127.0.0.2",service="web"`); v != 0 {
		t.Errorf("xlb_backend_healthy of the failing backend = %v, want 0", v)
	}
	second, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	go func() {
		for {
			c, err := second.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	d.eventually("the recovered backend in the table", 5*time.Second, func() error {
		if !tableHas(dp, f, netip.MustParseAddr("127.0.0.2")) {
			return errors.New("not in the table")
		}
		return nil
	})
}

// TestRestartAdoptsState: a gateway started on a datapath that an earlier one filled writes
// nothing for the same configuration.
func TestRestartAdoptsState(t *testing.T) {
	dp := newMem(t)
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	writeConfig(t, path, "500ms", web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"))
	d := start(t, dp, path, false)
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	before := dp.Writes()
	d2 := start(t, dp, path, false)
	if n := dp.Writes() - before; n != 0 {
		t.Errorf("the restarted gateway wrote %d times for the same configuration", n)
	}
	if err := d2.serves(path); err != nil {
		t.Error(err)
	}
}

package reconcile

import (
	"bufio"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// BenchmarkReconcile10kServices plans and applies 10,000 services with 10 backends each into the
// real datapath maps (the scale target: ≤ 10 s, ≤ 500 MB RSS), then applies the same plan
// again (nothing to write) and one changed service. It reports seconds and the process's peak RSS.
func BenchmarkReconcile10kServices(b *testing.B) {
	const services, backends = 10000, 10
	svcs := make([]lb.Service, services)
	for i := range svcs {
		s := lb.Service{
			Name:  "bench/svc-" + strconv.Itoa(i),
			VIPs:  []netip.Addr{netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})},
			Ports: []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		}
		for j := range backends {
			n := i*backends + j
			s.Backends = append(s.Backends, lb.Backend{Addr: netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}), Weight: 1})
		}
		svcs[i] = s
	}
	// 10 backends want M ≥ 1000: 10,000 frontends of 1021 slots fill 10.2 M of the datapath's
	// default 16.7 M (the default 16381 would need MaglevSlots raised to 2^28).
	opts := lb.PlanOptions{Seed: 1, TableSize: 1021}
	for range b.N {
		dp, err := xdp.Load(xdp.Options{NoPin: true, Settings: datapath.Settings{ConntrackSize: 4096}})
		if err != nil {
			b.Fatal(err)
		}
		r, err := New(dp, nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		d, errs := lb.Plan(svcs, opts)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		planned := time.Since(start)
		if _, err := r.Apply(d); err != nil {
			b.Fatal(err)
		}
		full := time.Since(start)

		start = time.Now()
		res, err := r.Apply(d)
		if err != nil || res.Changes() != 0 {
			b.Fatalf("second apply: %+v %v", res, err)
		}
		noop := time.Since(start)

		svcs[0].Backends[0].State = lb.Draining
		start = time.Now()
		d2, _ := lb.Plan(svcs, opts)
		res, err = r.Apply(d2)
		if err != nil || res.TablesWritten != 1 {
			b.Fatalf("one changed service: %+v %v", res, err)
		}
		one := time.Since(start)
		svcs[0].Backends[0].State = lb.Active
		dp.Close()

		b.ReportMetric(planned.Seconds(), "plan-s")
		b.ReportMetric(full.Seconds(), "plan+apply-s")
		b.ReportMetric(noop.Seconds(), "noop-apply-s")
		b.ReportMetric(one.Seconds(), "replan+apply-one-s")
		b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
	}
}

// peakRSSMB reads VmHWM from /proc/self/status.
func peakRSSMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

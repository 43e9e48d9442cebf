// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TC verdicts.
const (
	actOK   = 0
	actShot = 2
)

// newDP loads a Datapath without pins (with opts), closed when t ends.
func newDP(t testing.TB, opts Options) *Datapath {
	t.Helper()
	netlab.RequireRoot(t, "it loads BPF programs")
	if opts.Flows == 0 {
		opts.Flows = MinFlows // the tests' flows fit; the default preallocates 136 MiB
	}
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// The test node's own addresses: its ICMP errors about a local Pod's flow are rewritten.
	must(t, d.SetNodeAddresses([]netip.Addr{node4, node6}))
	return d
}

// pinDir returns a fresh pin directory under /sys/fs/bpf, removed (with what is pinned in it)
// when t ends.
func pinDir(t testing.TB) string {
	t.Helper()
	pin := filepath.Join("/sys/fs/bpf", "xlb-dsr-test-"+netlab.Prefix())
	t.Cleanup(func() {
		if err := removePins(pin); err != nil {
			t.Error(err)
		}
	})
	return pin
}

// run runs the program of direction dir on pkt once.
func run(t testing.TB, d *Datapath, dir Direction, pkt []byte) progrun.Result {
	t.Helper()
	r, err := progrun.SKB(d.Program(dir), pkt, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// expect runs pkt through dir's program and checks the verdict and the bytes out (want nil:
// the packet must come out unchanged).
func expect(t testing.TB, d *Datapath, dir Direction, what string, pkt []byte, verdict uint32, want []byte) {
	t.Helper()
	r := run(t, d, dir, pkt)
	if r.Verdict != verdict {
		t.Errorf("%s: verdict %d, want %d", what, r.Verdict, verdict)
	}
	if verdict == actShot {
		return // a dropped packet's bytes go nowhere
	}
	if want == nil {
		want = pkt
	}
	if !bytes.Equal(r.Data, want) {
		t.Errorf("%s: packet out\n%s\nwant\n%s", what, hex.Dump(r.Data), hex.Dump(want))
	}
}

// counters returns the counters that are not 0.
func counters(t testing.TB, d *Datapath) map[string]uint64 {
	t.Helper()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c {
		if v == 0 {
			delete(c, k)
		}
	}
	return c
}

// checkCounters compares the counters that are not 0 with want.
func checkCounters(t testing.TB, d *Datapath, what string, want map[string]uint64) {
	t.Helper()
	got := counters(t, d)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: counters %v, want %v", what, got, want)
	}
}

// flowStrings lists the recorded flows as "pod client proto vip".
func flowStrings(t testing.TB, d *Datapath) []string {
	t.Helper()
	fs, err := d.Flows()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %s %s %s", f.Pod, f.Client, f.Proto, f.VIP))
	}
	return out
}

// checkFlows compares the recorded flows with want.
func checkFlows(t testing.TB, d *Datapath, what string, want ...string) {
	t.Helper()
	got := flowStrings(t, d)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: flows %q, want %q", what, got, want)
	}
}

// allow adds the pair {frontend vip/proto, endpoint}.
func allow(t testing.TB, d *Datapath, vip netip.AddrPort, proto datapath.Protocol, ep netip.AddrPort) {
	t.Helper()
	must(t, d.AddDSRService(datapath.DSRService{Frontend: datapath.Frontend{Addr: vip.Addr(), Port: vip.Port(), Proto: proto}, Endpoint: ep}))
}

// protoOf is the contract's protocol of a gopacket one.
func protoOf(p layers.IPProtocol) datapath.Protocol {
	if p == layers.IPProtocolTCP {
		return datapath.TCP
	}
	return datapath.UDP
}

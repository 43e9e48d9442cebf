// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"os"
	"testing"
)

// EnvDatapath, when set ("xdp" or "afxdp"), is the datapath.kind of every gateway of the sites
// NewT builds whose Options do not say (XLB_LAB_DATAPATH=afxdp runs the lab suite on the AF_XDP
// datapath).
const EnvDatapath = "XLB_LAB_DATAPATH"

// EnvForwarding, when "returnPath", builds the sites NewT builds in the return-path topology
// (Options.ReturnPath): XLB_LAB_FORWARDING=returnPath runs the lab suite with the gateways on
// the replies' path. Unset or "dsr": direct server return, the default.
const EnvForwarding = "XLB_LAB_FORWARDING"

// NewT builds a site for a test (see New) and removes it when the test ends, failed or not.
// It fails the test at once if the site cannot be built. When the test fails, the end of each
// gateway's xlb log is logged.
func NewT(t testing.TB, opts Options) *Site {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the lab needs root (network namespaces, XDP, bpffs): run the tests as root")
	}
	if k := os.Getenv(EnvDatapath); k != "" && opts.Datapaths == nil {
		for range max(opts.Gateways, 2) {
			opts.Datapaths = append(opts.Datapaths, k)
		}
	}
	switch f := os.Getenv(EnvForwarding); f {
	case "", "dsr":
	case "returnPath":
		opts.ReturnPath = true
	default:
		t.Fatalf("%s=%q: want dsr or returnPath", EnvForwarding, f)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, g := range s.Gateways {
				if m, err := g.Metrics(); err == nil {
					t.Logf("%s datapath counters: %s", g.Name, m.Reasons())
				}
				t.Logf("%s xlb log (%s):\n%s", g.Name, g.LogPath, g.logTail(40))
			}
			for _, a := range s.Agents {
				if p, err := a.DSR(); err == nil {
					t.Logf("%s node DSR counters: %v", a.Node.Name, p.Counters)
				}
				t.Logf("%s agent log (%s):\n%s", a.Node.Name, a.LogPath, tail(a.LogPath, 30))
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("close site %s: %v", s.Prefix, err)
		}
	})
	return s
}

// EnvReturnPath reports whether EnvForwarding asks for the return-path topology.
func EnvReturnPath() bool { return os.Getenv(EnvForwarding) == "returnPath" }

package lab

import (
	"os"
	"testing"
)

// EnvDatapath, when set ("xdp" or "afxdp"), is the datapath.kind of every gateway of the sites
// NewT builds whose Options do not say (XLB_LAB_DATAPATH=afxdp runs the lab suite on the AF_XDP
// datapath).
const EnvDatapath = "XLB_LAB_DATAPATH"

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
		}
		if err := s.Close(); err != nil {
			t.Errorf("close site %s: %v", s.Prefix, err)
		}
	})
	return s
}

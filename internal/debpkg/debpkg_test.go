package debpkg

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":            "1.2.3",
		"v1.2.3-4-gabcdef0": "1.2.3+4+gabcdef0",
		"0adb712-dirty":     "0.0~git.0adb712.dirty",
		"":                  "0.0~git.devel",
	} {
		if got := DebVersion(in); got != want {
			t.Errorf("DebVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnitCapabilities: the packaged unit grants xlb run the capabilities the chart's gateway
// gets (cmd/xlb's TestChartGatewayCapabilities runs xlb run with exactly those, and fails without
// each) and the AF_XDP datapath's two, which an appliance's config may choose, and nothing more:
// no CAP_SYS_ADMIN, no CAP_SYS_RESOURCE. The bounding and ambient sets are the same.
func TestUnitCapabilities(t *testing.T) {
	data, err := os.ReadFile("../../deploy/deb/xlb.service")
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && (k == "CapabilityBoundingSet" || k == "AmbientCapabilities") {
			f := strings.Fields(v)
			slices.Sort(f)
			sets[k] = f
		}
	}
	want := []string{"CAP_BPF", "CAP_IPC_LOCK", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_PERFMON"}
	for _, k := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		if !slices.Equal(sets[k], want) {
			t.Errorf("%s = %v, want %v", k, sets[k], want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0
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

// TestCopyright: deploy/deb/copyright (machine-readable, DEP-5) gives the project's license,
// Apache-2.0, and the BPF programs' dual license, and every license a Files paragraph names has
// its own paragraph with its text or where Debian keeps it.
func TestCopyright(t *testing.T) {
	data, err := os.ReadFile("../../deploy/deb/copyright")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{} // Files pattern -> License
	texts := map[string]bool{}   // license name -> has its paragraph
	for _, para := range strings.Split(string(data), "\n\n") {
		fields := map[string]string{}
		for _, line := range strings.Split(para, "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, " ") {
				fields[k] = v
			}
		}
		switch {
		case fields["Files"] != "":
			files[fields["Files"]] = fields["License"]
		case fields["License"] != "" && strings.Contains(para, "\n "):
			texts[fields["License"]] = true
		}
	}
	if files["*"] != "Apache-2.0" {
		t.Errorf("Files: * has License %q, want Apache-2.0", files["*"])
	}
	if files["xdp/*/bpf/* xdp/datapath/*.h bench/bpf/*"] != "GPL-2.0-only or BSD-2-Clause" {
		t.Errorf("the BPF C's license: %v", files)
	}
	for _, l := range files {
		for _, name := range strings.Split(l, " or ") {
			if !texts[name] {
				t.Errorf("license %s has no paragraph of its own", name)
			}
		}
	}
}

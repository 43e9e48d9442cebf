// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestHeaderMatchesGo: datapath.h, the C half of the contract, defines the same numbers as this
// package.
func TestHeaderMatchesGo(t *testing.T) {
	src, err := os.ReadFile("datapath.h")
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(\w+)\s+(\w+)`).FindAllStringSubmatch(string(src), -1) {
		if v, err := strconv.ParseUint(m[2], 0, 64); err == nil {
			defs[m[1]] = v
		}
	}
	for name, want := range map[string]uint64{
		"FAMILY_V4": FamilyV4, "FAMILY_V6": FamilyV6,
		"PROTO_TCP": uint64(TCP), "PROTO_UDP": uint64(UDP),
		"MAX_VIPS": MaxVIPs, "MAX_BACKENDS": MaxBackends, "MAX_MAGLEV_M": MaxMaglevM,
		"REV_MAX_CANDIDATES": MaxReverseCandidates,
		"DSR_OPT4_TYPE":      CarrierOpt4Type, "DSR_OPT4_LEN": CarrierOpt4Len,
		"DSR_OPT6_TYPE": CarrierOpt6Type, "DSR_OPT6_DATA": CarrierOpt6Data, "DSR_OPT6_HDRLEN": CarrierOpt6HdrLen,
		"ROLE_NONE": uint64(RoleNone), "ROLE_CLIENT": uint64(RoleClient), "ROLE_CLUSTER": uint64(RoleCluster),
		"ROLE_BOTH": uint64(RoleBoth), "MAX_IFINDEX": MaxIfindex,
		"SITE_CLUSTER": uint64(SiteCluster), "SITE_GATEWAY": uint64(SiteGateway), "MAX_SITE_SOURCES": MaxSiteSources,
	} {
		got, ok := defs[name]
		switch {
		case !ok:
			t.Errorf("datapath.h does not define %s", name)
		case got != want:
			t.Errorf("datapath.h: %s = %d, Go says %d", name, got, want)
		}
	}
}

func TestWireAddrRoundTrip(t *testing.T) {
	for _, s := range []string{"198.18.0.1", "2001:db8::1", "::ffff:198.18.0.2"} {
		a := netip.MustParseAddr(s)
		w, fam := WireAddr(a)
		if got := AddrFromWire(w, fam); got != a.Unmap() {
			t.Errorf("%s: round trip gave %s", a, got)
		}
		if a.Unmap().Is4() && (fam != FamilyV4 || w[1]|w[2]|w[3] != 0) {
			t.Errorf("%s: family %d, words %x: want IPv4 in the first word only", a, fam, w)
		}
	}
	if WirePort(WirePort(8080)) != 8080 || WirePort(0x1234) == 0x1234 {
		t.Error("WirePort is not a byte swap on this little-endian host")
	}
}

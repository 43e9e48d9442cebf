// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"math"
	"net/netip"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in, first, last, str string
		size                 uint64
	}{
		{"198.18.100.0/24", "198.18.100.0", "198.18.100.255", "198.18.100.0/24", 256},
		{" 198.18.101.10 - 198.18.101.20 ", "198.18.101.10", "198.18.101.20", "198.18.101.10-198.18.101.20", 11},
		{"198.18.101.0-198.18.101.127", "198.18.101.0", "198.18.101.127", "198.18.101.0/25", 128},
		{"2001:db8:100::/120", "2001:db8:100::", "2001:db8:100::ff", "2001:db8:100::/120", 256},
		{"198.18.100.7", "198.18.100.7", "198.18.100.7", "198.18.100.7", 1},
		{"198.18.100.7/32", "198.18.100.7", "198.18.100.7", "198.18.100.7", 1},
		{"2001:db8:1::/64", "2001:db8:1::", "2001:db8:1::ffff:ffff:ffff:ffff", "2001:db8:1::/64", math.MaxUint64},
		{"2001:db8::/63", "2001:db8::", "2001:db8:0:1:ffff:ffff:ffff:ffff", "2001:db8::/63", math.MaxUint64},
		{"2001:db8::1-2001:db8::1:0", "2001:db8::1", "2001:db8::1:0", "2001:db8::1-2001:db8::1:0", 65536},
	} {
		r, err := ParseRange(c.in)
		if err != nil {
			t.Errorf("ParseRange(%q): %v", c.in, err)
			continue
		}
		if r.First != netip.MustParseAddr(c.first) || r.Last != netip.MustParseAddr(c.last) {
			t.Errorf("ParseRange(%q) = %v..%v, want %s..%s", c.in, r.First, r.Last, c.first, c.last)
		}
		if r.String() != c.str {
			t.Errorf("ParseRange(%q).String() = %q, want %q", c.in, r.String(), c.str)
		}
		if r.Size() != c.size {
			t.Errorf("ParseRange(%q).Size() = %d, want %d", c.in, r.Size(), c.size)
		}
	}
}

func TestParseRangeErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `"" is not an IP address (want a CIDR such as 198.18.100.0/24, a range such as 198.18.101.10-198.18.101.20, or one address)`},
		{"edge", `"edge" is not an IP address (want a CIDR such as 198.18.100.0/24, a range such as 198.18.101.10-198.18.101.20, or one address)`},
		{"198.18.100.0/33", `"198.18.100.0/33" is not a CIDR (want an address and a prefix length, such as 198.18.100.0/24 or 2001:db8:100::/120)`},
		{"198.18.100.1/24", "198.18.100.1/24 has host bits set (did you mean 198.18.100.0/24?)"},
		{"::ffff:198.18.100.0/120", "::ffff:198.18.100.0/120 is an IPv4-mapped IPv6 prefix; write it in IPv4 form"},
		{"198.18.100.20-198.18.100.10", `range "198.18.100.20-198.18.100.10" ends before it starts (write the lower address first)`},
		{"198.18.100.1-2001:db8::1", `range "198.18.100.1-2001:db8::1" mixes IPv4 and IPv6`},
		{"198.18.100.1-x", `range "198.18.100.1-x": "x" is not an IP address`},
		{"198.18.100.1-", `range "198.18.100.1-": "" is not an IP address`},
		{"fe80::1%eth0", "fe80::1%eth0 has a zone; a VIP cannot (want a CIDR such as 198.18.100.0/24, a range such as 198.18.101.10-198.18.101.20, or one address)"},
		{"::ffff:198.18.100.1", "::ffff:198.18.100.1 is an IPv4-mapped IPv6 address; write it in IPv4 form (want a CIDR such as 198.18.100.0/24, a range such as 198.18.101.10-198.18.101.20, or one address)"},
		{"0.0.0.0/0", "0.0.0.0/0 overlaps 0.0.0.0/8 (\"this network\"), which cannot be a VIP"},
		{"127.0.0.1", "127.0.0.1 overlaps 127.0.0.0/8 (loopback), which cannot be a VIP"},
		{"223.255.255.0-224.0.0.10", "223.255.255.0-224.0.0.10 overlaps 224.0.0.0/4 (multicast), which cannot be a VIP"},
		{"::/0", "::/0 overlaps ::/128 (the unspecified address), which cannot be a VIP"},
		{"fe80::/64", "fe80::/64 overlaps fe80::/10 (link-local), which cannot be a VIP"},
		{"ff02::1", "ff02::1 overlaps ff00::/8 (multicast), which cannot be a VIP"},
	} {
		_, err := ParseRange(c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("ParseRange(%q) = %v\nwant %s", c.in, err, c.want)
		}
	}
}

func TestRangeOps(t *testing.T) {
	r := mustRange("198.18.100.10-198.18.100.20")
	for _, c := range []struct {
		addr string
		in   bool
	}{{"198.18.100.9", false}, {"198.18.100.10", true}, {"198.18.100.20", true}, {"198.18.100.21", false},
		{"::ffff:198.18.100.15", false}, {"2001:db8::a", false}} {
		if got := r.Contains(netip.MustParseAddr(c.addr)); got != c.in {
			t.Errorf("%s.Contains(%s) = %v", r, c.addr, got)
		}
	}
	for _, c := range []struct {
		other string
		over  bool
	}{{"198.18.100.0/28", true}, {"198.18.100.20", true}, {"198.18.100.21-198.18.100.30", false},
		{"198.18.100.0-198.18.100.9", false}, {"2001:db8::/32", false}, {"198.18.0.0/16", true}} {
		if got := r.Overlaps(mustRange(c.other)); got != c.over {
			t.Errorf("%s.Overlaps(%s) = %v", r, c.other, got)
		}
	}
	for _, c := range []struct {
		r    string
		want uint64
	}{{"198.18.100.0/24", 2}, {"198.18.100.1-198.18.100.254", 0}, {"198.18.100.255-198.18.101.0", 2},
		{"198.18.0.0/16", 512}, {"198.18.100.5", 0}, {"198.18.100.255", 1}, {"2001:db8::/120", 0}} {
		if got := buggyCount(mustRange(c.r)); got != c.want {
			t.Errorf("buggyCount(%s) = %d, want %d", c.r, got, c.want)
		}
	}
}

func mustRange(s string) Range {
	r, err := ParseRange(s)
	if err != nil {
		panic(err)
	}
	return r
}

// FuzzParseRange checks that ParseRange never panics, that what it accepts is a range of one
// family, lowest first, and that String reads back to the same range.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"198.18.100.0/24", "198.18.101.10-198.18.101.20", "2001:db8:100::/120", "198.18.100.1",
		"1.2.3.4-1.2.3.4", "::1", "a-b-c", "/", "-", "1.2.3.4/", "2001:db8::%x-2001:db8::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		if !r.First.IsValid() || r.First.Is4() != r.Last.Is4() || r.Last.Less(r.First) || r.First.Is4In6() || r.First.Zone() != "" {
			t.Fatalf("ParseRange(%q) = %#v", s, r)
		}
		if !r.Contains(r.First) || !r.Contains(r.Last) || r.Size() == 0 {
			t.Fatalf("ParseRange(%q) = %s, which does not contain its ends", s, r)
		}
		back, err := ParseRange(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRange(%q).String() = %q, which reads back as %v, %v", s, r.String(), back, err)
		}
	})
}

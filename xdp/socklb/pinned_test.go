package socklb

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/lb"
)

// TestReadPinned: the read-only view of an agent's pins gives back the plan applied, while the
// agent runs and after it exits (its programs still balancing), with the counters the
// programs kept; a directory without an agent's pins is a clear error.
func TestReadPinned(t *testing.T) {
	s := newSite(t)
	pin := pinDir(t)
	plan := lb.ConnectPlan{
		front("198.18.200.1", 80, lb.TCP):    eps(ep(b10, 8080), ep(b11, 8080)),
		front("198.18.200.1", 53, lb.UDP):    {Endpoints: []netip.AddrPort{ep(b10, 5353)}, AffinityTimeout: 3 * time.Hour},
		front("198.18.200.2", 80, lb.TCP):    eps(), // no endpoint: refused
		front("2001:db8:200::1", 80, lb.TCP): eps(ep(netip.MustParseAddr("2001:db8:1::10"), 8080)),
	}
	d, err := Load(Options{Cgroup: s.cgroup, PinPath: pin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(plan); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80*4"); r[0].Err != "" {
		t.Fatalf("connects: %+v", r[0])
	}
	want := func() string {
		var out []string
		for f, cf := range plan {
			out = append(out, fmt.Sprintf("%s %v %v", f, cf.Endpoints, cf.AffinityTimeout))
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	}()
	check := func(when string) {
		t.Helper()
		fs, c, err := ReadPinned(pin)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		var got []string
		for _, f := range fs {
			if f.Incomplete {
				t.Errorf("%s: %s read as incomplete", when, f.Frontend)
			}
			got = append(got, fmt.Sprintf("%s %v %v", f.Frontend, f.Endpoints, f.AffinityTimeout))
		}
		slices.Sort(got)
		if g := strings.Join(got, "\n"); g != want {
			t.Errorf("%s: the pinned view reads\n%s\nwant\n%s", when, g, want)
		}
		if c.Connects < 4 {
			t.Errorf("%s: counters %+v, want the 4 connects", when, c)
		}
	}
	check("with the agent running")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	check("with the agent gone")

	empty := filepath.Join("/sys/fs/bpf", "xlb-test-"+netlab.Prefix())
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(empty)
	if _, _, err := ReadPinned(empty); err == nil || !strings.Contains(err.Error(), "is not pinned (no node agent there)") {
		t.Errorf("ReadPinned of an empty directory: %v", err)
	}
}

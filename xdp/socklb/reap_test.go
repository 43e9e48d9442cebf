// SPDX-License-Identifier: Apache-2.0
package socklb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// heldClient is a running holdUDP client.
type heldClient struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// hold starts a holdUDP client in the site's namespace and cgroup and returns it with what its
// sockets' first exchanges saw.
func (s *site) hold(t *testing.T, addrs ...string) (*heldClient, []report) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", s.ns.Name, os.Args[0], "-test.run=^TestClientHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHold+"="+strings.Join(addrs, ","))
	cg, err := netlab.InCgroup(cmd, s.cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	c := &heldClient{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	return c, c.next(t, heldTag)
}

// next reads the client's output up to its next line tagged tag and decodes it.
func (c *heldClient) next(t *testing.T, tag string) []report {
	t.Helper()
	for c.out.Scan() {
		if rest, ok := strings.CutPrefix(c.out.Text(), tag); ok {
			var r []report
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				t.Fatalf("client line %q: %v", rest, err)
			}
			return r
		}
	}
	t.Fatalf("client ended without a %q line: %v", tag, c.out.Err())
	return nil
}

// again has the client ask every socket once more and returns what each saw.
func (c *heldClient) again(t *testing.T) []report {
	t.Helper()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	return c.next(t, reportTag)
}

// TestCloseLostUDP: the connected UDP sockets whose endpoint left their frontend, or whose
// frontend went, are closed in the namespaces pinned in a directory (each once, a dangling one
// skipped); the others go on.
func TestCloseLostUDP(t *testing.T) {
	s := newSite(t)
	if s.dp.reap == nil {
		t.Fatalf("the UDP socket iterator did not load: %v", s.dp.reapErr)
	}
	fa, fb, fc := front("198.18.200.1", 53, datapath.UDP), front("198.18.200.2", 53, datapath.UDP), front("198.18.200.3", 53, datapath.UDP)
	fd, fe := front("2001:db8:200::1", 53, datapath.UDP), front("198.18.200.5", 53, datapath.UDP)
	p := plan{
		fa: eps(ep(b10, 5353)),
		fb: eps(ep(b11, 5353)),
		fc: eps(ep(b10, 5353)),
		fd: eps(ep(b10s, 5353)),
		fe: eps(ep(b10, 5353)),
	}
	if _, err := apply(s.dp, p); err != nil {
		t.Fatal(err)
	}
	// Seven connected sockets: to A, B, C, D and E's cluster IPs, one straight to b10 (not
	// balanced by the programs), and a dual-stack one to A's IPv4-mapped address.
	cl, first := s.hold(t, "198.18.200.1:53", "198.18.200.2:53", "198.18.200.3:53", "198.18.1.10:5353",
		"[2001:db8:200::1]:53", "198.18.200.5:53", "mapped=198.18.200.1:53")
	for i, want := range []string{"b10", "b11", "b10", "b10", "b10", "b10", "b10"} {
		if first[i].Err != "" || !slices.Equal(first[i].Answers, []string{want}) {
			t.Fatalf("socket %d before: %+v, want %s", i, first[i], want)
		}
	}
	netns := filepath.Join("/run/netns", s.ns.Name)

	// A directory of pinned namespaces, as the container runtime keeps them: the site's under
	// two names, and one whose namespace is gone.
	dir := t.TempDir()
	pod := filepath.Join(dir, "pod-a")
	for name, target := range map[string]string{"pod-a": netns, "pod-b": netns, "pod-gone": netns + "-gone"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing changed: nothing is closed.
	if got, err := s.dp.CloseLostUDP(dir); err != nil || len(got) != 0 {
		t.Fatalf("CloseLostUDP with every endpoint serving: %+v, %v", got, err)
	}

	// A's and D's endpoints move from b10 to b11, B is unchanged, C is deleted, E has no
	// endpoint left.
	p[fa] = eps(ep(b11, 5353))
	p[fd] = eps(ep(b11s, 5353))
	p[fe] = eps()
	delete(p, fc)
	if _, err := apply(s.dp, p); err != nil {
		t.Fatal(err)
	}
	// The agent's own namespace, then the site's (twice: visited once), then the gone one
	// (skipped).
	got, err := s.dp.CloseLostUDP(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []datapath.ClosedSocket{
		{Netns: pod, Endpoint: ep(b10, 5353), Frontend: netip.MustParseAddrPort("198.18.200.1:53")},
		{Netns: pod, Endpoint: ep(b10, 5353), Frontend: netip.MustParseAddrPort("198.18.200.1:53")},
		{Netns: pod, Endpoint: ep(b10, 5353), Frontend: netip.MustParseAddrPort("198.18.200.3:53")},
		{Netns: pod, Endpoint: ep(b10, 5353), Frontend: netip.MustParseAddrPort("198.18.200.5:53")},
		{Netns: pod, Endpoint: ep(b10s, 5353), Frontend: netip.MustParseAddrPort("[2001:db8:200::1]:53")},
	}
	slices.SortFunc(got, func(a, b datapath.ClosedSocket) int { return a.Frontend.Compare(b.Frontend) })
	if !slices.EqualFunc(got, want, func(a, b datapath.ClosedSocket) bool { return a == b }) {
		t.Errorf("CloseLostUDP closed %+v, want %+v", got, want)
	}

	after := cl.again(t)
	for i, r := range after {
		switch i {
		case 0, 2, 4, 5, 6: // destroyed, and so no longer connected: the application learns it
			if r.Err != "EDESTADDRREQ" || r.RecvErr != "ECONNABORTED" {
				t.Errorf("socket %d (%s) after its endpoint left: %+v, want send EDESTADDRREQ, receive ECONNABORTED", i, first[i].Action, r)
			}
		case 1:
			if r.Err != "" || !slices.Equal(r.Answers, []string{"b11"}) {
				t.Errorf("socket to B (unchanged) after: %+v, want b11 still", r)
			}
		case 3:
			if r.Err != "" || !slices.Equal(r.Answers, []string{"b10"}) {
				t.Errorf("socket straight to b10 after: %+v, want it untouched", r)
			}
		}
	}
	if r := s.client(t, false, "udpconn=198.18.200.1:53*5"); r[0].Err != "" || !allEqual(r[0].Answers, "b11") {
		t.Errorf("a new socket to A: %+v, want b11", r[0])
	}
	// Once destroyed, a socket is not found again.
	if got, err := s.dp.reapUDP([]string{netns}); err != nil || len(got) != 0 {
		t.Errorf("second walk: %+v, %v, want nothing", got, err)
	}
}

// TestCloseLostUDPUnsupported: without the UDP socket iterator CloseLostUDP closes nothing and
// says so with datapath.ErrUnsupported, whatever kept the iterator from loading.
func TestCloseLostUDPUnsupported(t *testing.T) {
	for _, reapErr := range []error{
		fmt.Errorf("socklb: load the UDP socket iterator: %w: %w", ErrReapUnsupported, ebpf.ErrNotSupported),
		fmt.Errorf("socklb: load the UDP socket iterator: %w", syscall.EPERM),
	} {
		d := &Datapath{reapErr: reapErr}
		got, err := d.CloseLostUDP(t.TempDir())
		if len(got) != 0 || !errors.Is(err, datapath.ErrUnsupported) || !errors.Is(err, reapErr) {
			t.Errorf("CloseLostUDP without the iterator (%v): %v, %v; want nothing closed, an error wrapping datapath.ErrUnsupported and why", reapErr, got, err)
		}
	}
	if !errors.Is(ErrReapUnsupported, datapath.ErrUnsupported) {
		t.Error("ErrReapUnsupported does not wrap datapath.ErrUnsupported")
	}
}

func TestNamespaces(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"cni-b", "cni-a"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Namespaces(dir)
	want := []string{"/proc/self/ns/net", filepath.Join(dir, "cni-a"), filepath.Join(dir, "cni-b")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Namespaces(%s) = %v, %v, want %v", dir, got, err, want)
	}
	if got, err := Namespaces(filepath.Join(dir, "missing")); err != nil || len(got) != 1 {
		t.Errorf("Namespaces of a missing dir = %v, %v, want the caller's only", got, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package netlab builds throwaway network namespaces for tests: named namespaces with veth
// links, addresses, routes and neighbours, all removed when the test ends, even when it fails.
// Only lab addresses (198.18.0.0/15, 2001:db8::/32) belong in them.
package netlab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// NS is a named network namespace (as `ip netns add` makes it).
type NS struct {
	// Name is the namespace's name under /run/netns.
	Name string
}

// Prefix returns a short random prefix for namespace and link names, unique per test, so tests
// running at once never collide. Namespace names stay within 15 characters with a suffix of 4.
func Prefix() string {
	return TaggedPrefix("xt")
}

// TaggedPrefix is Prefix with another two-letter tag in place of "xt", for callers that must
// recognise their own leftovers by name (the lab uses "xl").
func TaggedPrefix(tag string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return tag + hex.EncodeToString(b)
}

// New creates namespace name with loopback up and removes it when t ends.
func New(t testing.TB, name string) *NS {
	t.Helper()
	RequireRoot(t, "it creates network namespaces")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	ns := &NS{Name: name}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ns.MustIP(t, "link set lo up")
	return ns
}

// IP runs `ip -n NS <args>` (args split on spaces).
func (n *NS) IP(args string) error {
	full := append([]string{"-n", n.Name}, strings.Fields(args)...)
	if out, err := exec.Command("ip", full...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(full, " "), err, out)
	}
	return nil
}

// MustIP is IP that fails the test on error.
func (n *NS) MustIP(t testing.TB, args string) {
	t.Helper()
	if err := n.IP(args); err != nil {
		t.Fatal(err)
	}
}

// Sysctl sets a sysctl inside the namespace (key in dotted form).
func (n *NS) Sysctl(t testing.TB, key, value string) {
	t.Helper()
	err := n.Do(func() error {
		path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
		return writeFile(path, value)
	})
	if err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", key, value, n.Name, err)
	}
}

// Forwarding turns on IPv4 and IPv6 forwarding in the namespace.
func (n *NS) Forwarding(t testing.TB) {
	t.Helper()
	n.Sysctl(t, "net.ipv4.conf.all.forwarding", "1")
	n.Sysctl(t, "net.ipv6.conf.all.forwarding", "1")
}

// Do runs fn on an OS thread that has entered the namespace, then restores the thread. Sockets
// created inside fn stay in the namespace after it returns.
func (n *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(n.Name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", n.Name, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: never give it back to the runtime.
		runtime.Goexit()
	}
	return ferr
}

// Veth creates a veth pair: end a (named an) in namespace n with MAC amac, end b (named bn) in
// namespace m with MAC bmac; both are brought up.
func Veth(t testing.TB, n *NS, an, amac string, m *NS, bn, bmac string) {
	t.Helper()
	n.MustIP(t, fmt.Sprintf("link add %s address %s type veth peer name %s address %s netns %s",
		an, amac, bn, bmac, m.Name))
	n.MustIP(t, "link set "+an+" up")
	m.MustIP(t, "link set "+bn+" up")
}

// Cmd returns a command that runs argv inside the namespace (with `ip netns exec`).
func (n *NS) Cmd(argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

// RequireRoot stops a test that needs root (BPF, network namespaces, bpffs) when it runs as
// another user: it fails when the CI variable is set (CI runs every test as root, so a test
// that cannot run there is broken) and is skipped otherwise, saying why. `make test` runs as
// root; `go test ./lb/...` passes as any user, skipping only these.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("needs root: %s (CI runs the tests as root)", why)
	}
	t.Skipf("needs root: %s", why)
}

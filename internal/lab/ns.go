// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Error-returning namespace helpers (netlab's take a testing.TB; the lab also runs outside tests).

// addNS creates namespace name with loopback up and the lab's sysctls: no DAD (a tentative
// address delays the first packets by a second), no reverse-path filter (replies may come back
// through another gateway than the one their request took), and forwarding when asked.
func (s *Site) addNS(name string, forward bool) (*netlab.NS, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	ns := &netlab.NS{Name: name}
	s.onClose(func() error {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns del %s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	sys := map[string]string{
		"net.ipv6.conf.all.accept_dad":     "0",
		"net.ipv6.conf.default.accept_dad": "0",
		"net.ipv4.conf.all.rp_filter":      "0",
		"net.ipv4.conf.default.rp_filter":  "0",
	}
	if forward {
		sys["net.ipv4.conf.all.forwarding"] = "1"
		sys["net.ipv6.conf.all.forwarding"] = "1"
		// L4 hashing for ECMP: the router's multipath route to the gateways, the nodes' default
		// route over the gateways.
		sys["net.ipv4.fib_multipath_hash_policy"] = "1"
		sys["net.ipv6.fib_multipath_hash_policy"] = "1"
	}
	if err := sysctls(ns, sys); err != nil {
		return nil, err
	}
	return ns, ipc(ns, "link set lo up")
}

// sysctls writes sysctls (dotted keys) inside ns.
func sysctls(ns *netlab.NS, kv map[string]string) error {
	return ns.Do(func() error {
		for k, v := range kv {
			path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", k, v, ns.Name, err)
			}
		}
		return nil
	})
}

// ipc runs `ip -n NS` once per command.
func ipc(ns *netlab.NS, cmds ...string) error {
	for _, c := range cmds {
		if err := ns.IP(c); err != nil {
			return err
		}
	}
	return nil
}

// veth links end an in namespace a to end bn in namespace b, both up.
func veth(a *netlab.NS, an string, b *netlab.NS, bn string) error {
	if err := a.IP(fmt.Sprintf("link add %s type veth peer name %s netns %s", an, bn, b.Name)); err != nil {
		return err
	}
	if err := a.IP("link set dev " + an + " up"); err != nil {
		return err
	}
	return b.IP("link set dev " + bn + " up")
}

// txOff turns TX checksum offload off on ifname in ns (see netlab.NS.TxChecksumOff).
func txOff(ns *netlab.NS, ifname string) error { return ns.TxChecksumOff(ifname) }

// attachPass attaches the site's XDP_PASS program to ifname in ns: frames a gateway sends with
// XDP_TX or XDP_REDIRECT into a veth vanish unless the veth's peer runs an XDP program.
func (s *Site) attachPass(ns *netlab.NS, ifname string) error {
	if s.pass == nil {
		p, err := netlab.PassProgram()
		if err != nil {
			return err
		}
		s.pass = p
		s.onClose(func() error { return p.Close() })
	}
	lk, err := ns.AttachPass(s.pass, ifname)
	if err != nil {
		return err
	}
	s.onClose(func() error { return lk.Close() })
	return nil
}

// SPDX-License-Identifier: Apache-2.0
package netlab

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Create creates namespace name with loopback up, for callers that are not tests (commands
// that build and remove their own topology). The caller removes it with Delete.
func Create(name string) (*NS, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	ns := &NS{Name: name}
	if err := ns.IP("link set lo up"); err != nil {
		return nil, errors.Join(err, ns.Delete())
	}
	return ns, nil
}

// Delete removes the namespace (and with it its interfaces and the veths paired with them).
func (n *NS) Delete() error {
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SetSysctl sets a sysctl inside the namespace (key in dotted form); Sysctl without a test.
func (n *NS) SetSysctl(key, value string) error {
	err := n.Do(func() error {
		return writeFile("/proc/sys/"+strings.ReplaceAll(key, ".", "/"), value)
	})
	if err != nil {
		return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, n.Name, err)
	}
	return nil
}

// AddVeth creates a veth pair, end an with MAC amac in n and end bn with MAC bmac in m, both
// up; Veth without a test.
func AddVeth(n *NS, an, amac string, m *NS, bn, bmac string) error {
	if err := n.IP(fmt.Sprintf("link add %s address %s type veth peer name %s address %s netns %s",
		an, amac, bn, bmac, m.Name)); err != nil {
		return err
	}
	return errors.Join(n.IP("link set "+an+" up"), m.IP("link set "+bn+" up"))
}

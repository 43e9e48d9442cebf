// SPDX-License-Identifier: Apache-2.0
package netlab

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// TxChecksumOff turns transmit checksum offload off on ifname in n. Sockets behind a veth with
// offload on send packets whose L4 checksum is only the pseudo-header seed (CHECKSUM_PARTIAL);
// once an XDP_REDIRECT turns them into plain frames the receiver finds the checksum wrong and
// drops them. NICs deliver complete checksums: this is a lab's problem only.
func (n *NS) TxChecksumOff(ifname string) error {
	if out, err := n.Cmd("ethtool", "-K", ifname, "tx", "off").CombinedOutput(); err != nil {
		return fmt.Errorf("ethtool -K %s tx off in %s: %v: %s", ifname, n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// PassProgram loads an XDP program that passes every frame.
func PassProgram() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "netlab_pass",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}, // XDP_PASS
	})
	if err != nil {
		return nil, fmt.Errorf("load the XDP_PASS program: %w", err)
	}
	return p, nil
}

// AttachPass attaches prog (see PassProgram) to ifname in n, in native mode. Frames sent with
// XDP_TX or XDP_REDIRECT into a veth vanish unless the veth's peer runs an XDP program. Close
// the returned link to detach it.
func (n *NS) AttachPass(prog *ebpf.Program, ifname string) (link.Link, error) {
	var lk link.Link
	err := n.Do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach XDP_PASS to %s in %s: %w", ifname, n.Name, err)
	}
	return lk, nil
}

// End is one end of a veth: the namespace it is in and its name there.
type End struct {
	NS     *NS
	Ifname string
}

// PrepareEnds gives the veth ends that local sockets send from, and that XDP redirects into, what
// a lab needs (TxChecksumOff, AttachPass). The programs are detached when t ends.
func PrepareEnds(t testing.TB, ends ...End) {
	t.Helper()
	prog, err := PassProgram()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	for _, e := range ends {
		if err := e.NS.TxChecksumOff(e.Ifname); err != nil {
			t.Fatal(err)
		}
		lk, err := e.NS.AttachPass(prog, e.Ifname)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lk.Close() })
	}
}

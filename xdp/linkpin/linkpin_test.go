// SPDX-License-Identifier: Apache-2.0
package linkpin

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestRemoveDetachesAtOnce: right after Remove returns, the interface runs the program no more
// and the pin is gone; a missing pin is no error. (Unlinking the pin alone leaves the program
// attached until a kernel workqueue releases the link: without the explicit detach this test
// sees it still attached.) A TCX link, as the DSR node side pins; XDP and cgroup links detach
// the same way.
func TestRemoveDetachesAtOnce(t *testing.T) {
	a := netlab.New(t, netlab.Prefix()+"lpa")
	b := netlab.New(t, netlab.Prefix()+"lpb")
	netlab.Veth(t, a, "x0", "02:00:00:00:00:01", b, "x1", "02:00:00:00:00:02")
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "linkpin_ok", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}, // TC_ACT_OK
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	dir, err := os.MkdirTemp("/sys/fs/bpf", "xlb-test-linkpin-")
	if err != nil {
		t.Fatalf("bpffs (mount -t bpf bpf /sys/fs/bpf): %v", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "link")

	err = a.Do(func() error {
		iface, err := net.InterfaceByName("x0")
		if err != nil {
			return err
		}
		attached := func() int {
			r, err := link.QueryPrograms(link.QueryOptions{Target: iface.Index, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				t.Fatalf("query x0's programs: %v", err)
			}
			return len(r.Programs)
		}
		for i := range 50 {
			l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: prog, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				return err
			}
			if err := l.Pin(path); err != nil {
				return err
			}
			_ = l.Close() // the pin holds it
			if n := attached(); n != 1 {
				t.Fatalf("round %d: %d programs attached, want the pinned one", i, n)
			}
			if err := Remove(path); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			if n := attached(); n != 0 {
				t.Fatalf("round %d: x0 still runs %d programs after Remove returned", i, n)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("round %d: the pin is still there (%v)", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("removing a missing pin: %v", err)
	}
}

// SPDX-License-Identifier: Apache-2.0
package xsk

import (
	"bytes"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// redirectAll loads an XDP program that hands every frame to the socket of its receive queue in
// xsks.
func redirectAll(t *testing.T) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { xsks.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // ctx->rx_queue_index
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, 2), // XDP_PASS when the queue has no socket
		asm.FnRedirectMap.Call(),
		asm.Return(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog, xsks
}

// TestEcho: a UDP datagram from namespace a to b's address is received by a socket on b's queue
// 0, sent back with addresses and ports swapped (the checksums stay valid), and a's socket gets
// the answer. Then the socket is closed and a new one binds the same queue: Close released it.
func TestEcho(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the AF_XDP socket test needs root (netns, XDP); run it with `make test` as root")
	}
	p := netlab.Prefix()
	a, b := netlab.New(t, p+"a"), netlab.New(t, p+"b")
	netlab.Veth(t, a, "va", "02:00:00:00:0a:01", b, "vb", "02:00:00:00:0b:01")
	a.MustIP(t, "addr add 198.18.0.1/24 dev va")
	b.MustIP(t, "addr add 198.18.0.2/24 dev vb")
	a.MustIP(t, "neigh replace 198.18.0.2 lladdr 02:00:00:00:0b:01 dev va nud permanent")
	netlab.PrepareEnds(t, netlab.End{NS: a, Ifname: "va"})
	prog, xsks := redirectAll(t)

	var s *Socket
	err := b.Do(func() error {
		iface, err := net.InterfaceByName("vb")
		if err != nil {
			return err
		}
		for range 2 {
			if s != nil {
				if err := s.Close(); err != nil {
					return err
				}
				if err := s.Close(); err != nil {
					return err // a second Close does nothing
				}
			}
			if s, err = Open(iface.Index, 0, Options{Frames: 64}); err != nil {
				return err
			}
		}
		lk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		t.Cleanup(func() { lk.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := xsks.Put(uint32(0), uint32(s.FD())); err != nil {
		t.Fatal(err)
	}
	fill := make([]uint64, 32)
	for i := range fill {
		fill[i] = uint64(i * s.FrameSize())
	}
	if n := s.Fill(fill); n != 32 {
		t.Fatalf("the fill ring took %d of 32 frames", n)
	}

	var c net.PacketConn
	if err := a.Do(func() (err error) {
		c, err = net.ListenPacket("udp4", "198.18.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteTo([]byte("ping"), &net.UDPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 9}); err != nil {
		t.Fatal(err)
	}

	// Receive it (bounded: 2 s of 1-ms polls).
	rx := make([]unix.XDPDesc, 8)
	var n int
	for deadline := time.Now().Add(2 * time.Second); n == 0 && time.Now().Before(deadline); {
		pfd := []unix.PollFd{{Fd: int32(s.FD()), Events: unix.POLLIN}}
		_, _ = unix.Poll(pfd, 1)
		n = s.Receive(rx)
	}
	if n != 1 {
		t.Fatalf("received %d frames, want the datagram", n)
	}
	f := s.Frame(rx[0].Addr, rx[0].Len)
	if len(f) < 14+20+8+4 || !bytes.Equal(f[len(f)-4:], []byte("ping")) {
		t.Fatalf("received frame %x, want the datagram with payload ping", f)
	}

	// Echo it from a TX frame of the second half.
	out := s.Frame(uint64(40*s.FrameSize()), uint32(len(f)))
	copy(out, f)
	swap := func(i, j, n int) {
		tmp := append([]byte(nil), out[i:i+n]...)
		copy(out[i:], out[j:j+n])
		copy(out[j:], tmp)
	}
	swap(0, 6, 6)         // MACs
	swap(14+12, 14+16, 4) // IPv4 addresses
	swap(34, 36, 2)       // UDP ports
	if got := s.Transmit([]unix.XDPDesc{{Addr: uint64(40 * s.FrameSize()), Len: uint32(len(f))}}); got != 1 {
		t.Fatalf("the TX ring took %d of 1 descriptors", got)
	}
	if err := s.Kick(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	m, from, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no echo: %v", err)
	}
	if string(buf[:m]) != "ping" || from.String() != "198.18.0.2:9" {
		t.Errorf("echo %q from %s, want ping from 198.18.0.2:9", buf[:m], from)
	}
	done := make([]uint64, 4)
	var k int
	for deadline := time.Now().Add(2 * time.Second); k == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		k = s.Complete(done)
	}
	if k != 1 || done[0] != uint64(40*s.FrameSize()) {
		t.Errorf("completed %v, want the TX frame's address", done[:k])
	}
	if st, err := s.Stats(); err != nil || st.Rx_dropped != 0 || st.Tx_invalid_descs != 0 {
		t.Errorf("socket statistics %+v, %v: want no drops", st, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package progrun runs a BPF program once with BPF_PROG_TEST_RUN and returns what the kernel
// reports, including the run's duration, which cilium/ebpf's Program.Run does not expose.
package progrun

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// XDPMd is struct xdp_md, the XDP context passed to a test run.
type XDPMd struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

// attr is the BPF_PROG_TEST_RUN part of union bpf_attr.
type attr struct {
	progFD      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      uint64
	dataOut     uint64
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       uint64
	ctxOut      uint64
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

const bpfProgTestRun = 10

// Result is one test run's outcome.
type Result struct {
	// Verdict is the program's return value (XDP_PASS, XDP_TX...).
	Verdict uint32
	// Data is the packet as the program left it.
	Data []byte
	// Duration is the kernel-measured run time (per repetition).
	Duration time.Duration
}

// XDP runs prog on a copy of pkt arriving on interface ifindex (0: the namespace's loopback),
// repeat times (0 means 1). The calling thread's network namespace is the one the program sees.
func XDP(prog *ebpf.Program, pkt []byte, ifindex int, repeat uint32) (Result, error) {
	out := make([]byte, len(pkt)+256)
	var ctxIn []byte
	if ifindex > 0 {
		md := XDPMd{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(ifindex)}
		var err error
		ctxIn, err = binary.Append(nil, binary.NativeEndian, md)
		if err != nil {
			return Result{}, err
		}
	}
	a := attr{
		progFD:      uint32(prog.FD()),
		dataSizeIn:  uint32(len(pkt)),
		dataSizeOut: uint32(len(out)),
		dataIn:      uint64(uintptr(unsafe.Pointer(&pkt[0]))),
		dataOut:     uint64(uintptr(unsafe.Pointer(&out[0]))),
		repeat:      repeat,
	}
	if len(ctxIn) > 0 {
		a.ctxSizeIn = uint32(len(ctxIn))
		a.ctxIn = uint64(uintptr(unsafe.Pointer(&ctxIn[0])))
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a))
	// Keep the buffers alive across the syscall.
	_ = pkt[0]
	_ = out[0]
	if len(ctxIn) > 0 {
		_ = ctxIn[0]
	}
	if errno != 0 {
		return Result{}, fmt.Errorf("BPF_PROG_TEST_RUN of %d bytes: %w", len(pkt), errno)
	}
	return Result{Verdict: a.retval, Data: out[:a.dataSizeOut], Duration: time.Duration(a.duration)}, nil
}

// SKB runs prog, a TC (SCHED_CLS) program, on a copy of pkt (an Ethernet frame), repeat times
// (0 means 1), with the kernel's default skb context, and returns its return value (TC_ACT_*),
// the packet as the program left it (resized if the program resized it) and the run's
// duration.
func SKB(prog *ebpf.Program, pkt []byte, repeat uint32) (Result, error) {
	out := make([]byte, len(pkt)+256)
	a := attr{
		progFD:      uint32(prog.FD()),
		dataSizeIn:  uint32(len(pkt)),
		dataSizeOut: uint32(len(out)),
		dataIn:      uint64(uintptr(unsafe.Pointer(&pkt[0]))),
		dataOut:     uint64(uintptr(unsafe.Pointer(&out[0]))),
		repeat:      repeat,
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a))
	_ = pkt[0]
	_ = out[0]
	if errno != 0 {
		return Result{}, fmt.Errorf("BPF_PROG_TEST_RUN of %d bytes: %w", len(pkt), errno)
	}
	return Result{Verdict: a.retval, Data: out[:a.dataSizeOut], Duration: time.Duration(a.duration)}, nil
}

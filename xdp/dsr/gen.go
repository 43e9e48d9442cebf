// SPDX-License-Identifier: Apache-2.0
package dsr

// The BPF object is compiled by bpf2go and committed (dsr_bpfel.go, dsr_bpfel.o); `make
// generate` rebuilds it and `make check-generated` fails when the committed copy is stale.
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type dsr_svc_key -type flow_key -type flow_value -type frag_key -type frag_value -type node_addr_key -type dsr_stat dsr bpf/dsr.c -- -I/usr/include/x86_64-linux-gnu -I../datapath -O2 -g -Wall -Werror

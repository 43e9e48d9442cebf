// SPDX-License-Identifier: Apache-2.0
package afxdp

// The BPF object is compiled by bpf2go and committed (steer_bpfel.go, steer_bpfel.o); `make
// generate` rebuilds it and `make test` fails when the committed copy is stale.
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type steer_key steer bpf/steer.c -- -I/usr/include/x86_64-linux-gnu -I../datapath -O2 -g -Wall -Werror

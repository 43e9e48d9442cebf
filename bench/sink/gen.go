// SPDX-License-Identifier: Apache-2.0
package sink

// The BPF object is compiled by bpf2go and committed (sink_bpfel.go, sink_bpfel.o); `make
// generate` rebuilds it and `make test` fails when the committed copy is stale.
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type sink_cfg -type sink_count sink ../bpf/sink.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror

// SPDX-License-Identifier: Apache-2.0
package redirect

// The BPF object is compiled by bpf2go and committed (redirect_bpfel.go, redirect_bpfel.o);
// `make generate` rebuilds it and `make test` fails when the committed copy is stale.
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type macs redirect ../bpf/redirect.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror

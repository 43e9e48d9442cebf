// SPDX-License-Identifier: Apache-2.0
package socklb

// The BPF object is compiled by bpf2go and committed (socklb_bpfel.go, socklb_bpfel.o); `make
// generate` rebuilds it and `make test` fails when the committed copy is stale.
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type svc_key -type svc_value -type slot_key -type slot_value -type endpoint -type member_key -type revnat_key -type affinity_key socklb bpf/socklb.c -- -I/usr/include/x86_64-linux-gnu -I../datapath -O2 -g -Wall -Werror
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type reap_record reap bpf/reap.c -- -I/usr/include/x86_64-linux-gnu -I../datapath -O2 -g -Wall -Werror

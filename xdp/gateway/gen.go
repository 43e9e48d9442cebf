// SPDX-License-Identifier: Apache-2.0
package gateway

// The BPF object is compiled by bpf2go and committed (xlb_bpfel.go, xlb_bpfel.o); `make generate`
// rebuilds it and `make test` fails when the committed copy is stale.
//go:generate go tool bpf2go -cc clang-16 -strip llvm-strip-16 -target bpfel -type svc_key -type vip_ref -type vip_info -type clock_value -type backend -type rev_value -type flow_key -type ct_entry -type traffic -type src_range_key -type site_key -type reason xlb bpf/xlb.c -- -I/usr/include/x86_64-linux-gnu -I../datapath -O2 -g -Wall -Werror

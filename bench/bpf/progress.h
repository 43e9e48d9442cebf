/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* progress.h: the closed loop's acknowledgement map, shared by the generator and the sink (Go
 * creates it with the generator and hands it to the sink). See consts.h for the protocol. */
#ifndef BENCH_PROGRESS_H
#define BENCH_PROGRESS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"

/* progress: index 0 -> the sink's acknowledgements (struct gen_progress). Advanced by the sink,
 * read by the generator, zeroed by Go before each closed-loop run. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_progress);
	__uint(max_entries, 1);
} progress SEC(".maps");

#endif

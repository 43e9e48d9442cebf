// SPDX-License-Identifier: Apache-2.0

// Package maglev builds Maglev lookup tables (Eisenbud et al., "Maglev: A Fast and Reliable
// Software Network Load Balancer", NSDI 2016) for the XDP datapath.
//
// A table has M slots, M a prime. Every backend with a weight above zero walks its own
// permutation of the slots, (offset + j·skip) mod M for j = 0, 1, 2, …, and the population loop
// gives the backends turns: on its turn a backend takes the next slot of its permutation that is
// still empty. The loop stops when every slot is owned. The datapath then sends a new flow to
// table[hash % M].
//
// [Build] returns, per slot, the index of its owner in the caller's backends (-1 when no backend
// has a weight above zero); the caller maps indices to datapath backend ids for
// xdp.Datapath.SetMaglevTable, an empty slot to id 0. A [Builder] does the same and keeps its
// memory between builds. Every build runs the population loop in full: a table depends on the
// whole backend set, so there is nothing to patch when one backend changes; the loop is the
// cost (about 1.6 ms for M = 65537 and 1000 backends on a 2-core EPYC VM).
//
// # Table size
//
// [SizeFor] is the rule for choosing M: the smallest size in [Sizes] that is at least 100 times
// the number of backends (the paper's advice, which keeps each backend's share within about 1% of
// its ideal), capped at [MaxSize]. [DefaultSize], 65537, is the size of the paper and of Katran:
// it satisfies the rule up to 655 backends. [Build] accepts any prime from 2 to [MaxSize]; the
// list only fixes what [SizeFor] returns.
//
// Changing M moves almost every slot to another backend, so flows without a conntrack entry
// (a SYN, or any packet reaching a gateway that has not seen the flow) are re-balanced. Callers
// should keep a VIP's M stable: grow it when SizeFor asks for more, and do not shrink it when
// backends go away.
//
// # Weights
//
// A backend's share of the slots is proportional to its [Backend.Weight]. Weight 0 means
// draining: the backend gets no slot, so no new flow reaches it, while the caller keeps it
// configured in the datapath so that established flows stay. Turns are weighted by credit
// (integer arithmetic, no floating point): every backend starts with a credit of 1/2; in each
// round every backend, in turn order, adds weight/maxWeight to its credit and, when the credit
// reaches 1, spends 1 on a turn. With equal weights this is the paper's round-robin, and every
// backend ends with ⌊M/N⌋ or ⌈M/N⌉ slots. With unequal weights every share is within
// 1.5·(1 + N·weight/Σweights) slots of M·weight/Σweights: about one slot when the weights are of
// a size, more for a backend that outweighs many small ones (it absorbs their rounding). In the
// tests at M = 65537, every share of 100 slots or more is within 0.25% of its weight. A backend
// whose share is below about half a slot may get no slot at all.
//
// # Determinism
//
// A table depends only on the set of (name, weight) pairs, M and the seed: not on the order of
// the input, the host, the architecture or the Go version. Backends take turns in byte order of
// their names. A backend's permutation comes from h, the 64-bit FNV-1a hash of the seed's four
// bytes, least significant first, followed by the name's bytes:
//
//	offset = fmix64(h) mod M
//	skip   = fmix64(h XOR 0x9e3779b97f4a7c15) mod (M−1) + 1
//
// where fmix64 is MurmurHash3's 64-bit finalizer. Every gateway given the same backends and
// seed builds the same table byte for byte, so an ECMP change between gateways does not move
// flows.
package maglev

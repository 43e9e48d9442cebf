// SPDX-License-Identifier: Apache-2.0
package maglev

// turn is one weighted backend's state in the population loop.
type turn struct {
	next   uint32 // the next slot of its permutation to try
	skip   uint32 // the step of its permutation, 1..m-1
	weight uint64 // its weight, > 0
	credit uint64 // rounds: credit not yet spent on a turn, in units of 1/maxWeight (< maxWeight)
	taken  uint64 // heap: turns taken so far
}

// take gives t its turn: it claims the next empty slot of its permutation for owner.
// At least one slot must be empty.
func (t *turn) take(slots []int32, owner int32) {
	m := uint32(len(slots))
	c, skip := t.next, t.skip // locals: the loop carries no store-to-load dependency
	for slots[c] >= 0 {
		c = step(c, skip, m)
	}
	slots[c] = owner
	t.next = step(c, skip, m)
}

// step returns (c + skip) mod m for c, skip < m. When c + skip < m, c + skip − m wraps around to
// a larger value, so the smaller of the two is the answer: a conditional move (measured 10%
// faster for the whole build than a branch, which mispredicts at random).
func step(c, skip, m uint32) uint32 {
	n := c + skip
	return min(n, n-m)
}

// roundsFactor bounds the cost of populateRounds: it is used while a turn costs at most this many
// credit steps on average (len(ts)·maxWeight ≤ roundsFactor·Σweight), populateHeap beyond.
// Measured at N = 1000, M = 65537: rounds take 1.4 ms at 2 steps per turn and 2.3 ms at 31, the
// heap 3.4 to 5.6 ms on the same inputs.
const roundsFactor = 32

// population is the scratch memory of one build, kept by a Builder between builds.
type population struct {
	slots []int32 // slot → index in turns of its owner, -1 while empty
	turns []turn  // the weighted backends, in turn order (names in byte order)
	queue []due   // populateHeap's queue
}

// fill fills every slot with the index in p.turns of its owner. The turns are weighted by
// credit, counted in units of 1/maxWeight: every backend starts with maxWeight/2 (so that shares
// round to the nearest slot rather than down); in each round, every backend in turn order adds
// its weight to its credit and, when the credit reaches maxWeight, spends maxWeight on one turn.
// Equal weights give the paper's round-robin. populateRounds and populateHeap compute the same
// sequence of turns; they differ only in cost.
func (p *population) fill() {
	slots, ts := p.slots, p.turns
	for i := range slots {
		slots[i] = -1
	}
	if len(ts) == 0 {
		return
	}
	var maxW, sumW uint64
	for i := range ts {
		maxW = max(maxW, ts[i].weight)
		sumW += ts[i].weight
	}
	if uint64(len(ts))*maxW <= roundsFactor*sumW {
		populateRounds(slots, ts, maxW)
	} else {
		p.queue = populateHeap(slots, ts, maxW, p.queue[:0])
	}
}

// populateRounds runs the credit rounds literally: len(ts)·maxW/Σweight steps per turn.
func populateRounds(slots []int32, ts []turn, maxW uint64) {
	for i := range ts {
		ts[i].credit = maxW / 2
	}
	left := len(slots)
	for {
		for i := range ts {
			t := &ts[i]
			t.credit += t.weight
			if t.credit < maxW {
				continue
			}
			t.credit -= maxW
			t.take(slots, int32(i))
			if left--; left == 0 {
				return
			}
		}
	}
}

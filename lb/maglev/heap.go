// SPDX-License-Identifier: Apache-2.0
package maglev

// due is a backend's place in populateHeap's queue: the round of its next turn.
type due struct {
	round uint64 // the round of the backend's next turn
	i     int32  // its index in ts: breaks ties, as the turn order does within a round
}

// before orders the queue by round, then turn order.
func (a due) before(b due) bool {
	return a.round < b.round || a.round == b.round && a.i < b.i
}

// turnRound is the round of a backend's k-th turn (k ≥ 1), rounds counted from 1: the first r
// with maxW/2 + r·weight ≥ k·maxW, that is ⌈(k·maxW − maxW/2)/weight⌉. k ≤ 2^20 + 1 and
// maxW < 2^32, so nothing overflows.
func turnRound(k, weight, maxW uint64) uint64 {
	return (k*maxW - maxW/2 + weight - 1) / weight
}

// populateHeap takes the turns from a binary min-heap keyed by the round of each backend's next
// turn: O(log n) per turn, whatever the weights. It returns h, the queue's memory, for reuse.
func populateHeap(slots []int32, ts []turn, maxW uint64, h []due) []due {
	for i := range ts {
		h = append(h, due{round: turnRound(1, ts[i].weight, maxW), i: int32(i)})
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for left := len(slots); left > 0; left-- {
		t := &ts[h[0].i]
		t.take(slots, h[0].i)
		t.taken++
		h[0].round = turnRound(t.taken+1, t.weight, maxW)
		siftDown(h, 0)
	}
	return h
}

// siftDown restores the heap order below h[i].
func siftDown(h []due, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

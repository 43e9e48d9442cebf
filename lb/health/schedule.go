// SPDX-License-Identifier: Apache-2.0
package health

import (
	"container/heap"
	"time"
)

// schedule is a heap of entries ordered by due time, the earliest first; each entry's index is
// its position in it. Use its methods, not container/heap's functions.
type schedule []*entry

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].due.Before(s[j].due) }
func (s schedule) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].index, s[j].index = i, j
}

// Push implements heap.Interface.
func (s *schedule) Push(x any) {
	e := x.(*entry)
	e.index = len(*s)
	*s = append(*s, e)
}

// Pop implements heap.Interface.
func (s *schedule) Pop() any {
	old := *s
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*s = old[:len(old)-1]
	e.index = -1
	return e
}

// push adds e, which must be out of the heap.
func (s *schedule) push(e *entry) { heap.Push(s, e) }

// remove takes e out of the heap if it is in it.
func (s *schedule) remove(e *entry) {
	if e.index >= 0 {
		heap.Remove(s, e.index)
	}
}

// fix restores the order after e's due time changed.
func (s *schedule) fix(e *entry) {
	if e.index >= 0 {
		heap.Fix(s, e.index)
	}
}

// popDue takes out and returns the earliest entry if it is due at now; otherwise it returns nil
// and how long until the earliest is due (an hour when the heap is empty: Set wakes the
// scheduler anyway).
func (s *schedule) popDue(now time.Time) (*entry, time.Duration) {
	if len(*s) == 0 {
		return nil, time.Hour
	}
	if wait := (*s)[0].due.Sub(now); wait > 0 {
		return nil, wait
	}
	return heap.Pop(s).(*entry), 0
}

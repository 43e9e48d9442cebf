// SPDX-License-Identifier: Apache-2.0
package netlab

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// RouteWatch polls a namespace's kernel route to one address every 10 ms in the background,
// counting the polls that found none: a route that must stay through some event (a graceful
// restart) is checked at every poll, not just before and after.
type RouteWatch struct {
	done chan struct{}
	res  chan [3]int // missing, polls, the longest run of missing polls
	once sync.Once
	last [3]int
}

// WatchRoute starts polling n's route to addr (`ip route show addr`) until Stop, or until the
// test ends.
func (n *NS) WatchRoute(t testing.TB, addr string) *RouteWatch {
	w := &RouteWatch{done: make(chan struct{}), res: make(chan [3]int, 1)}
	t.Cleanup(func() { w.Stop() })
	args := []string{"-n", n.Name}
	if strings.Contains(addr, ":") {
		args = append(args, "-6")
	}
	args = append(args, "route", "show", addr)
	go func() {
		var missing, polls, run, longest int
		for {
			out, err := exec.Command("ip", args...).Output()
			polls++
			if err != nil || strings.TrimSpace(string(out)) == "" {
				missing++
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
			select {
			case <-w.done:
				w.res <- [3]int{missing, polls, longest}
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return w
}

// Stop ends the polling and returns how many polls found no route, of how many. Later calls
// return the same.
func (w *RouteWatch) Stop() (missing, polls int) {
	w.once.Do(func() {
		close(w.done)
		w.last = <-w.res
	})
	return w.last[0], w.last[1]
}

// LongestGap stops the polling (as Stop) and returns the most polls in a row that found no
// route. A route replaced by a delete and an add a fraction of a millisecond apart (as BIRD does)
// misses at most one poll of 10 ms; a withdrawal misses many in a row.
func (w *RouteWatch) LongestGap() int {
	w.Stop()
	return w.last[2]
}

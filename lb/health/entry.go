// SPDX-License-Identifier: Apache-2.0
package health

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// entry is a Checker's record of one target: the target as last Set, what its probes found and
// its place in the schedule. One entry per key, in Checker.targets; every field is guarded by
// Checker.mu.
type entry struct {
	// target is the target as Set, its Check with defaults applied.
	target Target
	// dest is where probes go: target.Addr, or its IP with Check.Port.
	dest netip.AddrPort
	// state is the verdict and the probe statistics that Status returns.
	state State
	// reported is the Health last handed to OnChange (Unknown before the first).
	reported Health
	// queued is set while the key waits in Checker.notify.
	queued bool
	// due is when the next probe should start.
	due time.Time
	// index is the entry's position in Checker.queue, -1 while it is out of the heap (its
	// probe is running, or it was removed).
	index int
	// cancel cancels the running probe; nil while none runs.
	cancel context.CancelFunc
}

// newEntry returns the entry of a target that has not been probed, as of now. t must be valid
// and its Check have its defaults applied.
func newEntry(t Target, now time.Time, reason string) *entry {
	return &entry{
		target: t,
		dest:   t.dest(),
		state:  State{Health: Unknown, Reason: reason, Since: now},
		index:  -1,
	}
}

// record adds the result of a probe that started at start and finished at end (err nil for a
// success) to e's state and reports whether e's Health changed.
func (e *entry) record(start, end time.Time, err error) bool {
	s := &e.state
	s.Probes++
	s.LastProbe = start
	s.LastDuration = end.Sub(start)
	s.LastError = err
	next, reason := s.Health, ""
	if err == nil {
		s.Successes++
		s.Failures = 0
		switch {
		case s.Health == Unknown:
			next, reason = Healthy, "first probe succeeded"
		case s.Health == Unhealthy && s.Successes >= e.target.Check.Rise:
			next, reason = Healthy, fmt.Sprintf("%d consecutive probes succeeded", s.Successes)
		}
	} else {
		s.Failures++
		s.Successes = 0
		switch {
		case s.Health == Unknown:
			next, reason = Unhealthy, fmt.Sprintf("first probe failed: %v", err)
		case s.Health == Healthy && s.Failures >= e.target.Check.Fall:
			next, reason = Unhealthy, fmt.Sprintf("%d consecutive probes failed, the last: %v", s.Failures, err)
		}
	}
	if next == s.Health {
		return false
	}
	s.Health, s.Reason, s.Since = next, reason, end
	return true
}

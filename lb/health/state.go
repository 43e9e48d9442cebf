// SPDX-License-Identifier: Apache-2.0
package health

import (
	"fmt"
	"time"
)

// Health is a target's verdict.
type Health uint8

const (
	// Unknown is the Health of a target whose first probe has not finished: it was just added,
	// or its probe changed (see [Checker.Set]). It is not Healthy: such a backend should get no
	// new flows. It lasts at most one interval plus one timeout.
	Unknown Health = iota
	// Healthy targets may be given new flows.
	Healthy
	// Unhealthy targets failed [Check.Fall] consecutive probes (or their first one) and should
	// get no new flows; their established flows may drain.
	Unhealthy
)

// String returns "unknown", "healthy" or "unhealthy".
func (h Health) String() string {
	switch h {
	case Unknown:
		return "unknown"
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("Health(%d)", uint8(h))
}

// State is what a [Checker] knows about one target, for [Checker.Status] and metrics.
type State struct {
	// Health is the target's verdict.
	Health Health
	// Reason says why Health is what it is, e.g. "3 consecutive probes failed: ...".
	Reason string
	// Since is when Health last changed (or the target was added).
	Since time.Time
	// Successes counts the consecutive successful probes up to the last one (0 if it failed).
	Successes int
	// Failures counts the consecutive failed probes up to the last one (0 if it succeeded).
	Failures int
	// Probes counts the probes finished since the target was added or its probe changed.
	Probes uint64
	// LastProbe is when the last finished probe started; zero before the first.
	LastProbe time.Time
	// LastDuration is how long the last finished probe took.
	LastDuration time.Duration
	// LastError is why the last probe failed, nil if it succeeded. A probe that ran out of
	// time matches context.DeadlineExceeded with errors.Is.
	LastError error
}

// Healthy reports whether s.Health is Healthy.
func (s State) Healthy() bool { return s.Health == Healthy }

// Update tells [Options.OnChange] that a target's Health changed.
type Update struct {
	// Key is the target's [Target.Key].
	Key string
	// Health is the target's new verdict. It is Unknown only when the target's probe changed
	// (see [Checker.Set]) after it had a verdict.
	Health Health
	// Reason says why, as [State.Reason] does.
	Reason string
}

// Healthy reports whether u.Health is Healthy.
func (u Update) Healthy() bool { return u.Health == Healthy }

// SPDX-License-Identifier: Apache-2.0

// Package health is xlb's active backend health checker. It probes every backend it is given
// (TCP connect, HTTP or HTTPS GET, or a UDP request and reply), turns the results into a
// healthy/unhealthy verdict with rise and fall thresholds, and tells its caller, the reconciler,
// when a verdict changes so that a failing backend stops getting new flows (it drains) and gets
// them again once it recovers.
//
// A [Checker] holds the set of [Target]s, replaced as a whole and diffed by [Checker.Set], and
// probes them from [Checker.Run]: one scheduler goroutine keeps the targets in a heap ordered by
// their next probe time and hands due targets to a fixed pool of [Options.MaxConcurrent]
// workers, so thousands of targets cost no more goroutines than the pool. Probe times carry
// jitter and a new target's first probe falls at a random point of its first interval, so
// targets added together do not fire together.
//
// # Initial state
//
// A target starts [Unknown] and Unknown is not [Healthy]: a backend that was never probed gets no
// new flows. Its first probe alone decides, one success making it Healthy and one failure
// Unhealthy; [Check.Rise] and [Check.Fall] apply from then on. This is Envoy's rule ("during
// startup, only a single successful health check is required to mark a host healthy"): sending
// flows to a backend that was never seen answering risks black-holing them (a Pod whose port is
// not open yet, a wrong port), while asking a fresh backend for Rise successes, a guard against a
// known-bad backend flapping, would only delay it. The price is a wait of at most one interval
// plus one timeout before a new backend takes traffic. A caller that restarts while its
// datapath already forwards may keep the forwarding it has until the first verdicts arrive;
// [Health] makes the difference between "not probed yet" and "failing" visible.
//
// # Updates
//
// [Options.OnChange] is called with an [Update] whenever a target's Health changes, from one
// goroutine, so never concurrently with itself, and without any lock of the Checker held, so it
// may call [Checker.Status] or [Checker.Set]. Updates are level-triggered: a target that changes
// several times while the callback is busy elsewhere is reported once, with its latest Health,
// so a slow callback costs no memory beyond one queue entry per target and the caller always
// converges on the current verdicts.
package health

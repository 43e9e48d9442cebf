// SPDX-License-Identifier: Apache-2.0
package health

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestInitialState(t *testing.T) {
	c := New(Options{})
	addr := netip.MustParseAddrPort("127.0.0.1:1")
	mustSet(t, c, Target{Key: "k", Addr: addr})
	st, ok := c.Status("k")
	if !ok || st.Health != Unknown || st.Healthy() || st.Reason != "not probed yet" || st.Probes != 0 || st.Since.IsZero() {
		t.Fatalf("Status of a new target = %+v, %v", st, ok)
	}
	if _, ok := c.Status("other"); ok {
		t.Fatal(`Status("other") found a target never Set`)
	}
	if snap := c.Snapshot(); len(snap) != 1 || snap["k"].Health != Unknown {
		t.Fatalf("Snapshot = %+v", snap)
	}
}

// TestFirstProbesSpread checks that targets added together have their first probes spread over
// their first interval, and that later intervals stay within the jitter.
func TestFirstProbesSpread(t *testing.T) {
	c := New(Options{})
	const n = 1000
	interval := time.Second
	targets := make([]Target, n)
	for i := range targets {
		targets[i] = Target{Key: fmt.Sprint(i), Addr: netip.MustParseAddrPort("127.0.0.1:1"), Check: Check{Interval: interval}}
	}
	before := time.Now()
	mustSet(t, c, targets...)
	var buckets [10]int
	for _, e := range c.targets {
		off := e.due.Sub(before)
		if off < 0 || off > interval+time.Second {
			t.Fatalf("first probe %v after Set, expected within the %v interval", off, interval)
		}
		buckets[min(int(off*10/interval), 9)]++
	}
	for i, b := range buckets {
		if b < n/10/2 { // a uniform spread puts 100 in each tenth; 50 is far in the tail
			t.Errorf("tenth %d of the interval holds %d first probes of %d: %v", i, b, n, buckets)
		}
	}
	for range 1000 {
		if d := c.jittered(interval); d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("jittered(%v) = %v, expected within ±%v%%", interval, d, DefaultJitter*100)
		}
	}
}

func TestSetDiff(t *testing.T) {
	keep := newStatusServer(t, false)
	gone := listenTCP(t, "tcp4")
	// hold, while closed, keeps probes from starting, so that the test sees the states between
	// a Set and the next verdict; the first probe of a changed target may otherwise finish
	// before Set's caller looks, and its Unknown update be coalesced away (updates are
	// level-triggered).
	var holdMu sync.Mutex
	hold := make(chan struct{})
	close(hold)
	rec := newRecorder(t)
	c := New(Options{OnChange: rec.onChange, Logger: testLogger(t)})
	c.probeHook = func(start bool) {
		if start {
			holdMu.Lock()
			h := hold
			holdMu.Unlock()
			<-h
		}
	}
	runUntilCleanup(t, c)
	setHold := func(on bool) {
		holdMu.Lock()
		defer holdMu.Unlock()
		if on {
			hold = make(chan struct{})
		} else {
			close(hold)
		}
	}
	defer func() { // a failing test must not leave workers blocked past its cleanup
		holdMu.Lock()
		defer holdMu.Unlock()
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	keepT := Target{Key: "keep", Addr: keep.addr(), Check: fast(Check{Kind: HTTP, Path: "/a"})}
	goneT := Target{Key: "gone", Addr: gone.addr(), Check: fast(Check{})}
	mustSet(t, c, keepT, goneT)
	rec.expect("keep", 1, Healthy)
	rec.expect("gone", 1, Healthy)
	kept, _ := c.Status("keep")

	// Unchanged: same state, same schedule (no new first probe). Removed: stops.
	mustSet(t, c, keepT)
	if _, ok := c.Status("gone"); ok {
		t.Fatal(`Status("gone") after its removal: found`)
	}
	acceptedAtRemoval := gone.accepted.Load()
	gone.close() // a probe now would fail and, after Fall of them, report "gone" unhealthy
	time.Sleep(5 * fast(Check{}).Interval)
	if us := rec.of("gone"); len(us) != 1 {
		t.Errorf(`updates for "gone" after its removal: %+v`, us[1:])
	}
	if n := gone.accepted.Load() - acceptedAtRemoval; n > 1 { // one probe may have been running
		t.Errorf(`%d probes of "gone" after its removal`, n)
	}
	st, _ := c.Status("keep")
	if st.Health != Healthy || !st.Since.Equal(kept.Since) || st.Probes <= kept.Probes {
		t.Errorf(`"keep" after an unchanged Set: %+v, before it %+v`, st, kept)
	}

	// New timings and thresholds keep the state.
	retimed := keepT
	retimed.Check.Interval, retimed.Check.Timeout = 40*time.Millisecond, 40*time.Millisecond
	retimed.Check.Rise, retimed.Check.Fall = 5, 5
	mustSet(t, c, retimed)
	time.Sleep(5 * retimed.Check.Interval)
	st, _ = c.Status("keep")
	if st.Health != Healthy || !st.Since.Equal(kept.Since) {
		t.Errorf(`"keep" after new timings: %+v, before %+v`, st, kept)
	}
	if us := rec.of("keep"); len(us) != 1 {
		t.Errorf(`updates for "keep" after new timings: %+v`, us)
	}

	// A changed probe starts again: Unknown, told to OnChange, then a new verdict soon.
	changed := retimed
	changed.Check.Path = "/b"
	setHold(true)
	mustSet(t, c, changed)
	if st, _ := c.Status("keep"); st.Health != Unknown || st.Probes != 0 {
		t.Errorf(`"keep" right after its probe changed: %+v`, st)
	}
	if u := rec.expect("keep", 2, Unknown); u.Reason != "probe changed, not probed yet" {
		t.Errorf("reason %q", u.Reason)
	}
	setHold(false)
	rec.expect("keep", 3, Healthy)
	if r := keep.last.Load(); r.URL.Path != "/b" {
		t.Errorf("the changed probe asked for %q", r.URL.Path)
	}

	// Removing everything stops everything.
	mustSet(t, c)
	if snap := c.Snapshot(); len(snap) != 0 {
		t.Errorf("Snapshot after Set(nil): %+v", snap)
	}
}

// TestRemovedWhileQueued removes targets whose updates wait behind a slow OnChange: none of them
// may be delivered after Set returns.
func TestRemovedWhileQueued(t *testing.T) {
	const n = 20
	block := make(chan struct{})
	var (
		mu        sync.Mutex
		removed   bool
		delivered []string
		lateKeys  []string
	)
	c := New(Options{Logger: testLogger(t), OnChange: func(u Update) {
		<-block
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, u.Key)
		if removed {
			lateKeys = append(lateKeys, u.Key)
		}
	}})
	runUntilCleanup(t, c)
	closed := closedUDPPort(t, "udp4")
	targets := make([]Target, n)
	for i := range targets {
		targets[i] = Target{Key: fmt.Sprint(i), Addr: closed, Check: fast(Check{Kind: UDP, Payload: []byte("x")})}
	}
	mustSet(t, c, targets...)
	// Wait until every target has a verdict: one update is in OnChange, the others queued.
	deadline := time.Now().Add(waitLimit)
	for {
		done := 0
		for _, st := range c.Snapshot() {
			if st.Health == Unhealthy {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("targets did not all go unhealthy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustSet(t, c)
	mu.Lock()
	removed = true
	mu.Unlock()
	close(block)
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	// The one call that was already running when Set was called may finish after it.
	if len(lateKeys) > 1 {
		t.Errorf("%d updates delivered after their targets were removed: %v", len(lateKeys), lateKeys)
	}
}

// TestOnChangeSerialAndUnlocked checks that OnChange runs one call at a time, may call the
// Checker back, and misses no target.
func TestOnChangeSerialAndUnlocked(t *testing.T) {
	const n = 50
	var c *Checker
	rec := newRecorder(t)
	var calledBack atomic.Int32
	c = New(Options{Logger: testLogger(t), OnChange: func(u Update) {
		if _, ok := c.Status(u.Key); ok { // would deadlock if a lock were held
			calledBack.Add(1)
		}
		_ = c.Snapshot()
		time.Sleep(time.Millisecond) // slow enough for updates to pile up
		rec.onChange(u)
	}})
	runUntilCleanup(t, c)
	srv := listenTCP(t, "tcp4")
	closed := closedUDPPort(t, "udp4")
	var targets []Target
	for i := range n {
		targets = append(targets,
			// Only the first verdicts count here: a second of timeout, so that no connect
			// on a loaded machine turns an "up" target's first verdict into a timeout.
			Target{Key: fmt.Sprint("up-", i), Addr: srv.addr(), Check: Check{Interval: time.Second, Timeout: time.Second}},
			Target{Key: fmt.Sprint("down-", i), Addr: closed, Check: fast(Check{Kind: UDP, Payload: []byte("x")})})
	}
	mustSet(t, c, targets...)
	for i := range n {
		rec.expect(fmt.Sprint("up-", i), 1, Healthy)
		rec.expect(fmt.Sprint("down-", i), 1, Unhealthy)
	}
	if got := calledBack.Load(); got < 2*n {
		t.Errorf("OnChange could call Status back %d times, expected %d", got, 2*n)
	}
}

func TestRunTwice(t *testing.T) {
	c := New(Options{Logger: testLogger(t)})
	runUntilCleanup(t, c)
	// The first Run must have begun, or this call would be the first and never return.
	for deadline := time.Now().Add(waitLimit); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		started := c.started
		c.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Run has not started within %v", waitLimit)
		}
	}
	if err := c.Run(context.Background()); err == nil || err.Error() != "health checker: Run called twice" {
		t.Fatalf("second Run: %v", err)
	}
}

// TestManyTargetsBounded runs 2,000 targets on a few loopback listeners with 16 workers: no
// more than 16 probes may ever run at once, the goroutine count must not grow with the targets,
// and it must come back down once Run returns.
func TestManyTargetsBounded(t *testing.T) {
	const (
		targets   = 2000
		listeners = 4
		workers   = 16
	)
	var srvs []*tcpServer
	for range listeners {
		srvs = append(srvs, listenTCP(t, "tcp4"))
	}
	runtime.GC()
	base := runtime.NumGoroutine()

	var running, maxRunning atomic.Int64
	var mu sync.Mutex
	healthy := make(map[string]bool)
	allHealthy := make(chan struct{})
	c := New(Options{MaxConcurrent: workers, Logger: testLogger(t), OnChange: func(u Update) {
		mu.Lock()
		defer mu.Unlock()
		if u.Healthy() {
			healthy[u.Key] = true
			if len(healthy) == targets {
				close(allHealthy)
			}
		}
	}})
	c.probeHook = func(start bool) {
		if !start {
			running.Add(-1)
			return
		}
		n := running.Add(1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		// Hold the worker a little so that, with 2,000 first probes spread over one second,
		// the pool is saturated and the bound is reached.
		time.Sleep(10 * time.Millisecond)
	}
	ts := make([]Target, targets)
	for i := range ts {
		ts[i] = Target{Key: fmt.Sprint(i), Addr: srvs[i%listeners].addr(), Check: Check{Interval: time.Second, Timeout: 500 * time.Millisecond}}
	}
	mustSet(t, c, ts...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx) }()

	var maxG int
	sample := time.NewTicker(2 * time.Millisecond)
	defer sample.Stop()
	timeout := time.After(waitLimit)
wait:
	for {
		select {
		case <-allHealthy:
			break wait
		case <-sample.C:
			maxG = max(maxG, runtime.NumGoroutine())
		case <-timeout:
			mu.Lock()
			t.Fatalf("%d of %d targets healthy after %v", len(healthy), targets, waitLimit)
		}
	}
	cancel()
	select {
	case <-runDone:
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
	}

	t.Logf("%d goroutines before Run, at most %d while probing; at most %d probes at once", base, maxG, maxRunning.Load())
	if m := maxRunning.Load(); m != workers {
		t.Errorf("at most %d probes ran at once, expected the bound %d to be reached and kept", m, workers)
	}
	// The workers, the scheduler, the notifier and Run's own goroutine, and for each running
	// probe at most one of the runtime's (a dial's cancellation); not one per target.
	if limit := base + 2*workers + 8; maxG > limit {
		t.Errorf("%d goroutines while probing %d targets (%d before), expected at most %d", maxG, targets, base, limit)
	}
	var accepted int64
	for _, s := range srvs {
		accepted += s.accepted.Load()
	}
	if accepted < targets {
		t.Errorf("the listeners accepted %d probes for %d targets", accepted, targets)
	}
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > base+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Run returned, %d before it", runtime.NumGoroutine(), base)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

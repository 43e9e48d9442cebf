// SPDX-License-Identifier: Apache-2.0
package health

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Defaults of [Options]' zero fields.
const (
	// DefaultMaxConcurrent is the number of probes that run at once when
	// [Options.MaxConcurrent] is 0: enough to probe a few thousand targets every few seconds
	// even when some of them time out, few enough to stay a small load on the gateway.
	DefaultMaxConcurrent = 64
	// DefaultJitter is the jitter when [Options.Jitter] is 0: each interval is drawn from
	// ±10% of the target's [Check.Interval].
	DefaultJitter = 0.1
	// MaxJitter bounds [Options.Jitter]: an interval is never shorter than half its Check's.
	MaxJitter = 0.5
)

// Options configure a [Checker]. The zero value is ready to use.
type Options struct {
	// MaxConcurrent is the number of probes that may run at once, which is also the number of
	// worker goroutines Run starts; targets that come due while all workers are busy wait
	// their turn. 0 or less means [DefaultMaxConcurrent].
	MaxConcurrent int
	// Jitter spreads probes in time: each wait between two probes of a target is drawn
	// uniformly from Interval×(1±Jitter). 0 or less means [DefaultJitter]; more than
	// [MaxJitter] means MaxJitter. Jitter cannot be turned off: targets added together would
	// then probe together for ever.
	Jitter float64
	// OnChange, when not nil, is called with every change of a target's Health, from a single
	// goroutine and with no lock of the Checker held (see the package doc). It should return
	// quickly: updates wait while it runs.
	OnChange func(Update)
	// RootCAs are the certificate authorities that HTTPS checks with [Check.VerifyTLS]
	// trust; nil means the system's.
	RootCAs *x509.CertPool
	// Logger receives health changes (at Info and Warn, a target's first success at Debug);
	// nil means slog.Default().
	Logger *slog.Logger
}

// Checker probes a set of targets and keeps a verdict for each. Make one with [New], give it
// targets with [Checker.Set] and start it with [Checker.Run]; its methods may be called from
// any goroutine, and from OnChange.
type Checker struct {
	maxConcurrent int
	jitter        float64
	onChange      func(Update)
	rootCAs       *x509.CertPool
	log           *slog.Logger
	dialer        net.Dialer

	// probeHook, when set (by tests, before Run), is called with true as a probe starts and
	// false as it ends.
	probeHook func(start bool)

	// wake tells the scheduler that the schedule changed (capacity 1: one pending signal is
	// enough).
	wake chan struct{}
	// notifyc tells the notifier that notify is not empty (capacity 1).
	notifyc chan struct{}

	mu sync.Mutex
	// started is set by the first Run.
	started bool
	// targets maps Target.Key to the target's entry: every target of the last Set that was
	// valid, and only those.
	targets map[string]*entry
	// queue holds the entries waiting for their next probe, the earliest due first; an entry
	// whose probe is running is out of it.
	queue schedule
	// notify lists, oldest first, the keys whose Health may differ from what OnChange was last
	// told.
	notify []string
}

// New returns a Checker with no targets; it probes nothing until [Checker.Run] is called.
func New(opts Options) *Checker {
	c := &Checker{
		maxConcurrent: opts.MaxConcurrent,
		jitter:        opts.Jitter,
		onChange:      opts.OnChange,
		rootCAs:       opts.RootCAs,
		log:           opts.Logger,
		wake:          make(chan struct{}, 1),
		notifyc:       make(chan struct{}, 1),
		targets:       make(map[string]*entry),
	}
	if c.maxConcurrent <= 0 {
		c.maxConcurrent = DefaultMaxConcurrent
	}
	if c.jitter <= 0 {
		c.jitter = DefaultJitter
	}
	c.jitter = min(c.jitter, MaxJitter)
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// Set replaces the Checker's targets with targets, matching old and new by Key:
//   - a new key is probed for the first time at a random point of its first interval, so that
//     targets added together are spread over it, and starts Unknown;
//   - a key whose probe is unchanged (same destination, kind, path, host, status, payload and
//     so on) keeps its Health, counters and schedule; new timings or thresholds apply from its
//     next probe;
//   - a key whose probe changed starts again, Unknown (OnChange hears of it if it had a
//     verdict, unless the new probe's first verdict, the same as the old one, is in before the
//     update is delivered: updates are level-triggered), with a first probe soon, within
//     Jitter×Interval;
//   - a key that is gone stops: its running probe is cancelled and no OnChange call for it
//     starts after Set returns (one already running may still finish).
//
// Set applies every valid target and returns an error naming each invalid one (by Key, or by
// index when the Key is empty); an invalid target is treated as absent, and of two targets with
// the same Key the first is used.
func (c *Checker) Set(targets []Target) error {
	now := time.Now()
	var errs []error
	c.mu.Lock()
	seen := make(map[string]int, len(targets)) // Key → index in targets
	notify := false
	for i, t := range targets {
		if err := t.Validate(); err != nil {
			if t.Key == "" {
				err = fmt.Errorf("targets[%d]: %w", i, err)
			}
			errs = append(errs, err)
			continue
		}
		if j, dup := seen[t.Key]; dup {
			errs = append(errs, fmt.Errorf("target %q: targets[%d] has the same Key as targets[%d]", t.Key, i, j))
			continue
		}
		seen[t.Key] = i
		t.Check = t.Check.withDefaults()
		if c.update(t, now) {
			notify = true
		}
	}
	for key, e := range c.targets {
		if _, ok := seen[key]; !ok {
			c.remove(e)
		}
	}
	c.mu.Unlock()
	signal(c.wake)
	if notify {
		signal(c.notifyc)
	}
	return errors.Join(errs...)
}

// update adds t, valid and with its defaults applied, or updates the entry of its key, and
// reports whether the key was queued for OnChange. c.mu must be held.
func (c *Checker) update(t Target, now time.Time) bool {
	old, ok := c.targets[t.Key]
	switch {
	case !ok:
		e := newEntry(t, now, "not probed yet")
		e.due = now.Add(rand.N(t.Check.Interval))
		c.targets[t.Key] = e
		c.queue.push(e)
		return false
	case old.dest == t.dest() && old.target.Check.sameProbe(t.Check):
		oldInterval := old.target.Check.Interval
		old.target = t
		if next := now.Add(c.jittered(t.Check.Interval)); old.index >= 0 && t.Check.Interval < oldInterval && next.Before(old.due) {
			old.due = next
			c.queue.fix(old)
		}
		return false
	}
	c.remove(old)
	e := newEntry(t, now, "probe changed, not probed yet")
	e.reported, e.queued = old.reported, old.queued
	e.due = now.Add(rand.N(max(time.Duration(float64(t.Check.Interval)*c.jitter), 1)))
	c.targets[t.Key] = e
	c.queue.push(e)
	if e.reported != e.state.Health {
		return c.enqueue(e)
	}
	return false
}

// remove forgets e: out of the schedule and of targets, its running probe cancelled. c.mu must
// be held.
func (c *Checker) remove(e *entry) {
	c.queue.remove(e)
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
	delete(c.targets, e.target.Key)
}

// enqueue queues e's key for OnChange unless it already waits, and reports whether it queued
// it. c.mu must be held.
func (c *Checker) enqueue(e *entry) bool {
	if e.queued {
		return false
	}
	e.queued = true
	c.notify = append(c.notify, e.target.Key)
	return true
}

// Status returns the state of the target with the given key, and false if there is none.
func (c *Checker) Status(key string) (State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.targets[key]
	if !ok {
		return State{}, false
	}
	return e.state, true
}

// Snapshot returns the state of every target, by key, for metrics and debugging.
func (c *Checker) Snapshot() map[string]State {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]State, len(c.targets))
	for key, e := range c.targets {
		m[key] = e.state
	}
	return m
}

// jittered returns d moved by a random fraction of up to ±c.jitter.
func (c *Checker) jittered(d time.Duration) time.Duration {
	return d + time.Duration(float64(d)*c.jitter*(2*rand.Float64()-1))
}

// signal makes a pending signal on ch, a channel of capacity 1, if there is none.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// SPDX-License-Identifier: Apache-2.0
package health

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Run probes the targets until ctx is done, then waits for its goroutines (a scheduler, the
// notifier and [Options.MaxConcurrent] workers) to stop, a running OnChange call to return
// and running probes to be cancelled, and returns nil. No OnChange call starts after it
// returns. A Checker runs once: a second call returns an error at once.
func (c *Checker) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("health checker: Run called twice")
	}
	c.started = true
	c.mu.Unlock()

	jobs := make(chan *entry)
	var wg sync.WaitGroup
	for range c.maxConcurrent {
		wg.Go(func() { c.work(ctx, jobs) })
	}
	wg.Go(func() { c.deliver(ctx) })
	c.dispatch(ctx, jobs)
	wg.Wait()
	return nil
}

// dispatch hands due entries to the workers through jobs, earliest first, until ctx is done.
// It blocks while every worker is busy, so late probes wait in the schedule, not in goroutines.
func (c *Checker) dispatch(ctx context.Context, jobs chan<- *entry) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		e, wait := c.queue.popDue(time.Now())
		c.mu.Unlock()
		if e != nil {
			select {
			case jobs <- e:
				continue
			case <-ctx.Done():
				c.requeue(e)
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-c.wake:
		case <-ctx.Done():
			return
		}
	}
}

// requeue puts e, taken from the schedule but not probed, back in it if it is still current.
func (c *Checker) requeue(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.targets[e.target.Key] == e && e.index < 0 && e.cancel == nil {
		c.queue.push(e)
	}
}

// work probes the entries it receives from jobs until ctx is done.
func (c *Checker) work(ctx context.Context, jobs <-chan *entry) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-jobs:
			c.probeEntry(ctx, e)
		}
	}
}

// probeEntry probes e once, unless Set removed it meanwhile, and records the result.
func (c *Checker) probeEntry(ctx context.Context, e *entry) {
	c.mu.Lock()
	if c.targets[e.target.Key] != e {
		c.mu.Unlock()
		return
	}
	chk, dest := e.target.Check, e.dest
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, chk.Timeout)
	defer cancel()
	e.cancel = cancel
	c.mu.Unlock()

	if c.probeHook != nil {
		c.probeHook(true)
		defer c.probeHook(false)
	}
	err := c.probe(pctx, dest, chk)
	end := time.Now()
	switch {
	case ctx.Err() != nil || errors.Is(pctx.Err(), context.Canceled):
		// Shut down, removed or replaced: the result says nothing about the backend.
		c.complete(e, start, end, nil, false)
		return
	case err != nil && !end.Before(start.Add(chk.Timeout)):
		// The deadline expired: the connection's deadline may fire before the context
		// records it, so the clock decides.
		err = &timeoutError{err: err, timeout: chk.Timeout}
	}
	c.complete(e, start, end, err, true)
}

// complete records, when valid is set, the result of e's probe that ran from start to end,
// schedules e's next probe and queues an update if e's Health changed. It does nothing if e was
// removed.
func (c *Checker) complete(e *entry, start, end time.Time, err error, valid bool) {
	c.mu.Lock()
	e.cancel = nil
	if c.targets[e.target.Key] != e {
		c.mu.Unlock()
		return
	}
	changed := valid && e.record(start, end, err)
	queued := changed && c.enqueue(e)
	e.due = start.Add(c.jittered(e.target.Check.Interval))
	if e.due.Before(end) {
		e.due = end
	}
	c.queue.push(e)
	key, dest, st := e.target.Key, e.dest, e.state
	c.mu.Unlock()

	signal(c.wake)
	if queued {
		signal(c.notifyc)
	}
	if changed {
		c.logChange(key, dest.String(), st)
	}
}

// logChange logs that the target with key, probed at dest, has a new state st.
func (c *Checker) logChange(key, dest string, st State) {
	attrs := []any{"key", key, "addr", dest, "health", st.Health, "reason", st.Reason}
	switch {
	case st.Health == Unhealthy:
		c.log.Warn("backend unhealthy", attrs...)
	case st.Probes == 1:
		c.log.Debug("backend healthy", attrs...)
	default:
		c.log.Info("backend healthy", attrs...)
	}
}

// deliver calls OnChange for the keys queued in c.notify until ctx is done.
func (c *Checker) deliver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.notifyc:
		}
		c.mu.Lock()
		batch := c.notify
		c.notify = nil
		c.mu.Unlock()
		for _, key := range batch {
			if ctx.Err() != nil {
				return
			}
			if u, ok := c.takeUpdate(key); ok && c.onChange != nil {
				c.onChange(u)
			}
		}
	}
}

// takeUpdate returns the Update to deliver for key, and false when the key is gone or its
// Health is what OnChange was last told.
func (c *Checker) takeUpdate(key string) (Update, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.targets[key]
	if !ok {
		return Update{}, false
	}
	e.queued = false
	if e.state.Health == e.reported {
		return Update{}, false
	}
	e.reported = e.state.Health
	return Update{Key: key, Health: e.state.Health, Reason: e.state.Reason}, true
}

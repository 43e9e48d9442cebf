// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/xlb-dev/xlb/lb/ipam"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderOptions configure the leader election (a coordination.k8s.io Lease). Zero fields take
// the defaults below.
type LeaderOptions struct {
	// Namespace holds the Lease; default "xlb-system".
	Namespace string
	// Name is the Lease's name; default "xlb-controller".
	Name string
	// Identity names this gateway in the Lease; default the host name.
	Identity string
	// LeaseDuration is how long followers wait before taking a lease that is not renewed
	// (the longest time without a leader when one dies); default 15s.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before giving up; default 10s,
	// less than LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between attempts; default 2s, less than RenewDeadline.
	RetryPeriod time.Duration
}

// check applies the defaults and checks the durations' order.
func (o *LeaderOptions) check() error {
	if o.Namespace == "" {
		o.Namespace = "xlb-system"
	}
	if o.Name == "" {
		o.Name = "xlb-controller"
	}
	if o.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("kube: leader identity: %w", err)
		}
		o.Identity = h
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if !(o.RetryPeriod < o.RenewDeadline && o.RenewDeadline < o.LeaseDuration) {
		return fmt.Errorf("kube: leader election wants retryPeriod (%v) < renewDeadline (%v) < leaseDuration (%v)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	return nil
}

// elect takes part in the leader election until ctx ends. Leading, the controller allocates and
// writes status; following, it reads the addresses from status. Forwarding never depends on it.
func (c *Controller) elect(ctx context.Context) {
	o := c.opts.Leader
	for ctx.Err() == nil {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
			Client:     c.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: "xlb", ReleaseOnCancel: true,
			LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: c.lead,
				OnStoppedLeading: c.follow,
				OnNewLeader: func(id string) {
					c.log.Info("controller leader", "leader", id, "me", id == o.Identity)
				},
			},
		})
		if err != nil {
			c.log.Error("leader election", "err", err)
			return
		}
		le.Run(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(o.RetryPeriod):
		}
	}
}

// lead makes the controller the leader: it rebuilds the allocator from the Services' status,
// then re-syncs every Service.
//
// ctx ends when the lease is lost: client-go then calls follow, possibly before lead is done, so
// lead takes the role only if ctx is still alive once it holds the lock.
func (c *Controller) lead(ctx context.Context) {
	var alloc *ipam.Allocator
	var gen uint64
	for {
		var err error
		if alloc, gen, err = c.prime(ctx); err == nil {
			break
		}
		c.log.Error("cannot lead yet: rebuilding the allocations", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.opts.Leader.RetryPeriod):
		}
	}
	c.mu.Lock()
	if ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	if gen != c.poolsGen { // pools reloaded while priming
		ps := make([]ipam.Pool, 0, len(c.opts.Pools))
		for _, p := range c.opts.Pools {
			ps = append(ps, p.Pool)
		}
		if _, err := alloc.SetPools(ps); err != nil {
			c.log.Error("reloaded pools refused by the new allocator", "err", err)
		}
	}
	c.alloc, c.leading = alloc, true
	c.mu.Unlock()
	c.log.Info("leading: allocating addresses and writing status", "identity", c.opts.Leader.Identity)
	c.enqueueAll()
}

// follow makes the controller a follower (the lease was lost or released).
func (c *Controller) follow() {
	c.mu.Lock()
	was := c.leading
	c.alloc, c.leading = nil, false
	c.mu.Unlock()
	if was {
		c.log.Info("no longer leading", "identity", c.opts.Leader.Identity)
		c.enqueueAll()
	}
}

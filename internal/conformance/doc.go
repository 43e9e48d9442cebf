// SPDX-License-Identifier: Apache-2.0

// Package conformance holds the scenarios every datapath must pass when a reconciler drives it
// through the datapath contract (xdp/datapath): a plan written exactly, nothing written twice,
// state adopted from an earlier process, failures contained and retried, the order of writes
// that keeps packets from being sent wrong.
//
// The scenarios are written once and run against each implementation: lb/reconcile's tests run
// them against the pure-Go balancer (xdp/forward) without root; this package's own tests run
// them against the XDP datapath (its pinned maps, as root) and the AF_XDP engine. Services
// builds synthetic services for those tests and for the control-plane benchmarks.
package conformance

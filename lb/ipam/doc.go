// SPDX-License-Identifier: Apache-2.0

// Package ipam hands out the VIPs of LoadBalancer Services from address pools: xlb's IP address
// manager. It is pure Go (no kernel, no Kubernetes): the controller turns Services into
// [Request] values and writes the answers into their status.
//
// # State is derived
//
// An [Allocator] stores nothing the cluster does not already hold. On start the controller
// creates one, gives it the pools ([Allocator.SetPools]) and feeds every Service's current
// status addresses back in with [Allocator.Assign], oldest Service first: an address claimed by
// two Services goes to the older one, and the newer one gets an [*Error] naming it. There is
// one record per owner (its addresses, sharing key and ports); the address → owners index is
// kept in step with those records in one place.
//
// # Choices
//
//   - Pools are tried in configuration order: the first pool that admits a Service and has a
//     free address of the wanted family wins, so the operator orders pools by preference.
//     Within a pool, ranges are tried in address order and the lowest free address is taken.
//     The same requests in the same order give the same addresses on every run.
//   - A Service with a sharing key first looks for an address already used under that key
//     (in the pools it may use, in pool order, lowest first) whose Services use none of its
//     ports; only then does it take a free address.
//   - Assign keeps what a Service already has whenever it is still allowed, so calling it again
//     changes nothing, and a Service's address changes only when the Service asks for another
//     (loadBalancerIP, the addresses annotation, the pool annotation, its IP families).
//   - A serving VIP is never taken away because the configuration changed: when a pool
//     shrinks, disappears or stops admitting a Service (namespaces, selector), the Service
//     keeps its address. [Allocator.SetPools] reports those owners and [Allocator.Orphaned]
//     names their addresses, so that the controller can warn; nobody else can be given the
//     address meanwhile. The Service moves when its owner requests another address or pool,
//     or is deleted and recreated; putting the address back into a pool ends the warning.
//   - autoAssign: false only stops new automatic allocations from a pool: a Service that holds
//     an address of it keeps it.
//   - A failed Assign leaves an owner's existing record as it was. For an owner it did not
//     know (the rebuild), it still records those of the current addresses no other owner
//     holds, so that an address in a Service's status is never handed to another Service.
//
// Big pools (an IPv6 /64) cost nothing: free addresses are found by walking the sorted used
// addresses from the start of a range, never by listing the range.
package ipam

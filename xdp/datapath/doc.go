// SPDX-License-Identifier: Apache-2.0

// Package datapath is the contract between xlb's control plane and its datapaths: the words
// both speak (frontends, backends, endpoints, protocols, ids, flows, counters), the limits of
// the ids and tables, the settings every gateway of a site must share, the flow hash that picks
// a Maglev slot, and the interfaces a datapath implements.
//
// Every datapath implements it: the XDP program (package xdp), the AF_XDP engine (xdp/afxdp),
// the pure-Go balancer (xdp/forward) and the node agent's socket load balancer (xdp/socklb).
// The reconcilers (lb/reconcile) and the appliance (lb/gateway, lb/agent) consume it as
// interfaces and never import a concrete datapath: cmd/xlb wires one in.
//
// The package is pure Go with no kernel imports. Its C half is datapath.h (with flowhash.h and
// csum.h) in this directory, included by every BPF program; TestHeaderMatchesGo checks that
// the two halves agree, and each loader checks its object's map sizes against the limits here
// when it loads.
package datapath

// SPDX-License-Identifier: Apache-2.0

// Package lb is xlb's service model: the Services an appliance balances, their VIPs, ports and
// backends, and Plan, which turns them into the desired datapath state (frontends, Maglev tables,
// reverse NAT) that every gateway computes identically. It is pure Go: no kernel and no
// Kubernetes imports. Sources of desired state (a YAML file, the Kubernetes API, health checks)
// fill the model; reconcilers (lb/reconcile) drive the datapath from the plan.
package lb

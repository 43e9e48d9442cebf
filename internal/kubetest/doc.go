// SPDX-License-Identifier: Apache-2.0

// Package kubetest runs a real Kubernetes control plane (etcd and kube-apiserver, built from
// the Go module proxy by kubebins/build.sh) on 127.0.0.1 for tests, or in a network namespace
// bound to a lab address for the lab (Options.NetNS, Options.Address).
//
// Only the apiserver runs: there is no scheduler, controller-manager or kubelet, so callers
// create the objects those would (EndpointSlices, Nodes) themselves. Authorization is RBAC
// only, and the identities callers act as are pre-registered bearer tokens (see Identity).
package kubetest

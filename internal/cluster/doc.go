// SPDX-License-Identifier: Apache-2.0

// Package cluster runs a real Kubernetes cluster on one machine for xlb's conformance runs:
// etcd and kube-apiserver (internal/kubetest), kube-controller-manager and kube-scheduler in a
// control network namespace, and per node a network namespace and a private mount namespace
// holding the node's own containerd (with runc), kubelet and kube-proxy (nftables mode), Pods
// wired by the CNI ptp and host-local plugins with routed per-node Pod ranges. Every binary is
// built from the Go module proxy (clusterbins/build.sh), every image locally (BuildImages); all
// state lives under one directory, and Close removes the processes, namespaces, cgroups and
// files it made.
//
// Address plan (lab ranges only): nodes 198.18.0.11, .12, … on the cluster L2 whose bridge is
// in the control namespace at 198.18.0.1 (also the apiserver), Pods 198.18.128.0/17 with a /24
// per node, Services 198.18.96.0/24.
package cluster

// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"fmt"
	"strings"
)

// Mode is where the gateways get their services from.
type Mode int

const (
	// File: each gateway's xlb config lists the service "demo" with the pods as backends
	// (SetBackends rewrites it). The zero value.
	File Mode = iota
	// Kubernetes: the site runs a control plane (etcd and kube-apiserver in the control
	// namespace), each gateway's xlb runs as a LoadBalancer-class controller (config sections
	// kubernetes and pools, no services), and the lab plays the kubelet and the EndpointSlice
	// controller: Node objects for its nodes, EndpointSlices for its pods, kube-proxy's health
	// servers on each node. See kube.go.
	Kubernetes
)

func (m Mode) String() string {
	switch m {
	case File:
		return "file"
	case Kubernetes:
		return "kubernetes"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "file" or "kubernetes".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "file":
		return File, nil
	case "kubernetes", "kube", "k8s":
		return Kubernetes, nil
	}
	return 0, fmt.Errorf("lab: mode %q: want kubernetes or file", s)
}

// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package clusterbins records the commands that build.sh builds, so that go mod tidy keeps
// their dependencies in go.mod and go.sum.
package clusterbins

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/agnhost"
)

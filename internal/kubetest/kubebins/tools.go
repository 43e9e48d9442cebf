// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package kubebins records the commands that build.sh builds, so that go mod tidy
// keeps their dependencies in go.mod and go.sum.
package kubebins

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)

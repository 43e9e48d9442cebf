// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package helmbin records the command that build.sh builds, so that go mod tidy keeps its
// dependencies in go.mod and go.sum.
package helmbin

import (
	_ "helm.sh/helm/v4/cmd/helm"
)

// SPDX-License-Identifier: Apache-2.0

// Package controllergen pins the version of controller-gen (sigs.k8s.io/controller-tools) that
// generates xlb's CustomResourceDefinitions and deep-copy functions from lb/kube/api. It is a
// module of its own so that controller-tools' dependencies stay out of xlb's go.mod;
// `make generate` builds the tool from here (a `tool` directive in go.mod) and runs it.
package controllergen

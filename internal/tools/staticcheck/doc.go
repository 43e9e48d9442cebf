// SPDX-License-Identifier: Apache-2.0

// Package staticcheck pins the version of staticcheck (honnef.co/go/tools) that `make check`
// runs. It is a module of its own so that its dependencies stay out of xlb's go.mod; `make
// check` builds the tool from here (a `tool` directive in go.mod) and runs it.
package staticcheck
